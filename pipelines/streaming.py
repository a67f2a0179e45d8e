"""Micro-batch streams of topics, in the manner of Spark's `foreachBatch`.

Each trigger plans a batch (from where the last one ended up to the high watermark, within
`maxOffsetsPerTrigger`: `pipelines.stream_plan`), hands its DataFrame to `fn(df, batch_id)`,
and counts it done only when `fn` returns. If `fn` raises, the same batch, with the same id and
exactly the same offset ranges, runs again; after `max_attempts` failures the stream stops and
keeps the error for `await_termination()` to raise.

Where a stream keeps its progress:

* `checkpoint=PATH` (Spark's `checkpointLocation`): each batch's ranges are written before it
  runs and its end after (`pipelines.checkpoint`), so a stream restarted in a new driver
  process runs an unfinished batch again with the same id, the same ranges and the same
  number of read tasks, then goes on. With `output_topic=`, what `fn` returns is written to
  that topic each record once however often its batch runs (`pipelines.spark_writes`): an
  exactly-once pipeline, topic to topic. With `transactional=True` too, each batch's output
  and its source offsets are one Kafka transaction (`pipelines.transactional_sink`), so a
  read_committed reader sees each batch whole or not at all, and a batch that committed
  before the driver died is not run again. Another sink can be made exactly-once by keying
  its writes by `batch_id`.
* `group`: the group's committed offsets move at the end of each batch (at-least-once, as a
  Kafka consumer commits); without a checkpoint, a restarted stream starts from them, with
  batch ids from 0 again. With both, the checkpoint says where to start and the group's
  offsets show the stream's progress (lag) to Kafka's tools.

Triggers, as Spark's: "processingTime" (a batch every `trigger_interval` s, the default),
"once" (one batch of everything there, then stop) and "availableNow" (everything there when
the stream starts, in batches within `maxOffsetsPerTrigger`, then stop).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from pyspark.sql import DataFrame, SparkSession

from rafka.actors.cluster import Cluster
from rafka.actors.errors import UnknownTopicError
from rafka.pipelines.checkpoint import StreamCheckpoint
from rafka.pipelines.sequenced_sink import SinkColumns
from rafka.pipelines.source_options import OffsetRanges, SourceOptions
from rafka.pipelines.spark_reads import read_tasks as spark_read_tasks
from rafka.pipelines.stream_plan import next_ranges, record_count, should_run
from rafka.pipelines.topics import (
    offset_ranges,
    partition_bounds,
    ranges_frame,
    source_options,
    write_topic,
)
from rafka.pipelines.transactional_sink import BatchReceipt, write_frame_in_transaction

log = logging.getLogger(__name__)

BatchFunction = Callable[[DataFrame, int], object]
# Kafka's transaction.timeout.ms for a transactional stream's batches.
TRANSACTION_TIMEOUT_MS = 60_000
TRIGGERS = ("processingTime", "once", "availableNow")


class TopicStream:
    """A running stream; `stop()` ends it after the batch in progress."""

    def __init__(
        self,
        spark: SparkSession,
        cluster: Cluster,
        options: SourceOptions,
        group: str | None,
        fn: BatchFunction,
        *,
        checkpoint: StreamCheckpoint | None,
        output_topic: str | None,
        transactional: bool,
        trigger: str,
        trigger_interval: float,
        max_attempts: int,
    ) -> None:
        self.spark, self.cluster, self.options, self.group, self.fn = (
            spark, cluster, options, group, fn)
        self.checkpoint = checkpoint
        self.output_topic = output_topic
        self.transactional = transactional
        self.trigger = trigger
        self.trigger_interval = trigger_interval
        self.max_attempts = max_attempts
        self.batch_id = 0  # the id of the next batch
        self.attempts = 0
        self.failed_attempts = 0
        self.records_processed = 0
        self.batches: list[tuple[int, OffsetRanges]] = []  # each batch that finished
        self._positions: dict[tuple[str, int], int] | None = None
        self._last_batch_at = time.monotonic()
        self._error: BaseException | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="rafka-stream", daemon=True)

    def start(self) -> TopicStream:
        self._thread.start()
        return self

    @property
    def is_active(self) -> bool:
        return self._thread.is_alive()

    # -------------------------------------------------------------------------- the loop

    def _run(self) -> None:
        try:
            self._recover()
            target = None
            if self.trigger == "availableNow":
                target = {tp: high_watermark for tp, (_start, high_watermark)
                          in partition_bounds(self.cluster, self.options).items()}
            while not self._stop.is_set():
                started = time.monotonic()
                ranges = self._plan(limited=self.trigger != "once", until=target)
                if ranges is not None:
                    self._run_batch(ranges)
                if self.trigger == "once" or (target is not None and self._reached(target)):
                    return
                self._stop.wait(max(0.0, self.trigger_interval - (time.monotonic() - started)))
        except BaseException as error:  # fn failed max_attempts times, or the cluster did
            self._error = error
            log.error("stream stopped at batch %d: %r", self.batch_id, error)

    def _recover(self) -> None:
        """Where to start: a checkpoint's unfinished batch runs again first."""
        if self.checkpoint is None:
            return
        last = self.checkpoint.last_batch()
        if last is None:
            return
        if not last.committed and self.transactional \
                and self._receipt(last.ranges).found() is not None:
            # Its transaction committed; the driver died before the checkpoint said so.
            self.checkpoint.commit(last.batch_id)
            last = last._replace(committed=True)
        if last.committed:
            self.batch_id = last.batch_id + 1
            self._positions = {tp: until for tp, (_start, until) in last.ranges.items()}
            return
        log.info("batch %d did not finish before the stream stopped: it runs again",
                 last.batch_id)
        self.batch_id = last.batch_id
        self._positions = {tp: start for tp, (start, _until) in last.ranges.items()}
        self._run_batch(last.ranges, read_tasks=last.read_tasks)

    def _plan(self, *, limited: bool, until: Mapping[tuple[str, int], int] | None
              ) -> OffsetRanges | None:
        """The next batch's ranges, or None if this trigger runs none."""
        options = self.options
        bounds = partition_bounds(self.cluster, options)
        if self._positions is None:  # the stream's first batch
            first = offset_ranges(self.cluster, options, self.group, bounds=bounds)
            self._positions = {tp: start for tp, (start, _until) in first.items()}
        ranges = next_ranges(bounds, self._positions,
                             max_offsets=options.max_offsets_per_trigger if limited else None,
                             fail_on_data_loss=options.fail_on_data_loss, until=until)
        waited_ms = (time.monotonic() - self._last_batch_at) * 1000
        # minOffsetsPerTrigger holds back a periodic trigger; "once" and "availableNow" read
        # what is there and stop, so nothing they could wait for would come in time.
        min_offsets = (options.min_offsets_per_trigger
                       if self.trigger == "processingTime" else None)
        if not should_run(record_count(ranges), min_offsets=min_offsets,
                          since_last_batch_ms=waited_ms,
                          max_trigger_delay_ms=options.max_trigger_delay_ms):
            return None
        return ranges

    def _reached(self, target: Mapping[tuple[str, int], int]) -> bool:
        positions = self._positions or {}
        return all(positions.get(tp, 0) >= end for tp, end in target.items())

    def _run_batch(self, ranges: OffsetRanges, *, read_tasks: int | None = None) -> None:
        """Run batch `self.batch_id` over `ranges` until `fn` returns (or fails
        `max_attempts` times: raised). `read_tasks` is given for a batch planned before (a
        checkpoint's unfinished one); a new one is planned here."""
        if read_tasks is None:
            read_tasks = spark_read_tasks(self.spark, self.options.min_partitions)
            if self.checkpoint is not None:
                self.checkpoint.plan(self.batch_id, ranges, read_tasks)
        while True:
            frame = ranges_frame(self.spark, self.cluster, ranges, self.group, self.options,
                                 tasks=read_tasks)
            self.attempts += 1
            try:
                output = self.fn(frame, self.batch_id)
                if self.output_topic is not None:
                    self._write_output(output, ranges)
                break
            except Exception:
                self.failed_attempts += 1
                if self.failed_attempts >= self.max_attempts:
                    raise
                log.warning("batch %d failed (attempt %d of %d); it runs again", self.batch_id,
                            self.failed_attempts, self.max_attempts, exc_info=True)
                if self._stop.wait(min(self.trigger_interval, 1.0)):
                    raise
        if self.group is not None and not self.transactional:  # else committed with the output
            frame.commit()
        if self.checkpoint is not None:
            self.checkpoint.commit(self.batch_id)
        self.failed_attempts = 0
        self.records_processed += record_count(ranges)
        self.batches.append((self.batch_id, dict(ranges)))
        self._positions = {**(self._positions or {}),
                           **{tp: until for tp, (_start, until) in ranges.items()}}
        self._last_batch_at = time.monotonic()
        self.batch_id += 1

    def _write_output(self, output: object, ranges: OffsetRanges) -> None:
        """Write what `fn` returned for this batch, each record once however often the batch
        runs: its write id is the stream's and the batch's (`pipelines.spark_writes`); or,
        transactional, in one transaction with the batch's source offsets
        (`pipelines.transactional_sink`)."""
        if not isinstance(output, DataFrame):
            raise TypeError(f"with output_topic=, fn returns the batch's output DataFrame "
                            f"(a 'value' column; 'key', 'partition', 'headers' optional), not "
                            f"{type(output).__name__}")
        # stream_topic requires a checkpoint with output_topic, and calls this only with one.
        assert self.checkpoint is not None and self.output_topic is not None
        present = set(output.columns)
        if self.transactional:
            columns = SinkColumns("key" if "key" in present else None, "value",
                                  "partition" if "partition" in present else None,
                                  "headers" if "headers" in present else None)
            write_frame_in_transaction(
                output, self.cluster, self.output_topic, columns,
                f"rafka.stream.{self.checkpoint.stream_id}", receipt=self._receipt(ranges),
                timeout_s=120.0, transaction_timeout_ms=TRANSACTION_TIMEOUT_MS)
            return
        write_topic(output, self.cluster, self.output_topic,
                    key_col="key" if "key" in present else None,
                    partition_col="partition" if "partition" in present else None,
                    headers_col="headers" if "headers" in present else None,
                    write_id=f"{self.checkpoint.stream_id}/{self.batch_id}")

    def _receipt(self, ranges: OffsetRanges) -> BatchReceipt:
        """A transactional batch's receipt: its source offsets, committed with its output to
        the stream's group (or, without one, to a group of the stream's own)."""
        assert self.checkpoint is not None
        return BatchReceipt(self.cluster,
                            self.group or f"rafka.stream.{self.checkpoint.stream_id}", ranges)

    # ------------------------------------------------------------------------ control

    def stop(self, timeout_s: float | None = 120.0) -> None:
        self._stop.set()
        self._thread.join(timeout_s)

    def await_termination(self, timeout_s: float | None = None) -> bool:
        """Wait for the stream to end; raise the error that ended it, if any."""
        self._thread.join(timeout_s)
        if self._error is not None:
            raise self._error
        return not self._thread.is_alive()

    def exception(self) -> BaseException | None:
        return self._error


