"""Topics to Spark DataFrames and Ray Datasets, and back.

`read_topic` reads a bounded range of offsets of one or more topics, chosen with Spark's
Kafka-source options (`pipelines.source_options`). The replica hosts that lead the partitions
turn their batches into Arrow tables where they lie (`pipelines.reads`); Spark's tasks fetch
them when Spark computes the DataFrame (`pipelines.spark_reads`), and `read_dataset` makes them
a Ray Dataset instead. The DataFrame has the schema of Spark's own Kafka source, so code written
for it carries over. A group's offsets move only when the caller
says the batch is consumed (`commit()`, or leaving the `with` block without an exception):
at-least-once, as a Kafka consumer commits.

`write_topic` produces a DataFrame's rows from Spark's tasks, each record once, even when a
task or the whole write runs again (`pipelines.spark_writes`), or in one Kafka transaction
(`pipelines.transactional_sink`); `write_dataset` does the same for a Ray Dataset, from Ray
Data's write tasks (`pipelines.dataset_writes`).
"""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

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

from rafka.actors.clients.consumer import Consumer
from rafka.actors.cluster import Cluster
from rafka.actors.errors import CommitFailedError, UnknownTopicError
from rafka.actors.record_tables import schema as record_schema
from rafka.pipelines.dataset_writes import TopicDatasink, write_blocks
from rafka.pipelines.reads import TableRef, read_tables, split_ranges, tables_dataset
from rafka.pipelines.sequenced_sink import SinkColumns
from rafka.pipelines.source_options import (
    OffsetRanges,
    SourceOptionError,
    SourceOptions,
    TopicPartitionKey,
    parse_source_options,
    resolve_ranges,
)
from rafka.pipelines.spark_reads import pieces_frame, read_tasks
from rafka.pipelines.spark_writes import write_frame
from rafka.pipelines.transactional_sink import (
    WriteReceipt,
    transactional_acks,
    write_frame_in_transaction,
)

log = logging.getLogger(__name__)

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

    def _bind(self, cluster: Cluster, group: str | None, ranges: OffsetRanges
              ) -> TopicDataFrame:
        self._cluster, self._group, self._ranges = cluster, group, ranges
        self._committed = False
        return self

    @property
    def offset_ranges(self) -> OffsetRanges:
        """`{(topic, partition): (from offset, until offset)}` of this batch."""
        return dict(self._ranges)

    @property
    def end_offsets(self) -> dict[TopicPartitionKey, int]:
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


def source_options(
    topic: str | Sequence[str] | None,
    options: Mapping[str, Any] | None,
    *,
    streaming: bool,
    group: str | None = None,
    **shorthands: Any,
) -> SourceOptions:
    """Spark's options, with `topic` standing for `subscribe` and the Python keywords of
    `read_topic` for theirs (`starting_offsets` for `startingOffsets`, ...)."""
    merged: dict[str, Any] = dict(options or {})
    spark_names = {"topic": "subscribe", "starting_offsets": "startingOffsets",
                   "ending_offsets": "endingOffsets", "include_headers": "includeHeaders",
                   "max_records_per_batch": "maxOffsetsPerTrigger"}
    for keyword, value in {"topic": topic, **shorthands}.items():
        if value is None:
            continue
        name = spark_names[keyword]
        if any(given.lower() == name.lower() for given in merged):
            raise SourceOptionError(f"{keyword}= and option {name!r} say the same thing: "
                                    "give one")
        if isinstance(value, Mapping):
            value = json.dumps(value)
        merged[name] = value
    return parse_source_options(merged, streaming=streaming, group=group)


def partition_bounds(cluster: Cluster, options: SourceOptions, reader: Consumer | None = None
                     ) -> dict[TopicPartitionKey, tuple[int, int]]:
    """Each partition read by `options`: its (log start offset, high watermark) now (asked
    with `reader`, a consumer whose metadata may be warm already)."""
    existing = cluster.list_topics()
    topics = options.topics_of(existing)
    missing = [topic for topic in topics if topic not in existing]
    if missing:
        raise UnknownTopicError(
            f"topic {', '.join(map(repr, missing))} does not exist: create it first, or check "
            f"the name (topics: {', '.join(existing) or 'none'})")
    reader = reader or Consumer(cluster.namespace)
    if options.assign is not None:
        partitions = list(options.assign)
        for topic, partition in partitions:
            count = reader.metadata.partition_count(topic)
            if not 0 <= partition < count:
                raise SourceOptionError(f"assign names {topic}-{partition}, but {topic!r} has "
                                        f"partitions 0..{count - 1}")
    else:
        partitions = [(topic, partition) for topic in topics
                      for partition in range(reader.metadata.partition_count(topic))]
    starts = reader.beginning_offsets(partitions)
    ends = reader.end_offsets(partitions)
    return {(tp.topic, tp.partition): (starts[tp], ends[tp]) for tp in starts}


