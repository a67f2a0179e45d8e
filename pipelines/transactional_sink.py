"""A DataFrame's rows into a topic in one Kafka transaction: a read_committed reader sees all
of a write or none of it (`write_topic(transactional=True)`, and `stream_topic`'s output per
batch).

The driver owns the transaction: it takes the transactional id's producer id and a new epoch
(`init_transactions`, which aborts whatever an earlier attempt left open and fences its tasks),
begins, and adds every partition of the topic. Spark's tasks send the rows with that id and
epoch (`actors.clients.transaction_member`), and once every task has returned, every record is
acknowledged and the driver commits.

A leader numbers an id and epoch's batches per partition, so each Kafka partition must take
them from one task: the rows are given their partition first (key, explicit partition or
keyless run, as `pipelines.sink_plan` routes them) and shuffled on it. A task that Spark runs
again cannot tell what its earlier attempt sent, so it refuses (as does a task whose partition
already holds batches of the transaction, which a stage Spark runs again would find), the job
fails, and the write runs again in a transaction of its own, under a new epoch. So neither the
rows' order nor their number need be the same on every attempt: only the attempt that commits
is ever seen.

After a crash, whether a write committed is told by its receipt: offsets committed to a group
in the write's own transaction (a stream's source offsets, or a named write's counts). A write
whose receipt is there is not run again.
"""

from __future__ import annotations

import logging
from abc import ABC, abstractmethod
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from functools import partial
from typing import Any

import pyarrow as pa
import ray
from pyspark import TaskContext
from pyspark.sql import DataFrame
from pyspark.sql.types import IntegerType, StructField, StructType

from rafka.actors.clients.producer import Producer
from rafka.actors.clients.transaction_member import JoinedTransaction, TransactionMemberProducer
from rafka.actors.cluster import Cluster
from rafka.actors.errors import InvalidTxnStateError
from rafka.pipelines.sequenced_sink import SinkColumns, batch_targets, send_rows
from rafka.pipelines.source_options import OffsetRanges, TopicPartitionKey
from rafka.pipelines.spark_worker import prepare_task
from rafka.pipelines.spark_writes import WRITTEN_SCHEMA, check_frame_types

log = logging.getLogger(__name__)

# The column the rows' Kafka partition is computed into, before the shuffle on it.
TARGET_COLUMN = "__rafka_partition"


class Receipt(ABC):
    """What a committed write leaves behind: offsets committed to `group` in its transaction."""

    group: str

    @abstractmethod
    def offsets(self, counts: dict[int, int]) -> dict[TopicPartitionKey, int]:
        """The offsets to commit for a write that stored `counts` records per partition."""

    @abstractmethod
    def found(self) -> dict[int, int] | None:
        """The counts of the write if its transaction committed (as far as they are known);
        None if it did not."""


@dataclass
class WriteReceipt(Receipt):
    """A named write's: each partition of `topic` at the number of records the write stored
    there (offsets of a group of its own, `rafka.write.<write id>`)."""

    cluster: Cluster
    group: str
    topic: str
    partitions: int

    def offsets(self, counts: dict[int, int]) -> dict[TopicPartitionKey, int]:
        return {(self.topic, partition): counts.get(partition, 0)
                for partition in range(self.partitions)}

    def found(self) -> dict[int, int] | None:
        committed = self.cluster.committed_offsets(
            self.group, [(self.topic, partition) for partition in range(self.partitions)])
        if all(offset is None for offset in committed.values()):
            return None
        return {partition: offset for (_topic, partition), offset in sorted(committed.items())
                if offset}


@dataclass
class BatchReceipt(Receipt):
    """A stream's batch's: its source offsets, committed to the stream's group."""

    cluster: Cluster
    group: str
    ranges: OffsetRanges

    def offsets(self, counts: dict[int, int]) -> dict[TopicPartitionKey, int]:
        return {tp: until for tp, (_start, until) in self.ranges.items()}

    def found(self) -> dict[int, int] | None:
        committed = self.cluster.committed_offsets(self.group, list(self.ranges))
        done = all((committed.get(tp) or 0) >= until
                   for tp, (_start, until) in self.ranges.items())
        return {} if done else None


