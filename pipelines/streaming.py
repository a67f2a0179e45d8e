"""Micro-batch streaming from a consumer group, in the manner of Spark's `foreachBatch`.

Each trigger reads what the group has not consumed yet (from its committed offsets up to the
high watermark, at most `max_records_per_batch` records per partition), hands the DataFrame to
`fn(df, batch_id)`, and commits only when `fn` returns: at-least-once, and exactly-once with an
idempotent sink keyed by `batch_id`. If `fn` raises, nothing is committed and the same batch,
with the same id, comes again; after `max_attempts` failures the stream stops and keeps the
error for `await_termination()` to raise.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable

from pyspark.sql import DataFrame, SparkSession

from rafka.actors.cluster import Cluster
from rafka.pipelines.topics import read_topic

log = logging.getLogger(__name__)

BatchFunction = Callable[[DataFrame, int], object]


class TopicStream:
    """A running stream; `stop()` ends it after the batch in progress."""

    def __init__(
        self,
        spark: SparkSession,
        cluster: Cluster,
        topic: str,
        group: str,
        fn: BatchFunction,
        *,
        trigger_interval: float,
        max_records_per_batch: int | None,
        max_attempts: int,
    ) -> None:
        self.spark, self.cluster, self.topic, self.group, self.fn = (
            spark, cluster, topic, group, fn)
        self.trigger_interval = trigger_interval
        self.max_records_per_batch = max_records_per_batch
        self.max_attempts = max_attempts
        self.batch_id = 0  # the id of the next batch
        self.attempts = 0
        self.failed_attempts = 0
        self.records_processed = 0
        self._error: BaseException | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"stream-{topic}", daemon=True)

    def start(self) -> TopicStream:
        self._thread.start()
        return self

    @property
    def is_active(self) -> bool:
        return self._thread.is_alive()

    def _ending_offsets(self) -> str:
        """`max_records_per_batch` shared among the partitions in proportion to their backlog,
        as Spark's maxOffsetsPerTrigger is."""
        if self.max_records_per_batch is None:
            return "latest"
        bounds = self.cluster.offset_bounds(self.topic)
        committed = self.cluster.committed_offsets(
            self.group, [(self.topic, p) for p in bounds])
        starts = {}
        for partition, (log_start, _high_watermark) in bounds.items():
            start = committed.get((self.topic, partition))
            starts[partition] = log_start if start is None else max(start, log_start)
        backlog = {p: bounds[p][1] - starts[p] for p in bounds}
        total = sum(backlog.values())
        scale = min(1.0, self.max_records_per_batch / total) if total else 1.0
        ends = {str(p): starts[p] + int(backlog[p] * scale) for p in bounds}
        return json.dumps({self.topic: ends})

    def _run(self) -> None:
        while not self._stop.is_set():
            started = time.monotonic()
            try:
                self._one_batch()
            except BaseException as error:  # fn failed max_attempts times, or the cluster did
                self._error = error
                log.error("stream on %s stopped at batch %d: %r", self.topic, self.batch_id,
                          error)
                return
            self._stop.wait(max(0.0, self.trigger_interval - (time.monotonic() - started)))

    def _one_batch(self) -> None:
        frame = read_topic(self.spark, self.cluster, self.topic, group=self.group,
                           starting_offsets="committed", ending_offsets=self._ending_offsets())
        count = sum(until - start for start, until in frame.offset_ranges.values())
        if count == 0:
            return
        self.attempts += 1
        try:
            self.fn(frame, self.batch_id)
        except Exception:
            self.failed_attempts += 1
            if self.failed_attempts >= self.max_attempts:
                raise
            log.warning("batch %d of %s failed (attempt %d of %d); it comes again",
                        self.batch_id, self.topic, self.failed_attempts, self.max_attempts,
                        exc_info=True)
            return
        frame.commit()
        self.failed_attempts = 0
        self.records_processed += count
        self.batch_id += 1

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
    topic: str,
    group: str,
    fn: BatchFunction,
    *,
    trigger_interval: float = 1.0,
    max_records_per_batch: int | None = None,
    max_attempts: int = 3,
) -> TopicStream:
    """Start micro-batches of `topic` for `group`; each DataFrame goes to `fn(df, batch_id)`.

    `max_records_per_batch` caps how many records one batch holds. Returns the running stream.
    """
    if max_attempts < 1:
        raise ValueError("max_attempts must be at least 1")
    return TopicStream(spark, cluster, topic, group, fn, trigger_interval=trigger_interval,
                       max_records_per_batch=max_records_per_batch,
                       max_attempts=max_attempts).start()

