"""A Ray Dataset's rows into a topic, from Ray Data's own write tasks, each record stored once.

`TopicDatasink` is a Ray Data `Datasink`: each write task hands its blocks to
`pipelines.sequenced_sink`'s writer, the task's index in the write being the write's part. A
task Ray runs again (its worker died) has the same index and the same blocks, and adds only
what its earlier attempt did not store. A whole write run again under the same write id does
too: the write runs with Ray Data's `preserve_order`, so that the n-th write task gets the n-th
bundle of blocks on every run, given a Dataset whose blocks come out the same on every run (read
from files, tables or topics, and what row-wise transforms make of them). After a shuffle
(`random_shuffle`, `groupby`, `repartition(shuffle=True)`), sort first.

Write tasks ask Ray for no CPU: they wait on the network, and a cluster whose CPUs Spark's
executors hold would otherwise never run them (`pipelines.reads.tables_dataset` says the same of
reads).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import ray.data
from ray.data.block import Block, BlockAccessor
from ray.data.datasource import Datasink, WriteResult

from rafka.pipelines.sequenced_sink import SinkColumns, check_arrow_schema, write_part

WRITE_TASK_REMOTE_ARGS = {"num_cpus": 0}


@dataclass(eq=False)  # compared and hashed by identity, as Ray Data may
class TopicDatasink(Datasink[dict[int, int]]):
    """Writes a Dataset's rows to `topic` of the cluster in Ray namespace `namespace`, under
    `write_id`; `written`, once the write is complete, says how many records of the write each
    Kafka partition holds."""

    namespace: str
    topic: str
    write_id: str
    columns: SinkColumns
    acks: Any
    timeout_s: float
    written: dict[int, int] = field(default_factory=dict)

    def on_write_start(self, schema: pa.Schema | None = None) -> None:
        if schema is not None:  # the first bundle's: a wrong type fails before any write
            check_arrow_schema(getattr(schema, "base_schema", schema), self.columns)

    def write(self, blocks: Iterable[Block], ctx: Any) -> dict[int, int]:
        part = ctx.task_idx
        return dict(write_part(self.namespace, self.topic, self.write_id, part,
                               f"write task {part}", self.columns, self._batches(blocks),
                               acks=self.acks, timeout_s=self.timeout_s))

    def on_write_complete(self, write_result: WriteResult[dict[int, int]]) -> None:
        total: Counter[int] = Counter()
        for counts in write_result.write_returns:
            total.update(counts)
        self.written = dict(sorted(total.items()))

    def get_name(self) -> str:
        return f"WriteTopic({self.topic})"

    def _batches(self, blocks: Iterable[Block]) -> Iterator[pa.RecordBatch]:
        for block in blocks:
            table = BlockAccessor.for_block(block).to_arrow()
            check_arrow_schema(table.schema, self.columns)  # every block: schemas can differ
            yield from table.select(self.columns.names()).to_batches()


def write_blocks(ds: ray.data.Dataset, sink: TopicDatasink, *,
                 ray_remote_args: dict[str, Any] | None = None,
                 concurrency: int | None = None) -> dict[int, int]:
    """Run `sink`'s write of `ds` in order (see the module docstring); its counts."""
    schema = ds.schema(fetch_if_missing=False)  # known without running anything, or None
    if schema is not None:
        check_arrow_schema(getattr(schema, "base_schema", schema), sink.columns)
    options = ds.context.execution_options
    kept = options.preserve_order
    options.preserve_order = True
    try:
        ds.write_datasink(sink, ray_remote_args=ray_remote_args or dict(WRITE_TASK_REMOTE_ARGS),
                          concurrency=concurrency)
    finally:
        options.preserve_order = kept
    return sink.written
