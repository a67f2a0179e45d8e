"""A DataFrame's rows into a topic, from Spark's own tasks, each record stored once.

`write_frame` maps each Spark partition (`mapInArrow`) to `pipelines.sequenced_sink`'s writer in
the task's Python worker, the Spark partition's index being the write's part: a task Spark runs
again (its executor died, the write failed midway) or a whole write run again under the same
`write_id` (its driver died) adds only what is missing, and the first attempt of a write whose
id was made for it skips asking the leaders (there is nothing before it).

This holds if every attempt gives each Spark partition the same rows in the same order: true
of a DataFrame read from topics (`read_topic`, a stream's batch) and what narrow
transformations (`select`, `filter`, `withColumn`, UDFs) make of it; a shuffle's output order
is not fixed, so sort within partitions after one (`sortWithinPartitions`).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from functools import partial
from typing import Any

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

from rafka.pipelines.sequenced_sink import SinkColumns, write_part
from rafka.pipelines.spark_worker import prepare_task

WRITTEN_SCHEMA = "partition int, records long"
_BYTES_TYPES = (BinaryType, StringType)
_PARTITION_TYPES = (ByteType, ShortType, IntegerType, LongType)
_HEADERS_TYPES = ("array<struct<key:string,value:binary>>",
                  "array<struct<key:string,value:string>>")


def write_frame(df: DataFrame, namespace: str, topic: str, write_id: str,
                columns: SinkColumns, *, acks: Any, timeout_s: float,
                new_write_id: bool = False) -> dict[int, int]:
    """Write every row of `df` to `topic` once (see the module docstring); returns how many
    records of the write each Kafka partition holds. `new_write_id`: the id was made for this
    call, so no earlier attempt can have written under it."""
    check_frame_types(df, columns)
    context = ray.get_runtime_context()
    write = partial(_write_partition, context.gcs_address, context.namespace, namespace,
                    topic, write_id, new_write_id, columns, acks, timeout_s)
    counts: Counter[int] = Counter()
    for row in df.select(*columns.names()).mapInArrow(write, WRITTEN_SCHEMA).collect():
        counts[row["partition"]] += row["records"]
    return dict(sorted(counts.items()))


def check_frame_types(df: DataFrame, columns: SinkColumns) -> None:
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
    # A task's first attempt, under an id made for this write, has nothing before it. Spark
    # numbers attempts from 0 again when it runs a stage again (a shuffle's output lost), and
    # PySpark does not say which stage attempt this is. Such an attempt sends from sequence 0;
    # the leaders' sequence check keeps it from storing a record twice, the task fails where
    # its numbers meet an earlier attempt's, and Spark's next attempt asks.
    counts = write_part(namespace, topic, write_id, spark_partition,
                        f"Spark partition {spark_partition}", columns, batches, acks=acks,
                        timeout_s=timeout_s,
                        nothing_before=new_write_id and task.attemptNumber() == 0)
    yield pa.RecordBatch.from_pydict(
        {"partition": list(counts), "records": list(counts.values())},
        schema=pa.schema([("partition", pa.int32()), ("records", pa.int64())]))