def write_frame_in_transaction(
    df: DataFrame, cluster: Cluster, topic: str, columns: SinkColumns, transactional_id: str,
    *, receipt: Receipt | None, timeout_s: float, transaction_timeout_ms: int,
    attempts: int = 1,
) -> dict[int, int]:
    """Write every row of `df` to `topic` in one transaction of `transactional_id` (see the
    module docstring), trying up to `attempts` times; returns how many records each Kafka
    partition took. With a `receipt`, its offsets are committed in the transaction."""
    check_frame_types(df, columns)
    partitions = cluster.partition_count(topic)
    frame = df.select(*columns.names())
    targeted = frame.mapInArrow(
        partial(_with_targets, topic, partitions, columns),
        StructType([*frame.schema.fields, StructField(TARGET_COLUMN, IntegerType(), False)]))
    member_columns = SinkColumns(columns.key, columns.value, TARGET_COLUMN, columns.headers)
    tasks = min(partitions, max(1, df.sparkSession.sparkContext.defaultParallelism))
    owned = targeted.repartition(tasks, TARGET_COLUMN).select(*member_columns.names())
    context = ray.get_runtime_context()
    owner = _owner(cluster.namespace, transactional_id, transaction_timeout_ms)
    try:
        for attempt in range(1, attempts + 1):
            committing = False
            try:
                owner.begin_transaction()
                transaction = owner.transactions
                assert transaction is not None
                transaction.add_partitions([(topic, p) for p in range(partitions)])
                write = partial(_write_owned, context.gcs_address, context.namespace,
                                cluster.namespace, topic, partitions,
                                (transactional_id, transaction.producer_id,
                                 transaction.producer_epoch), member_columns, timeout_s)
                counts: Counter[int] = Counter()
                for row in owned.mapInArrow(write, WRITTEN_SCHEMA).collect():
                    counts[row["partition"]] += row["records"]
                written = dict(sorted(counts.items()))
                if receipt is not None:
                    owner.send_offsets_to_transaction(receipt.offsets(written), receipt.group)
                committing = True
                owner.commit_transaction()
                return written
            except Exception as error:
                # A new epoch aborts what this attempt wrote and fences its tasks, any still
                # sending included; an explicit abort would leave them free to start a
                # transaction at the leaders that no coordinator knows of.
                owner.close()
                owner = _owner(cluster.namespace, transactional_id, transaction_timeout_ms)
                if committing:  # whether the commit went through, only a receipt tells
                    if receipt is None:
                        raise
                    found = receipt.found()
                    if found is not None:
                        return found  # it did; its answer was lost
                if attempt == attempts:
                    raise
                log.warning("the transactional write to %s failed (attempt %d of %d): it "
                            "runs again in a new transaction: %r", topic, attempt, attempts,
                            error)
        raise AssertionError("unreachable: the last attempt returns or raises")
    finally:
        owner.close()


def _owner(namespace: str, transactional_id: str, transaction_timeout_ms: int) -> Producer:
    """The driver's producer of `transactional_id`, initialised: a new epoch."""
    owner = Producer(namespace, transactional_id=transactional_id,
                     transaction_timeout_ms=transaction_timeout_ms)
    try:
        owner.init_transactions()
    except BaseException:
        owner.close()
        raise
    return owner


def _with_targets(topic: str, partitions: int, columns: SinkColumns,
                  batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """In a Spark task: each row with the Kafka partition it goes to, in `TARGET_COLUMN`."""
    task = TaskContext.get()
    assert task is not None  # this runs in a Spark task
    first_row = 0
    for batch in batches:
        targets = batch_targets(batch, topic, partitions, task.partitionId(), first_row,
                                columns)
        first_row += batch.num_rows
        yield pa.RecordBatch.from_arrays(
            [*batch.columns, pa.array(targets, pa.int32())],
            names=[*batch.schema.names, TARGET_COLUMN])


def _write_owned(ray_address: str, driver_namespace: str, namespace: str, topic: str,
                 partitions: int, transaction: tuple[str, int, int], columns: SinkColumns,
                 timeout_s: float, batches: Iterator[pa.RecordBatch],
                 ) -> Iterator[pa.RecordBatch]:
    """In a Spark task's Python worker: send this task's rows (every row of the Kafka
    partitions it owns) in `transaction` (its id, producer id and epoch); yield how many went
    to each partition."""
    task = TaskContext.get()
    assert task is not None  # this runs in a Spark task
    if task.attemptNumber() > 0:
        raise InvalidTxnStateError(
            f"Spark runs this task of the transactional write to {topic} again: its earlier "
            "attempt's records cannot be told apart, so this transaction is given up and the "
            "write runs again in a new one")
    prepare_task(ray_address, driver_namespace)
    transactional_id, producer_id, producer_epoch = transaction
    producer = TransactionMemberProducer(namespace, JoinedTransaction(
        transactional_id, producer_id, producer_epoch,
        [(topic, partition) for partition in range(partitions)]))
    try:
        counts, sent, _left = send_rows(producer, topic, partitions, task.partitionId(),
                                        columns, batches, dict.fromkeys(range(partitions), 0))
        producer.flush(timeout_s)
        for outcome in sent:  # raises the first failure
            outcome.partition_counts(timeout_s)
    finally:
        producer.close(timeout_s)
    yield pa.RecordBatch.from_pydict(
        {"partition": list(counts), "records": list(counts.values())},
        schema=pa.schema([("partition", pa.int32()), ("records", pa.int64())]))


def transactional_acks(acks: Any) -> None:
    """A transactional write is acknowledged by every in-sync replica: refuse anything else."""
    if str(acks).lower() not in ("all", "-1"):
        raise ValueError(f"acks={acks!r}: a transactional write needs acks='all' (Kafka's "
                         "transactional producers are idempotent, which needs all)")
