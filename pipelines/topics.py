"""Topics to Spark DataFrames and back.

`read_topic` reads a bounded range of offsets: each partition is read by a consumer of its own
in a Ray task, into an Arrow table; the tables form a Ray Dataset, which RayDP hands to Spark.
The DataFrame has the schema of Spark's own Kafka source, so code written for it carries over.
The group's offsets move only when the caller says the batch is consumed (`commit()`, or leaving
the `with` block without an exception): at-least-once, as a Kafka consumer commits.

`write_topic` produces a DataFrame's rows in parallel: one Ray task with its own producer per
block of the DataFrame.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Mapping
from typing import Any

import pyarrow as pa
import ray
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)
from raydp.spark import spark_dataframe_to_ray_dataset

from rafka.actors.clients.consumer import Consumer
from rafka.actors.cluster import Cluster
from rafka.actors.errors import CommitFailedError, UnknownTopicError
from rafka.common.sentinels import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP

# Spark's Kafka source writes JSON offsets with Kafka's ListOffsets timestamps: -1 latest,
# -2 earliest.
LATEST, EARLIEST = LATEST_TIMESTAMP, EARLIEST_TIMESTAMP

HEADERS_ARROW = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))
ARROW_SCHEMA = pa.schema([
    ("key", pa.binary()),
    ("value", pa.binary()),
    ("topic", pa.string()),
    ("partition", pa.int32()),
    ("offset", pa.int64()),
    ("timestamp", pa.timestamp("ms", tz="UTC")),
    ("timestampType", pa.int32()),
])
SPARK_SCHEMA = StructType([
    StructField("key", BinaryType()),
    StructField("value", BinaryType()),
    StructField("topic", StringType()),
    StructField("partition", IntegerType()),
    StructField("offset", LongType()),
    StructField("timestamp", TimestampType()),
    StructField("timestampType", IntegerType()),
])
SPARK_HEADERS = StructField("headers", ArrayType(StructType([
    StructField("key", StringType()), StructField("value", BinaryType())])))


class TopicDataFrame(DataFrame):
    """A DataFrame read from a topic that knows where its batch ends, so the group's offsets can
    be committed once the caller has consumed it."""

    def _bind(self, cluster: Cluster, group: str | None, ranges: dict[tuple[str, int],
              tuple[int, int]]) -> TopicDataFrame:
        self._cluster, self._group, self._ranges = cluster, group, ranges
        self._committed = False
        return self

    @property
    def offset_ranges(self) -> dict[tuple[str, int], tuple[int, int]]:
        """`{(topic, partition): (from offset, until offset)}` of this batch."""
        return dict(self._ranges)

    @property
    def end_offsets(self) -> dict[tuple[str, int], int]:
        return {tp: until for tp, (_start, until) in self._ranges.items()}

    def commit(self) -> None:
        """Record that the group consumed this batch: its offsets move to the batch's end."""
        if self._group is None:
            raise CommitFailedError("this topic was read without group=: there is nothing to "
                                    "commit; pass group= to read_topic to track offsets")
        advanced = {tp: until for tp, (start, until) in self._ranges.items() if until > start}
        if advanced:
            self._cluster.commit_offsets(self._group, advanced)
        self._committed = True

    def __enter__(self) -> TopicDataFrame:
        return self

    def __exit__(self, exc_type: object, *exc: object) -> None:
        if exc_type is None and self._group is not None and not self._committed:
            self.commit()


def _parse_offsets(spec: str | Mapping[str, Mapping[str, int]], topic: str, what: str
                   ) -> dict[int, int] | str:
    if isinstance(spec, str) and spec in ("earliest", "latest", "committed"):
        return spec
    if isinstance(spec, str):
        try:
            spec = json.loads(spec)
        except json.JSONDecodeError:
            raise ValueError(f"{what}={spec!r}: use 'earliest', 'latest', 'committed' or JSON "
                             """like '{"orders": {"0": 42, "1": -2}}'""") from None
    if not isinstance(spec, Mapping) or set(spec) - {topic}:
        raise ValueError(f"{what} must map topic {topic!r} to {{partition: offset}}, got {spec!r}")
    return {int(p): int(offset) for p, offset in spec.get(topic, {}).items()}