def offset_ranges(cluster: Cluster, options: SourceOptions, group: str | None = None, *,
                  bounds: dict[TopicPartitionKey, tuple[int, int]] | None = None
                  ) -> OffsetRanges:
    """Each partition's `[start, until)` for `options` as the cluster stands now (or as
    `bounds`, from `partition_bounds`, says it stood)."""
    reader = Consumer(cluster.namespace)
    if bounds is None:
        bounds = partition_bounds(cluster, options, reader)
    committed = None
    if options.starting.kind == "committed":
        if group is None:  # parsing checks this against its own group: this call names its own
            raise SourceOptionError("startingOffsets='committed' needs group=")
        committed = cluster.committed_offsets(group, list(bounds))

    def found(offsets: Any) -> dict[TopicPartitionKey, int | None] | None:
        if offsets.kind not in ("timestamp", "timestamps"):
            return None
        answers = reader.offsets_for_times(
            {tp: offsets.timestamp_of(tp) for tp in bounds})
        return {(tp.topic, tp.partition): offset for tp, offset in answers.items()}

    return resolve_ranges(options, bounds, committed=committed,
                          starting_found=found(options.starting),
                          ending_found=found(options.ending))


def ranges_dataset(cluster: Cluster, ranges: OffsetRanges, *, include_headers: bool = False,
                   min_partitions: int | None = None, fail_on_data_loss: bool = True,
                   poll_timeout_ms: int = 120_000) -> ray.data.Dataset:
    """The records of `ranges` as a Ray Dataset of Arrow blocks."""
    tables = read_tables(cluster.namespace, split_ranges(ranges, min_partitions),
                         include_headers, fail_on_data_loss=fail_on_data_loss,
                         timeout_s=poll_timeout_ms / 1000)
    schema = record_schema(include_headers)
    if not tables:
        tables = [TableRef(ray.put(schema.empty_table()), 0, 0)]
    return tables_dataset(tables, schema)


def ranges_frame(spark: SparkSession, cluster: Cluster, ranges: OffsetRanges,
                 group: str | None, options: SourceOptions, *,
                 tasks: int | None = None) -> TopicDataFrame:
    """`ranges` as a DataFrame of Spark's Kafka-source schema, read when Spark computes it
    (`pipelines.spark_reads`), by `tasks` Spark tasks (default: `read_tasks`)."""
    schema = StructType([*SPARK_SCHEMA.fields,
                         *([SPARK_HEADERS] if options.include_headers else [])])
    pieces = split_ranges(ranges, options.min_partitions)
    if pieces:
        frame = pieces_frame(spark, cluster.namespace, pieces, schema,
                             tasks=tasks or read_tasks(spark, options.min_partitions),
                             include_headers=options.include_headers,
                             fail_on_data_loss=options.fail_on_data_loss,
                             timeout_s=options.poll_timeout_ms / 1000)
    else:
        frame = spark.createDataFrame([], schema)
    return TopicDataFrame(frame._jdf, frame.sparkSession)._bind(cluster, group, ranges)


def read_topic(
    spark: SparkSession,
    cluster: Cluster,
    topic: str | Sequence[str] | None = None,
    *,
    group: str | None = None,
    options: Mapping[str, Any] | None = None,
    starting_offsets: str | Mapping[str, Mapping[str, int]] | None = None,
    ending_offsets: str | Mapping[str, Mapping[str, int]] | None = None,
    include_headers: bool | None = None,
) -> TopicDataFrame:
    """Records of one or more topics as a DataFrame with Spark's Kafka-source schema.

    `options` are Spark's Kafka-source options, under Spark's names (`subscribePattern`,
    `assign`, `startingOffsetsByTimestamp`, `minPartitions`, `failOnDataLoss`, ...:
    docs/pipelines.md lists them all). `topic` stands for `subscribe`, and the keywords for
    `startingOffsets`, `endingOffsets` and `includeHeaders`. rafka adds `group`: the batch's
    offsets are committed to it by `commit()`, and `startingOffsets` defaults to "committed"
    (partitions without a committed offset start at the earliest); without a group, to
    "earliest", as in Spark. Nothing is committed until `commit()`.
    """
    parsed = source_options(topic, options, streaming=False, group=group,
                            starting_offsets=starting_offsets, ending_offsets=ending_offsets,
                            include_headers=include_headers)
    ranges = offset_ranges(cluster, parsed, group)
    return ranges_frame(spark, cluster, ranges, group, parsed)


