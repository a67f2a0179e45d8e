"""A DataFrame's rows into a topic, from Spark's own tasks, each record stored once.

`write_frame` maps each Spark partition (`mapInArrow`) to a writer in the task's Python worker:
a `SequencedProducer` under a producer id derived from the write's id and the partition's
index (`pipelines.sink_plan`). Before sending, it asks the leaders how many records earlier
attempts of the same partition wrote to each Kafka partition, skips that many, and sends the
rest with the sequence numbers that follow (the first attempt of a write whose id was made for
it skips the asking: there is nothing before it). So a task Spark runs again (its executor
died, the write failed midway) or a whole write run again under the same `write_id` (its driver
died) adds only what is missing: every row is stored once.

This holds if every attempt gives each Spark partition the same rows in the same order: true
of a DataFrame read from topics (`read_topic`, a stream's batch) and what narrow
transformations (`select`, `filter`, `withColumn`, UDFs) make of it; a shuffle's output order
is not fixed, so sort within partitions after one (`sortWithinPartitions`). A partition whose
rows are fewer than an earlier attempt wrote fails with `NonDeterministicInputError`.

The rows stay Arrow columns until they are batches: each Kafka partition's share of a Spark
batch (a slice, or a `take` of keyed rows) goes to `Producer.send_columns`, which encodes it
with Arrow's kernels (`logstore.record_columns`).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from functools import partial
from typing import Any, NamedTuple

import numpy as np
import pyarrow as pa
import ray
from pyspark import TaskContext
from pyspark.sql import DataFrame
from pyspark.sql.types import (
    BinaryType,
    ByteType,
    IntegerType,
    LongType,
    ShortType,
    StringType,
)

from rafka.actors.clients.column_partitions import key_partitions
from rafka.actors.clients.sequenced_producer import SequencedProducer
from rafka.actors.errors import RafkaError
from rafka.pipelines.sink_plan import (
    keyless_runs,
    rows_by_partition,
    sink_producer_id,
    target_partitions,
)
from rafka.pipelines.spark_worker import prepare_task

WRITTEN_SCHEMA = "partition int, records long"
_BYTES_TYPES = (BinaryType, StringType)
_PARTITION_TYPES = (ByteType, ShortType, IntegerType, LongType)
_HEADERS_TYPES = ("array<struct<key:string,value:binary>>",
                  "array<struct<key:string,value:string>>")


class NonDeterministicInputError(RafkaError):
    """A retried write's partition holds other rows than its earlier attempt had."""


class SinkColumns(NamedTuple):
    """Which columns of the DataFrame hold each record's parts (None: it has none)."""

    key: str | None
    value: str
    partition: str | None
    headers: str | None

    def names(self) -> list[str]:
        return [name for name in self if name is not None]


def write_frame(df: DataFrame, namespace: str, topic: str, write_id: str,
                columns: SinkColumns, *, acks: Any, timeout_s: float,
                new_write_id: bool = False) -> dict[int, int]:
    """Write every row of `df` to `topic` once (see the module docstring); returns how many
    records of the write each Kafka partition holds. `new_write_id`: the id was made for this
    call, so no earlier attempt can have written under it."""
    _check_types(df, columns)
    context = ray.get_runtime_context()
    write = partial(_write_partition, context.gcs_address, context.namespace, namespace,
                    topic, write_id, new_write_id, columns, acks, timeout_s)
    counts: Counter[int] = Counter()
    for row in df.select(*columns.names()).mapInArrow(write, WRITTEN_SCHEMA).collect():
        counts[row["partition"]] += row["records"]
    return dict(sorted(counts.items()))


def _check_types(df: DataFrame, columns: SinkColumns) -> None:
    """Spark's Kafka sink's types: refused here, before any task runs."""
    fields = {field.name: field.dataType for field in df.schema.fields}
    missing = [name for name in columns.names() if name not in fields]
    if missing:
        raise ValueError(f"no column {missing} in the DataFrame (columns: {df.columns})")
    for name in (columns.key, columns.value):
        if name is not None and not isinstance(fields[name], _BYTES_TYPES):
            raise TypeError(f"column {name!r} is {fields[name].simpleString()}: keys and "
                            "values must be binary or string; serialise it first "
                            "(e.g. to_json(struct(...)))")
    name = columns.partition
    if name is not None and not isinstance(fields[name], _PARTITION_TYPES):
        raise TypeError(f"column {name!r} is {fields[name].simpleString()}: a partition is "
                        "an integer")
    name = columns.headers
    if name is not None and fields[name].simpleString() not in _HEADERS_TYPES:
        raise TypeError(f"column {name!r} is {fields[name].simpleString()}: headers are "
                        f"{_HEADERS_TYPES[0]}, as in Spark's Kafka source and sink")