def stream_topic(
    spark: SparkSession,
    cluster: Cluster,
    topic: str | Sequence[str] | None,
    group: str | None,
    fn: BatchFunction,
    *,
    options: Mapping[str, Any] | None = None,
    checkpoint: str | None = None,
    output_topic: str | None = None,
    transactional: bool = False,
    trigger: str = "processingTime",
    trigger_interval: float = 1.0,
    max_records_per_batch: int | None = None,
    max_attempts: int = 3,
) -> TopicStream:
    """Start micro-batches of `topic` (or of what `options` subscribe to, under Spark's
    names); each DataFrame goes to `fn(df, batch_id)`. Returns the running stream.

    `checkpoint`, `group` or both say where the stream keeps its progress (see the module's
    text); `trigger` is "processingTime" (every `trigger_interval` s), "once" or
    "availableNow"; `max_records_per_batch` is `maxOffsetsPerTrigger`.

    With `output_topic` (and a `checkpoint`), `fn` returns a DataFrame of the batch's output
    with Spark's Kafka-sink columns (`value`; `key`, `partition`, `headers` if it has them),
    and the stream writes it to `output_topic`: each record once, even when the batch runs
    again in a restarted driver, if `fn` gives the same rows each time
    (`pipelines.spark_writes`). `transactional=True` writes each batch's output and its
    source offsets (to `group`, or to the stream's own group `rafka.stream.<id>`) in one
    Kafka transaction: a read_committed consumer of the output sees each batch whole or not
    at all, and `fn` may give other rows when its batch runs again
    (`pipelines.transactional_sink`).
    """
    if max_attempts < 1:
        raise ValueError("max_attempts must be at least 1")
    if trigger not in TRIGGERS:
        raise ValueError(f"trigger={trigger!r}: use one of {', '.join(TRIGGERS)}")
    if output_topic is not None and checkpoint is None:
        raise ValueError("output_topic= writes each batch once by the stream's identity and "
                         "batch ids, which live in its checkpoint: give checkpoint= too")
    if transactional and output_topic is None:
        raise ValueError("transactional=True writes the output in transactions: give "
                         "output_topic= (and checkpoint=)")
    if output_topic is not None and not cluster.topic_exists(output_topic):
        raise UnknownTopicError(f"output topic {output_topic!r} does not exist: create it "
                                "first")
    if group is None and checkpoint is None:
        raise ValueError("a stream keeps its progress in a checkpoint=, a group=, or both: "
                         "give at least one")
    parsed = source_options(topic, options, streaming=True, group=group,
                            max_records_per_batch=max_records_per_batch)
    state = None
    if checkpoint is not None:
        state = StreamCheckpoint(checkpoint, parsed.stream_source())
    return TopicStream(spark, cluster, parsed, group, fn, checkpoint=state,
                       output_topic=output_topic, transactional=transactional, trigger=trigger,
                       trigger_interval=trigger_interval,
                       max_attempts=max_attempts).start()
