"""Unbounded reads of topics into Ray Data: micro-batches, each a Dataset, resumable exactly.

`stream_dataset(cluster, topic, ...)` is an iterator of `DatasetBatch`es. Each batch holds the
records from where the last one ended up to the high watermark (within
`max_records_per_batch`), planned by Spark's rules (`pipelines.stream_plan`), and read where
they lie: each partition's leader host decodes its records into Arrow tables in Ray's object
store on its own node (`pipelines.reads`), and the batch's Dataset is made of those blocks, so
that a consumer on that node reads them from shared memory without a copy (a block under Ray's
100 KiB bound for inlined results comes back with the host's answer). Ray Data's streaming
executor runs whatever the caller maps over them.

Why micro-batches rather than one endless Dataset: a Ray Data Dataset is finite (Ray's own
unbounded Kafka source is an open proposal, ray-project/ray#40513), and a batch is the boundary
a job checkpoints at, as Spark's Structured Streaming makes one per trigger.

The progress belongs to the caller. Each batch carries `checkpoint`, a small JSON-able dict:
the stream's source, the next batch's id and each partition's next offset. Stored together with
what the batch produced (in one file, one transaction, a Ray Train checkpoint) and given back
as `checkpoint=` to a new stream, it resumes right after the last stored batch: a job killed
and restarted neither skips nor repeats a record. The stream itself stores nothing; a batch
handed out but not stored is read again, within the ranges the next plan gives it.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import ray.data

from rafka.actors.clients.consumer import Consumer
from rafka.actors.cluster import Cluster
from rafka.pipelines.checkpoint import CheckpointError
from rafka.pipelines.source_options import (
    OffsetRanges,
    SourceOptions,
    TopicPartitionKey,
)
from rafka.pipelines.stream_plan import next_ranges, record_count, should_run
from rafka.pipelines.topics import offset_ranges, partition_bounds, ranges_dataset, source_options

# What a checkpoint says it is, so that another document given as one is refused.
CHECKPOINT_KIND = "rafka.stream_dataset"
TRIGGERS = ("processingTime", "once", "availableNow")


@dataclass(frozen=True)
class DatasetBatch:
    """One micro-batch: its id, its records as a Dataset, the `[start, until)` offsets it
    reads of each partition, and the checkpoint to store with what it produced."""

    batch_id: int
    dataset: ray.data.Dataset
    ranges: OffsetRanges
    checkpoint: dict[str, Any]

    @property
    def record_count(self) -> int:
        return record_count(self.ranges)


class DatasetStream(Iterator[DatasetBatch]):
    """The batches of a stream, as they come; `stop()` (from any thread) ends the iteration."""

    def __init__(self, cluster: Cluster, options: SourceOptions, source: dict[str, Any], *,
                 batch_id: int, positions: dict[TopicPartitionKey, int] | None, trigger: str,
                 trigger_interval: float) -> None:
        self.cluster, self.options, self.source = cluster, options, source
        self.batch_id = batch_id  # the id of the next batch
        self.trigger, self.trigger_interval = trigger, trigger_interval
        self._positions = positions  # None until the first plan, without a checkpoint
        self._target: dict[TopicPartitionKey, int] | None = None  # availableNow's end
        self._reader = Consumer(cluster.namespace)
        self._last_batch_at = time.monotonic()
        self._stopped = threading.Event()
        self._done = False

    def __next__(self) -> DatasetBatch:
        ranges = self._next_ranges()
        dataset = ranges_dataset(self.cluster, ranges,
                                 include_headers=self.options.include_headers,
                                 min_partitions=self.options.min_partitions,
                                 fail_on_data_loss=self.options.fail_on_data_loss,
                                 poll_timeout_ms=self.options.poll_timeout_ms)
        assert self._positions is not None, "a batch is planned from positions"
        self._positions.update({tp: until for tp, (_start, until) in ranges.items()})
        self.batch_id += 1
        batch = DatasetBatch(self.batch_id - 1, dataset, ranges, self._checkpoint())
        self._last_batch_at = time.monotonic()
        if self.trigger == "once":
            self._done = True
        return batch

    def stop(self) -> None:
        """End the iteration: a `next()` waiting for records raises StopIteration."""
        self._stopped.set()

    def __enter__(self) -> DatasetStream:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()
        self._reader.close()

    @property
    def checkpoint(self) -> dict[str, Any]:
        """Where the stream stands now: after the last batch it handed out."""
        return self._checkpoint()

    def _next_ranges(self) -> OffsetRanges:
        """The next batch's ranges, once a trigger has some; StopIteration when the stream
        ends (stopped, "once" done, "availableNow" caught up)."""
        options = self.options
        while not self._done and not self._stopped.is_set():
            started = time.monotonic()
            bounds = partition_bounds(self.cluster, options, self._reader)
            if self._positions is None:
                first = offset_ranges(self.cluster, options, bounds=bounds)
                self._positions = {tp: start for tp, (start, _until) in first.items()}
            if self.trigger == "availableNow" and self._target is None:
                self._target = {tp: high_watermark
                                for tp, (_start, high_watermark) in bounds.items()}
            limited = self.trigger != "once"
            ranges = next_ranges(bounds, self._positions,
                                 max_offsets=options.max_offsets_per_trigger if limited else None,
                                 fail_on_data_loss=options.fail_on_data_loss, until=self._target)
            min_offsets = (options.min_offsets_per_trigger
                           if self.trigger == "processingTime" else None)
            waited_ms = (time.monotonic() - self._last_batch_at) * 1000
            if should_run(record_count(ranges), min_offsets=min_offsets,
                          since_last_batch_ms=waited_ms,
                          max_trigger_delay_ms=options.max_trigger_delay_ms):
                return ranges
            if self.trigger != "processingTime":  # nothing (more) there: the stream ends
                self._done = True
                break
            self._stopped.wait(max(0.0, self.trigger_interval - (time.monotonic() - started)))
        self._reader.close()
        raise StopIteration

    def _checkpoint(self) -> dict[str, Any]:
        offsets: dict[str, dict[str, int]] = {}
        for (topic, partition), offset in sorted((self._positions or {}).items()):
            offsets.setdefault(topic, {})[str(partition)] = offset
        return {"kind": CHECKPOINT_KIND, "source": self.source, "batch": self.batch_id,
                "offsets": offsets}


def stream_dataset(
    cluster: Cluster,
    topic: str | Sequence[str] | None = None,
    *,
    options: Mapping[str, Any] | None = None,
    starting_offsets: str | Mapping[str, Mapping[str, int]] | None = None,
    include_headers: bool | None = None,
    checkpoint: Mapping[str, Any] | None = None,
    trigger: str = "processingTime",
    trigger_interval: float = 1.0,
    max_records_per_batch: int | None = None,
) -> DatasetStream:
    """Micro-batches of `topic` (or of what `options` subscribe to, under Spark's names) as
    Ray Datasets with `read_dataset`'s columns; iterate over the result.

    `checkpoint` is a batch's `checkpoint` (or the stream's) stored by an earlier run: the
    stream starts right after that batch, whatever `startingOffsets` says (as Spark's
    checkpoint wins over it); without one it starts at `startingOffsets` ("latest" by default,
    as Spark's streams). `trigger` is "processingTime" (a batch every `trigger_interval` s
    while records come; the iteration waits for them), "once" (one batch of everything
    there) or "availableNow" (everything there when the stream starts, in batches within
    `max_records_per_batch`, i.e. `maxOffsetsPerTrigger`).
    """
    if trigger not in TRIGGERS:
        raise ValueError(f"trigger={trigger!r}: use one of {', '.join(TRIGGERS)}")
    if trigger_interval < 0:
        raise ValueError(f"trigger_interval={trigger_interval!r}: give 0 or more seconds")
    parsed = source_options(topic, options, streaming=True, starting_offsets=starting_offsets,
                            include_headers=include_headers,
                            max_records_per_batch=max_records_per_batch)
    source = parsed.stream_source()
    batch_id, positions = 0, None
    if checkpoint is not None:
        batch_id, positions = _resume(checkpoint, source)
    return DatasetStream(cluster, parsed, source, batch_id=batch_id, positions=positions,
                         trigger=trigger, trigger_interval=trigger_interval)


def _resume(checkpoint: Mapping[str, Any], source: dict[str, Any]
            ) -> tuple[int, dict[TopicPartitionKey, int]]:
    """The next batch id and each partition's next offset, from a stored checkpoint."""
    if not isinstance(checkpoint, Mapping) or checkpoint.get("kind") != CHECKPOINT_KIND:
        raise CheckpointError("checkpoint= takes a DatasetBatch's (or a DatasetStream's) "
                              "checkpoint, as stored: this is not one")
    if checkpoint.get("source") != source:
        raise CheckpointError(f"the checkpoint belongs to a stream of "
                              f"{checkpoint.get('source')}, not of {source}: give this stream "
                              "a checkpoint of its own")
    try:
        batch_id = int(checkpoint["batch"])
        positions = {(str(topic), int(partition)): int(offset)
                     for topic, partitions in checkpoint["offsets"].items()
                     for partition, offset in partitions.items()}
    except (AttributeError, KeyError, TypeError, ValueError):
        raise CheckpointError("the checkpoint's batch or offsets are damaged: store a "
                              "batch's checkpoint as it was given") from None
    if batch_id < 0 or any(offset < 0 for offset in positions.values()):
        raise CheckpointError("the checkpoint holds a negative batch id or offset: it is "
                              "damaged")
    return batch_id, positions
