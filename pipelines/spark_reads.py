"""Offset ranges into a Spark DataFrame that reads them when Spark computes it.

The DataFrame is a plan of pieces (`pipelines.reads.Piece`: a partition's `[start, until)`),
grouped into Spark partitions, mapped by `mapInArrow`: the Spark task's Python worker asks
each piece's leader host for its records (`ReplicaHost.read_table` builds the Arrow table where
the batches lie) and hands the tables' record batches to Spark's JVM as they are. So, as with
Spark's own Kafka source, nothing is read before an action, and whatever Spark computes again
(a second action, a lost executor, a retried task) is read again from the log, with the same
ranges.

Two other ways RayDP offers were measured and left (`docs/pipelines.md`, "Where records
become Arrow"):
handing Spark a Ray Dataset of the hosts' tables (`to_spark`) converts each table to pandas in
a Python worker, and RayDP keeps every block referenced for the rest of the Spark session;
handing it Arrow IPC bytes lets its JVM read them straight from Ray's object store, the
fastest, but then nothing keeps the objects alive while Spark still needs them, and a DataFrame
computed after its objects were freed fails.
"""

from __future__ import annotations

from collections.abc import Iterator
from functools import partial

import pyarrow as pa
import ray
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.types import StructType

from rafka.pipelines.reads import Piece, group_pieces, read_tables
from rafka.pipelines.spark_worker import prepare_task

# Spark's own unit for timestamps; the hosts' tables carry Kafka's milliseconds.
SPARK_TIMESTAMP = pa.timestamp("us", tz="UTC")
PLAN_SCHEMA = ("topics array<string>, partitions array<int>, starts array<long>, "
               "untils array<long>")


def read_tasks(spark: SparkSession, min_partitions: int | None = None) -> int:
    """How many Spark tasks read a batch: as many as Spark runs at once (`defaultParallelism`,
    its executors' cores) or `min_partitions`, whichever is more. (Spark's own Kafka source
    has a task per Kafka partition; on this machine each Spark task costs about 0.1 s however
    little it reads.)"""
    return max(spark.sparkContext.defaultParallelism, min_partitions or 0)


def pieces_frame(spark: SparkSession, namespace: str, pieces: list[Piece], schema: StructType,
                 *, tasks: int, include_headers: bool, fail_on_data_loss: bool,
                 timeout_s: float) -> DataFrame:
    """A DataFrame of `schema` (Spark's Kafka source's) holding the records of `pieces`, in
    `tasks` partitions (at most one per piece); each task asks for all its pieces at once, so
    the hosts decode them in parallel. The same pieces and `tasks` give each partition the
    same records in the same order."""
    groups = group_pieces(pieces, tasks)
    rows = [([p.topic for p in group], [p.partition for p in group],
             [p.start for p in group], [p.until for p in group]) for group in groups]
    plan = spark.createDataFrame(spark.sparkContext.parallelize(rows, len(rows)), PLAN_SCHEMA)
    context = ray.get_runtime_context()
    read = partial(_read_pieces, context.gcs_address, context.namespace, namespace,
                   include_headers, fail_on_data_loss, timeout_s)
    return plan.mapInArrow(read, schema)


def _read_pieces(ray_address: str, driver_namespace: str, namespace: str,
                 include_headers: bool, fail_on_data_loss: bool, timeout_s: float,
                 plan: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """In a Spark task's Python worker: the record batches of the pieces in `plan`.

    The worker joins Ray once (Spark reuses its Python workers) in the driver's namespace, as
    RayDP's own conversions in the same worker expect (`pipelines.spark_worker`); the
    cluster's actors are looked up in the cluster's `namespace` by name."""
    prepare_task(ray_address, driver_namespace)
    for batch in plan:
        for row in batch.to_pylist():
            pieces = [Piece(*fields) for fields in zip(
                row["topics"], row["partitions"], row["starts"], row["untils"], strict=True)]
            for table in read_tables(namespace, pieces, include_headers,
                                     fail_on_data_loss=fail_on_data_loss, timeout_s=timeout_s):
                yield from _for_spark(ray.get(table.ref)).to_batches()


def _for_spark(table: pa.Table) -> pa.Table:
    index = table.schema.get_field_index("timestamp")
    return table.set_column(index, pa.field("timestamp", SPARK_TIMESTAMP),
                            table.column(index).cast(SPARK_TIMESTAMP))
