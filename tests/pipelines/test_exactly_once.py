"""The exactly-once sink: `write_topic` and a stream's `output_topic` store each row once when
a Spark task fails midway and runs again, and when a whole write runs again under its id; the
transactional sink shows a read_committed reader each write whole or not at all."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections import Counter
from pathlib import Path

import pyarrow as pa
import pytest
from pyspark.sql import functions as F

from rafka import Cluster
from rafka.actors.clients.partitioner import default_partition
from rafka.actors.clients.transaction_member import JoinedTransaction, TransactionMemberProducer
from rafka.actors.errors import InvalidTxnStateError, ProducerFencedError
from rafka.pipelines.checkpoint import StreamCheckpoint
from rafka.pipelines.sequenced_sink import NonDeterministicInputError
from rafka.pipelines.streaming import stream_topic
from rafka.pipelines.topics import read_topic, source_options, write_topic
from tests.support.cluster import (
    fresh,
    module_cluster,
    read_values,
    stored_count,
    stored_records,
)
from tests.support.pipelines import ExecutorWatch, spark_executor_pids, start_driver

cluster = module_cluster("sink", 2)


def stored_values(cluster: Cluster, topic: str, expected: int) -> Counter[bytes]:
    """How often each value is in `topic`."""
    return Counter(record.value for record in stored_records(cluster, topic, expected))


def numbers(spark, count: int, partitions: int = 2):
    return spark.range(0, count, numPartitions=partitions).select(
        F.col("id").cast("string").alias("value"))


def test_a_write_run_again_under_its_id_stores_nothing_twice(spark, cluster: Cluster) -> None:
    topic = fresh("again")
    cluster.create_topic(topic, partitions=3, replication_factor=2)
    frame = numbers(spark, 5000).withColumn("key", F.concat(F.lit("k"), F.col("value")))
    first = write_topic(frame, cluster, topic, key_col="key", write_id="nightly-1")
    second = write_topic(frame, cluster, topic, key_col="key", write_id="nightly-1")
    assert first == second and sum(first.values()) == 5000
    stored = stored_values(cluster, topic, 5000)
    assert stored == Counter(str(i).encode() for i in range(5000))
    # Another write id is another write: its rows are stored again.
    write_topic(frame, cluster, topic, key_col="key", write_id="nightly-2")
    assert set(stored_values(cluster, topic, 10_000).values()) == {2}


def start_write_driver(cluster: Cluster, topic: str, rows: int, write_id: str,
                       log: Path) -> subprocess.Popen:
    return start_driver("tests.support.write_driver", cluster,
                        [topic, str(rows), write_id, str(log.with_suffix(".json"))], log)


def test_an_executor_killed_midway_leaves_its_retried_tasks_only_what_is_missing(
        cluster: Cluster, tmp_path: Path) -> None:
    """SIGKILL the Spark executor while its tasks write; Spark runs them again on the executor
    RayDP starts in its place, and they skip what the killed attempts stored.

    The write runs in a driver process of its own, so that its Spark, not the session's, loses
    the executor. RayDP 1.6.5 can lose the executor Ray restarts (docs/pipelines.md, "Known
    problems"), and then the job waits forever: seen as no executor alive for a minute, the
    driver is stopped and run again under the same write id, as its user would, and the
    retried tasks must then skip what the killed attempts stored just the same.
    """
    topic = fresh("midway")
    cluster.create_topic(topic, partitions=2, replication_factor=2)
    rows, write_id, log = 150_000, fresh("write"), tmp_path / "driver.log"
    others = set(spark_executor_pids())  # the test session's own Spark, if it runs
    driver = start_write_driver(cluster, topic, rows, write_id, log)
    try:
        deadline = time.monotonic() + 300
        while (stored := stored_count(cluster, topic, 2)) < 20_000:
            assert driver.poll() is None, log.read_text()[-5000:]
            assert time.monotonic() < deadline, f"only {stored} records stored in 300 s"
            time.sleep(0.02)
        killed = [pid for pid in spark_executor_pids() if pid not in others]
        assert killed, "the driver's Spark has no executor alive"
        for pid in killed:
            os.kill(pid, signal.SIGKILL)
        assert stored < rows, "the executor was not killed midway"

        executors, deadline = ExecutorWatch(others | set(killed)), time.monotonic() + 600
        while driver.poll() is None:
            assert time.monotonic() < deadline, "the write did not finish in 600 s"
            if executors.lost():
                print("RayDP lost the restarted executor: the driver is run again")
                driver.kill()
                driver.wait(60)
                driver = start_write_driver(cluster, topic, rows, write_id, log)
                executors.reset()
            time.sleep(0.5)
        assert driver.returncode == 0, log.read_text()[-5000:]
    finally:
        if driver.poll() is None:
            driver.kill()
            driver.wait(60)

    counts = json.loads(log.with_suffix(".json").read_text())
    assert sum(counts.values()) == rows
    stored = stored_values(cluster, topic, rows)
    assert stored == Counter(str(i).encode() for i in range(rows))


def test_a_rerun_with_other_rows_than_the_first_is_refused(spark, cluster: Cluster) -> None:
    topic = fresh("changed")
    cluster.create_topic(topic, partitions=1, replication_factor=2)
    write_topic(numbers(spark, 1000, partitions=1), cluster, topic, write_id="w")
    with pytest.raises(Exception, match="gives other rows each time") as raised:
        write_topic(numbers(spark, 400, partitions=1), cluster, topic, write_id="w")
    assert NonDeterministicInputError.__name__ in str(raised.value)
    assert sum(stored_values(cluster, topic, 1000).values()) == 1000


def test_rows_go_to_their_partition_column_else_where_java_puts_their_key(
        spark, cluster: Cluster) -> None:
    topic = fresh("placed")
    cluster.create_topic(topic, partitions=3, replication_factor=1)
    rows = [(None if i % 4 == 0 else b"k%d" % (i % 11), b"v%d" % i,
             i % 3 if i % 5 == 0 else None) for i in range(3000)]
    frame = spark.createDataFrame(rows, "key binary, value binary, p int")

    counts = write_topic(frame, cluster, topic, key_col="key", partition_col="p")

    stored = stored_records(cluster, topic, 3000)
    assert sorted(record.value for record in stored) == sorted(value for _, value, _ in rows)
    assert sum(counts.values()) == 3000
    where = {record.value: record.partition for record in stored}
    for key, value, partition in rows:
        if partition is not None:
            assert where[value] == partition
        elif key is not None:
            assert where[value] == default_partition(key, 3)
    # A partition the topic lacks fails the write, naming it.
    with pytest.raises(Exception, match="partition 7 does not exist in topic"):
        write_topic(spark.createDataFrame([(b"x", 7)], "value binary, p int"), cluster, topic,
                    partition_col="p")


def test_columns_of_the_wrong_type_are_refused_before_anything_is_written(
        spark, cluster: Cluster) -> None:
    topic = fresh("types")
    cluster.create_topic(topic, partitions=1, replication_factor=2)
    frame = spark.range(0, 10).select(F.col("id").alias("value"))
    with pytest.raises(TypeError, match="'value' is bigint: keys and values must be binary"):
        write_topic(frame, cluster, topic)
    with pytest.raises(TypeError, match="'p' is string: a partition is an integer"):
        write_topic(numbers(spark, 10).withColumn("p", F.lit("0")), cluster, topic,
                    partition_col="p")


def keyed_source_and_sink(cluster: Cluster, source: str, sink: str) -> None:
    """A source of 2 partitions holding "0" .. "2999" under ten keys; an empty sink of 3."""
    cluster.create_topic(source, partitions=2, replication_factor=2)
    cluster.create_topic(sink, partitions=3, replication_factor=2)
    producer = cluster.producer(acks="all")
    producer.send_batch(source, [str(i).encode() for i in range(3000)],
                        [f"k{i % 10}".encode() for i in range(3000)])
    producer.close()


def test_a_stream_writes_each_batch_output_once_to_its_output_topic(
        spark, cluster: Cluster, tmp_path: Path) -> None:
    source, sink = fresh("orders"), fresh("enriched")
    keyed_source_and_sink(cluster, source, sink)
    failed = []

    def enrich(frame, batch_id: int):
        if batch_id == 1 and not failed:  # the batch runs again: its first output is kept
            failed.append(batch_id)
            write_topic(frame.select("key", F.concat("value", F.lit("!")).alias("value")),
                        cluster, sink, key_col="key", write_id=f"{stream.checkpoint.stream_id}/1")
            raise RuntimeError("the batch failed after writing")
        return frame.select("key", F.concat("value", F.lit("!")).alias("value"))

    with pytest.raises(ValueError, match="give checkpoint= too"):
        stream_topic(spark, cluster, source, "g", enrich, output_topic=sink)
    stream = stream_topic(spark, cluster, source, None, enrich,
                          checkpoint=str(tmp_path / "checkpoint"), output_topic=sink,
                          options={"startingOffsets": "earliest"}, trigger="availableNow",
                          max_records_per_batch=1000)
    assert stream.await_termination(300)
    assert stream.exception() is None and failed == [1]
    stored = stored_values(cluster, sink, 3000)
    assert stored == Counter(f"{i}!".encode() for i in range(3000))


def test_headers_are_written_as_spark_reads_them(spark, cluster: Cluster) -> None:
    source, sink = fresh("with-headers"), fresh("copied")
    cluster.create_topic(source, partitions=2, replication_factor=2)
    cluster.create_topic(sink, partitions=2, replication_factor=2)
    producer = cluster.producer(acks="all")
    for i in range(200):
        producer.send(source, str(i).encode(), f"k{i}".encode(),
                      headers=[("trace", f"t{i}".encode()), ("empty", None)] if i % 2 else None)
    producer.close()
    frame = read_topic(spark, cluster, source, include_headers=True).select(
        "key", "value", "headers")
    for _attempt in range(2):  # the second stores nothing again
        write_topic(frame, cluster, sink, key_col="key", headers_col="headers",
                    write_id="copy")
    copied = {bytes(row.value): [(h.key, None if h.value is None else bytes(h.value))
                                 for h in row.headers]
              for row in read_topic(spark, cluster, sink, include_headers=True).collect()}
    assert len(copied) == 200
    assert copied[b"7"] == [("trace", b"t7"), ("empty", None)]
    assert copied[b"8"] == []
    with pytest.raises(TypeError, match="headers are array<struct<key:string,value:binary>>"):
        write_topic(frame.withColumn("headers", F.lit("x")), cluster, sink,
                    headers_col="headers")


# ------------------------------------------------------------------ the transactional sink


def committed_values(cluster: Cluster, topic: str, expected: int) -> Counter[bytes]:
    return Counter(read_values(cluster, topic, "read_committed", expected))


def test_a_transactional_write_is_seen_whole_and_its_rerun_writes_nothing(
        spark, cluster: Cluster) -> None:
    topic = fresh("txn-write")
    cluster.create_topic(topic, partitions=3, replication_factor=2)
    frame = numbers(spark, 5000).withColumn("key", F.concat(F.lit("k"), F.col("value")))
    first = write_topic(frame, cluster, topic, key_col="key", write_id="txn-1",
                        transactional=True)
    assert sum(first.values()) == 5000
    records = stored_records(cluster, topic, 5000)
    assert Counter(r.value for r in records) == Counter(str(i).encode() for i in range(5000))
    assert all(r.partition == default_partition(r.key, 3) for r in records)
    assert {p: n for p, n in Counter(r.partition for r in records).items()} == first
    # Run again under its id, with other rows: the committed write stands, nothing is added.
    again = write_topic(numbers(spark, 10), cluster, topic, write_id="txn-1", transactional=True)
    assert again == first
    assert committed_values(cluster, topic, 5000) == Counter(str(i).encode() for i in range(5000))
    with pytest.raises(ValueError, match="acks='all'"):
        write_topic(frame, cluster, topic, transactional=True, acks=1)


def test_a_transactional_write_aborts_what_an_earlier_attempt_left_open(
        spark, cluster: Cluster) -> None:
    """An attempt that wrote records and died before committing: the next attempt under the
    same write id fences it, and no read_committed reader ever sees its records."""
    topic = fresh("txn-replace")
    cluster.create_topic(topic, partitions=2, replication_factor=2)
    stale = cluster.producer(transactional_id="rafka.write.txn-2")
    stale.init_transactions()
    stale.begin_transaction()
    stale.send_batch(topic, [f"stale-{i}".encode() for i in range(100)])
    stale.flush()
    counts = write_topic(numbers(spark, 1000), cluster, topic, write_id="txn-2",
                         transactional=True)
    assert sum(counts.values()) == 1000
    assert committed_values(cluster, topic, 1000) == Counter(
        str(i).encode() for i in range(1000))
    uncommitted = read_values(cluster, topic, "read_uncommitted", 1100)
    assert sum(value.startswith(b"stale-") for value in uncommitted) == 100
    with pytest.raises(ProducerFencedError):
        stale.commit_transaction()
    stale.close()


def test_a_member_refuses_a_partition_an_earlier_member_wrote_in_the_transaction(
        cluster: Cluster) -> None:
    """Two members numbering one partition from 0 under one epoch would collide: the second
    refuses, and the transaction must be aborted."""
    topic = fresh("txn-members")
    cluster.create_topic(topic, partitions=2, replication_factor=2)
    owner = cluster.producer(transactional_id=fresh("owner"))
    owner.init_transactions()
    owner.begin_transaction()
    transaction = owner.transactions
    assert transaction is not None
    transaction.add_partitions([(topic, 0), (topic, 1)])

    def member() -> TransactionMemberProducer:
        return TransactionMemberProducer(cluster.namespace, JoinedTransaction(
            transaction.transactional_id, transaction.producer_id, transaction.producer_epoch,
            transaction.partitions))

    values = pa.array([b"a", b"b"], pa.binary())
    first, second = member(), member()
    first.send_columns(topic, values, partition=0).partition_counts(30)
    with pytest.raises(InvalidTxnStateError, match="earlier attempt"):
        second.send_columns(topic, values, partition=0)
    second.send_columns(topic, values, partition=1).partition_counts(30)
    with pytest.raises(InvalidTxnStateError, match="owner"):
        second.transactions.end(commit=True)  # type: ignore[union-attr]
    first.close()
    second.close()
    owner.commit_transaction()
    owner.close()
    assert sorted(read_values(cluster, topic, "read_committed", 4)) == [b"a", b"a", b"b", b"b"]


def test_a_transactional_stream_commits_each_batch_with_its_source_offsets(
        spark, cluster: Cluster, tmp_path: Path) -> None:
    source, sink, group = fresh("txn-orders"), fresh("txn-enriched"), fresh("txn-group")
    keyed_source_and_sink(cluster, source, sink)

    def enrich(frame, _batch_id: int):
        return frame.select("key", F.concat("value", F.lit("!")).alias("value"))

    def run() -> None:
        stream = stream_topic(spark, cluster, source, group, enrich, checkpoint=checkpoint,
                              output_topic=sink, transactional=True,
                              options={"startingOffsets": "earliest"},
                              trigger="availableNow", max_records_per_batch=1000)
        assert stream.await_termination(300)

    checkpoint = str(tmp_path / "checkpoint")
    with pytest.raises(ValueError, match="give output_topic="):
        stream_topic(spark, cluster, source, group, enrich, checkpoint=checkpoint,
                     transactional=True)
    run()
    expected = Counter(f"{i}!".encode() for i in range(3000))
    assert committed_values(cluster, sink, 3000) == expected
    ends = {(source, p): end for (_t, p), end in
            cluster.consumer().end_offsets([(source, 0), (source, 1)]).items()}
    assert cluster.committed_offsets(group, list(ends)) == ends
    # A driver that died after its last batch's transaction committed, before its checkpoint
    # said so: the restarted stream finds the batch's offsets committed and writes nothing.
    state = StreamCheckpoint(checkpoint, source_options(
        source, {"startingOffsets": "earliest"}, streaming=True, group=group,
        max_records_per_batch=1000).stream_source())
    last = state.last_batch()
    assert last is not None and last.committed
    (Path(checkpoint) / "commits" / str(last.batch_id)).unlink()
    run()
    assert committed_values(cluster, sink, 3000) == expected
    assert state.last_batch() == last