def _offset_ranges(
    cluster: Cluster, topic: str, group: str | None, starting: Any, ending: Any
) -> dict[tuple[str, int], tuple[int, int]]:
    bounds = cluster.offset_bounds(topic)
    start_spec = _parse_offsets(starting, topic, "starting_offsets")
    end_spec = _parse_offsets(ending, topic, "ending_offsets")
    if start_spec == "committed" and group is None:
        raise ValueError("starting_offsets='committed' needs group=")
    committed = (cluster.committed_offsets(group, [(topic, p) for p in bounds])
                 if start_spec == "committed" else {})
    ranges = {}
    for partition, (log_start, high_watermark) in bounds.items():
        if start_spec == "committed":
            start = committed.get((topic, partition))
            start = log_start if start is None else start
        elif start_spec == "latest":
            start = high_watermark
        elif start_spec == "earliest":
            start = log_start
        else:
            start = start_spec.get(partition, EARLIEST)
            start = {EARLIEST: log_start, LATEST: high_watermark}.get(start, start)
        if end_spec in ("latest", "committed", "earliest"):
            end = high_watermark if end_spec == "latest" else start
        else:
            end = end_spec.get(partition, LATEST)
            end = {EARLIEST: log_start, LATEST: high_watermark}.get(end, end)
        start = min(max(start, log_start), high_watermark)
        ranges[(topic, partition)] = (start, max(start, min(end, high_watermark)))
    return ranges


@ray.remote(num_cpus=0)
def _read_range(namespace: str, topic: str, partition: int, start: int, until: int,
                headers: bool, timestamp_type: int) -> pa.Table:
    """One partition's records in [start, until), as an Arrow table (runs in a Ray task)."""
    consumer = Consumer(namespace, max_poll_records=50_000,
                        max_partition_fetch_bytes=8 * 1024 * 1024)
    consumer.assign([(topic, partition)])
    consumer.seek(topic, partition, start)
    keys, values, offsets, stamps, header_lists = [], [], [], [], []
    while consumer.position(topic, partition) < until:
        for record in consumer.poll(1000):
            if record.offset >= until:
                break
            keys.append(record.key)
            values.append(record.value)
            offsets.append(record.offset)
            stamps.append(record.timestamp)
            if headers:
                header_lists.append([{"key": k, "value": v} for k, v in record.headers])
        else:
            continue
        break
    consumer.close()
    count = len(offsets)
    columns = [
        pa.array(keys, pa.binary()),
        pa.array(values, pa.binary()),
        pa.array([topic] * count, pa.string()),
        pa.array([partition] * count, pa.int32()),
        pa.array(offsets, pa.int64()),
        pa.array(stamps, pa.timestamp("ms", tz="UTC")),
        pa.array([timestamp_type] * count, pa.int32()),
    ]
    schema = ARROW_SCHEMA
    if headers:
        columns.append(pa.array(header_lists, HEADERS_ARROW))
        schema = schema.append(pa.field("headers", HEADERS_ARROW))
    return pa.Table.from_arrays(columns, schema=schema)