def read_dataset(
    cluster: Cluster,
    topic: str | Sequence[str] | None = None,
    *,
    options: Mapping[str, Any] | None = None,
    starting_offsets: str | Mapping[str, Mapping[str, int]] | None = None,
    ending_offsets: str | Mapping[str, Mapping[str, int]] | None = None,
    include_headers: bool | None = None,
) -> ray.data.Dataset:
    """`read_topic` for Ray Data: the same records and columns as a Ray Dataset of Arrow
    blocks (one or more per partition), without Spark."""
    parsed = source_options(topic, options, streaming=False,
                            starting_offsets=starting_offsets, ending_offsets=ending_offsets,
                            include_headers=include_headers)
    return ranges_dataset(cluster, offset_ranges(cluster, parsed),
                          include_headers=parsed.include_headers,
                          min_partitions=parsed.min_partitions,
                          fail_on_data_loss=parsed.fail_on_data_loss,
                          poll_timeout_ms=parsed.poll_timeout_ms)


def write_topic(
    df: DataFrame,
    cluster: Cluster,
    topic: str,
    *,
    key_col: str | None = None,
    value_col: str = "value",
    partition_col: str | None = None,
    headers_col: str | None = None,
    acks: Any = "all",
    write_id: str | None = None,
    timeout_s: float = 120.0,
    transactional: bool = False,
    transaction_timeout_ms: int = 60_000,
) -> dict[int, int]:
    """Produce every row of `df` to `topic`, each exactly once; returns how many records of
    the write each partition holds. The columns are Spark's Kafka sink's: key and value binary
    or string, the partition an integer, headers an array of (key string, value binary)
    structs. Keys are partitioned as a Java producer would.

    Spark's tasks write (`pipelines.spark_writes`), and a task Spark runs again adds only
    the records its earlier attempt did not store. `write_id` names the write across driver
    processes: run again with the same id (after a crash, say), it stores only what is
    missing. It must then be the same DataFrame, giving each Spark partition the same rows
    in the same order.

    `transactional=True` writes the rows in one Kafka transaction instead
    (`pipelines.transactional_sink`): a read_committed consumer sees every row of the write
    or none, and a failed attempt is aborted and run again whole (up to three times), so the
    rows need not come out the same each time. Run again under a `write_id` whose write
    committed, it writes nothing and returns that write's counts, whatever the rows now;
    under one whose write did not commit, the earlier attempt is aborted and this one's rows
    are written. `transaction_timeout_ms` is Kafka's transaction.timeout.ms: the coordinator
    aborts a write open longer, and a crashed driver's write holds back read_committed
    readers of the topic until then (or until the write is run again)."""
    if not cluster.topic_exists(topic):
        raise UnknownTopicError(f"topic {topic!r} does not exist: create it first")
    columns = SinkColumns(key_col, value_col, partition_col, headers_col)
    if transactional:
        transactional_acks(acks)
        transactional_id = f"rafka.write.{write_id or uuid.uuid4().hex}"
        receipt = None
        if write_id is not None:
            receipt = WriteReceipt(cluster, transactional_id, topic,
                                   cluster.partition_count(topic))
            found = receipt.found()
            if found is not None:
                log.info("write %r committed before: its counts stand", write_id)
                return found
        return write_frame_in_transaction(
            df, cluster, topic, columns, transactional_id, receipt=receipt,
            timeout_s=timeout_s, transaction_timeout_ms=transaction_timeout_ms, attempts=3)
    return write_frame(df, cluster.namespace, topic, write_id or uuid.uuid4().hex, columns,
                       acks=acks, timeout_s=timeout_s, new_write_id=write_id is None)


def write_dataset(
    ds: ray.data.Dataset,
    cluster: Cluster,
    topic: str,
    *,
    key_col: str | None = None,
    value_col: str = "value",
    partition_col: str | None = None,
    headers_col: str | None = None,
    acks: Any = "all",
    write_id: str | None = None,
    timeout_s: float = 120.0,
    ray_remote_args: dict[str, Any] | None = None,
    concurrency: int | None = None,
) -> dict[int, int]:
    """`write_topic` for Ray Data: produce every row of `ds` to `topic`, each exactly once;
    returns how many records of the write each partition holds. The columns are those
    `write_topic` takes (and `read_dataset` gives): key and value binary or string, the
    partition an integer, headers a list of (key string, value binary) structs.

    Ray Data's write tasks write (`pipelines.dataset_writes`), and a task Ray runs again adds
    only the records its earlier attempt did not store. Run again under the same `write_id`
    (after the driver died, say), the write stores only what is missing; it must then be the
    same Dataset, whose blocks come out the same on every run. `ray_remote_args` and
    `concurrency` go to `Dataset.write_datasink` (write tasks take no CPU unless told)."""
    if not cluster.topic_exists(topic):
        raise UnknownTopicError(f"topic {topic!r} does not exist: create it first")
    sink = TopicDatasink(cluster.namespace, topic, write_id or uuid.uuid4().hex,
                         SinkColumns(key_col, value_col, partition_col, headers_col),
                         acks, timeout_s)
    return write_blocks(ds, sink, ray_remote_args=ray_remote_args, concurrency=concurrency)