def _write_partition(ray_address: str, driver_namespace: str, namespace: str, topic: str,
                     write_id: str, new_write_id: bool, columns: SinkColumns, acks: Any,
                     timeout_s: float, batches: Iterator[pa.RecordBatch],
                     ) -> Iterator[pa.RecordBatch]:
    """In a Spark task's Python worker: write this Spark partition's rows, after those an
    earlier attempt of it wrote; yield how many rows went to each Kafka partition."""
    prepare_task(ray_address, driver_namespace)
    task = TaskContext.get()
    assert task is not None  # this runs in a Spark task
    spark_partition = task.partitionId()
    producer = SequencedProducer(namespace, sink_producer_id(write_id, spark_partition),
                                 acks=acks)
    try:
        # A task's first attempt, under an id made for this write, has nothing before it:
        # the leaders need not be asked (10-25 ms a task). Spark numbers attempts from 0
        # again when it runs a stage again (a shuffle's output lost), and PySpark does not
        # say which stage attempt this is. Such an attempt sends from sequence 0; the
        # leaders' sequence check keeps it from storing a record twice, the task fails
        # where its numbers meet an earlier attempt's, and Spark's next attempt asks.
        if new_write_id and task.attemptNumber() == 0:
            already = producer.start_fresh(topic)
        else:
            already = producer.resume(topic, timeout_s)
        partitions = len(already)
        to_skip = dict(already)
        counts: Counter[int] = Counter()
        sent = []
        first_row = 0
        for batch in batches:
            values = batch.column(columns.value)
            keys = batch.column(columns.key) if columns.key else None
            headers = batch.column(columns.headers) if columns.headers else None
            if keys is None and columns.partition is None:  # slices, not a partition per row
                groups: list[tuple[int, range | np.ndarray]] = [
                    (target, range(start, stop)) for target, start, stop
                    in keyless_runs(partitions, spark_partition, first_row, batch.num_rows)]
            else:
                explicit, given = _explicit_partitions(batch, columns.partition)
                by_key = None if keys is None else key_partitions(keys, partitions)
                targets = target_partitions(topic, partitions, spark_partition, first_row,
                                            batch.num_rows, by_key, explicit, given)
                groups = list(rows_by_partition(targets).items())
            for target, rows in groups:
                counts[target] += len(rows)
                skipped = min(to_skip[target], len(rows))
                to_skip[target] -= skipped
                rows = rows[skipped:]
                if not len(rows):
                    continue
                sent.append(producer.send_columns(
                    topic, _pick(values, rows), None if keys is None else _pick(keys, rows),
                    partition=target, headers=None if headers is None else _pick(headers, rows)))
            first_row += batch.num_rows
        short = ", ".join(f"{already[p]} records to {topic}-{p}, where this attempt has "
                          f"{counts[p]} rows" for p, left in sorted(to_skip.items()) if left)
        if short:
            raise NonDeterministicInputError(
                f"an earlier attempt at Spark partition {spark_partition} of write "
                f"{write_id!r} wrote {short}: the DataFrame gives other rows each time it is "
                "computed; make it deterministic (sortWithinPartitions after a shuffle)")
        producer.flush(timeout_s)
        for outcome in sent:  # raises the first failure
            outcome.partition_counts(timeout_s)
    finally:
        producer.close(timeout_s)
    yield pa.RecordBatch.from_pydict(
        {"partition": list(counts), "records": list(counts.values())},
        schema=pa.schema([("partition", pa.int32()), ("records", pa.int64())]))


def _explicit_partitions(batch: pa.RecordBatch, name: str | None,
                         ) -> tuple[np.ndarray | None, np.ndarray | None]:
    """The partition column's values, and where they are given (None: every row)."""
    if name is None:
        return None, None
    column = batch.column(name)
    values = column.fill_null(0).to_numpy().astype(np.int64)
    return values, (column.is_valid().to_numpy(zero_copy_only=False) if column.null_count
                    else None)


def _pick(column: pa.Array, rows: range | np.ndarray) -> pa.Array:
    """`column` at `rows`: a slice (no copy) for a run of rows."""
    if isinstance(rows, range):
        return column.slice(rows.start, len(rows))
    return column.take(pa.array(rows, pa.int64()))