def read_topic(
    spark: SparkSession,
    cluster: Cluster,
    topic: str,
    *,
    group: str | None = None,
    starting_offsets: str | Mapping[str, Mapping[str, int]] | None = None,
    ending_offsets: str | Mapping[str, Mapping[str, int]] = "latest",
    include_headers: bool = False,
) -> TopicDataFrame:
    """A topic's records as a DataFrame with Spark's Kafka-source schema.

    `starting_offsets`: "committed" (the default with a group; partitions without a committed
    offset start at the earliest), "earliest" (the default without), "latest", or JSON as Spark
    takes it, `{"topic": {"0": 23, "1": -2}}` (-2 earliest, -1 latest). `ending_offsets`:
    "latest" (the high watermark now) or JSON. Nothing is committed until `commit()`.
    """
    if not cluster.topic_exists(topic):
        raise UnknownTopicError(f"topic {topic!r} does not exist: create it first, or check "
                                f"the name (topics: {', '.join(cluster.list_topics()) or 'none'})")
    if starting_offsets is None:
        starting_offsets = "committed" if group is not None else "earliest"
    ranges = _offset_ranges(cluster, topic, group, starting_offsets, ending_offsets)
    log_append_time = (cluster.describe_topic(topic)["config"].get("message.timestamp.type")
                       == "LogAppendTime")
    refs = [
        _read_range.remote(cluster.namespace, topic, partition, start, until, include_headers,
                           int(log_append_time))
        for (topic, partition), (start, until) in sorted(ranges.items())
        if until > start
    ]
    schema = StructType([*SPARK_SCHEMA.fields, *([SPARK_HEADERS] if include_headers else [])])
    if refs:
        frame = ray.data.from_arrow_refs(refs).to_spark(spark)
        frame = frame.select(*schema.fieldNames())  # the Kafka source's column order
    else:
        frame = spark.createDataFrame([], schema)
    return TopicDataFrame(frame._jdf, frame.sparkSession)._bind(cluster, group, ranges)


def _as_bytes(column: pa.ChunkedArray | None, name: str) -> list[bytes | None]:
    if column is None:
        return []
    if pa.types.is_binary(column.type) or pa.types.is_large_binary(column.type):
        return column.to_pylist()
    if pa.types.is_string(column.type) or pa.types.is_large_string(column.type):
        return [None if v is None else v.encode() for v in column.to_pylist()]
    raise TypeError(f"column {name!r} is {column.type}: keys and values must be binary or "
                    f"string; serialise it first (e.g. to_json(struct(...)))")


@ray.remote(num_cpus=0)
def _produce_block(namespace: str, topic: str, block: pa.Table, key_col: str | None,
                   value_col: str, partition_col: str | None, acks: Any) -> dict[int, int]:
    """Produce one block of rows with a producer of its own; count per partition."""
    from rafka.actors.clients.producer import Producer

    values = _as_bytes(block.column(value_col), value_col)
    keys = _as_bytes(block.column(key_col), key_col) if key_col else [None] * len(values)
    partitions = (block.column(partition_col).to_pylist() if partition_col
                  else [None] * len(values))
    producer = Producer(namespace, acks=acks)
    try:
        futures = [producer.send(topic, value=value, key=key, partition=partition)
                   for key, value, partition in zip(keys, values, partitions, strict=True)]
        producer.flush()
        return dict(Counter(future.result(60).partition for future in futures))
    finally:
        producer.close()


def write_topic(
    df: DataFrame,
    cluster: Cluster,
    topic: str,
    *,
    key_col: str | None = None,
    value_col: str = "value",
    partition_col: str | None = None,
    acks: Any = "all",
) -> dict[int, int]:
    """Produce every row of `df` to `topic` (binary or string key/value columns); returns how
    many records went to each partition. Keys are partitioned as a Java producer would."""
    if not cluster.topic_exists(topic):
        raise UnknownTopicError(f"topic {topic!r} does not exist: create it first")
    columns = [c for c in (key_col, value_col, partition_col) if c is not None]
    missing = [c for c in columns if c not in df.columns]
    if missing:
        raise ValueError(f"no column {missing} in the DataFrame (columns: {df.columns})")
    # RayDP's conversion itself: ray.data.from_spark, its wrapper, warns of a deprecated
    # argument on every call (Ray 2.60 passes `parallelism=None` and counts it as given).
    dataset = spark_dataframe_to_ray_dataset(df.select(*columns))
    refs = [
        _produce_block.remote(cluster.namespace, topic, block, key_col, value_col,
                              partition_col, acks)
        for block in dataset.to_arrow_refs()
    ]
    counts: Counter[int] = Counter()
    for result in ray.get(refs):
        counts.update(result)
    return dict(sorted(counts.items()))
