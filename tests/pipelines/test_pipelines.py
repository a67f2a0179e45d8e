"""Topics to Spark DataFrames through RayDP and back, on a real Spark session."""

from __future__ import annotations

import json
import threading
import time

import msgpack
import pytest
from pyspark.sql import functions as F

from rafka import Cluster
from rafka.actors.errors import UnknownTopicError
from rafka.pipelines.decode import json_values, msgpack_values, utf8
from rafka.pipelines.streaming import stream_topic
from rafka.pipelines.topics import read_topic, write_topic
from tests.support.cluster import fresh, module_cluster

KAFKA_SOURCE_SCHEMA = [
    ("key", "binary"), ("value", "binary"), ("topic", "string"), ("partition", "int"),
    ("offset", "bigint"), ("timestamp", "timestamp"), ("timestampType", "int"),
]


cluster = module_cluster("pipelines", 2)


def send_clicks(cluster: Cluster, topic: str, count: int) -> list[dict]:
    producer = cluster.producer(acks="all")
    clicks = [{"user": f"u{i % 7}", "page": f"/p{i % 5}", "ms": i % 100} for i in range(count)]
    for click in clicks:
        producer.send(topic, value=json.dumps(click).encode(), key=click["user"].encode())
    producer.flush()
    producer.close()
    return clicks


def test_topic_to_aggregation_to_topic_to_dataframe(spark, cluster: Cluster) -> None:
    clicks_topic, totals_topic = fresh("clicks"), fresh("totals")
    cluster.create_topic(clicks_topic, partitions=3, replication_factor=2)
    cluster.create_topic(totals_topic, partitions=2, replication_factor=2)
    clicks = send_clicks(cluster, clicks_topic, 1000)

    frame = read_topic(spark, cluster, clicks_topic)
    assert [(f.name, f.dataType.simpleString()) for f in frame.schema.fields] == \
        KAFKA_SOURCE_SCHEMA
    assert frame.count() == 1000
    parsed = json_values(frame, "user string, page string, ms int", into="click")
    totals = (parsed.groupBy("click.page")
              .agg(F.count("*").alias("clicks"), F.sum("click.ms").alias("ms")))
    out = totals.select(F.col("page").alias("key"),
                        F.to_json(F.struct("page", "clicks", "ms")).alias("value"))
    counts = write_topic(out, cluster, totals_topic, key_col="key", value_col="value")
    assert sum(counts.values()) == 5

    back = json_values(utf8(read_topic(spark, cluster, totals_topic)),
                       "page string, clicks long, ms long", into="total")
    got = {row.total.page: (row.total.clicks, row.total.ms) for row in back.collect()}
    expected = {}
    for click in clicks:
        pages = expected.setdefault(click["page"], [0, 0])
        pages[0] += 1
        pages[1] += click["ms"]
    assert got == {page: tuple(v) for page, v in expected.items()}
    # Keys land where a Java producer would put them: every page in one partition.
    by_key = back.groupBy("key").agg(F.countDistinct("partition").alias("n")).collect()
    assert all(row.n == 1 for row in by_key)


def test_offsets_are_committed_only_when_the_batch_is_consumed(spark, cluster: Cluster) -> None:
    topic, group = fresh("orders"), fresh("billing")
    cluster.create_topic(topic, partitions=2, replication_factor=2)
    send_clicks(cluster, topic, 100)
    first = read_topic(spark, cluster, topic, group=group)
    assert first.count() == 100
    assert cluster.committed_offsets(group, [(topic, 0), (topic, 1)]) == {
        (topic, 0): None, (topic, 1): None}
    again = read_topic(spark, cluster, topic, group=group)
    assert again.count() == 100  # not committed yet: the same batch
    again.commit()
    assert cluster.committed_offsets(group, list(again.end_offsets)) == again.end_offsets
    assert sum(again.end_offsets.values()) == 100

    send_clicks(cluster, topic, 30)
    with read_topic(spark, cluster, topic, group=group) as batch:
        assert batch.count() == 30
    assert sum(v for v in cluster.committed_offsets(
        group, [(topic, 0), (topic, 1)]).values()) == 130
    with pytest.raises(RuntimeError), read_topic(spark, cluster, topic, group=group) as batch:
        raise RuntimeError("the consumer of the batch failed")
    assert read_topic(spark, cluster, topic, group=group).count() == 0


def test_starting_and_ending_offsets_as_spark_takes_them(spark, cluster: Cluster) -> None:
    topic = fresh("ranges")
    cluster.create_topic(topic, partitions=2, replication_factor=1)
    producer = cluster.producer()
    for i in range(40):
        producer.send(topic, value=str(i).encode(), partition=i % 2)
    producer.flush()
    producer.close()
    frame = read_topic(spark, cluster, topic,
                       starting_offsets=json.dumps({topic: {"0": 5, "1": -2}}),
                       ending_offsets={topic: {"0": 10, "1": -1}})
    rows = frame.select("partition", "offset").collect()
    assert sorted((r.partition, r.offset) for r in rows) == (
        [(0, o) for o in range(5, 10)] + [(1, o) for o in range(20)])
    with pytest.raises(ValueError, match="not allowed for batch queries"):
        read_topic(spark, cluster, topic, starting_offsets="latest")  # as Spark refuses it
    with pytest.raises(ValueError, match="committed"):
        read_topic(spark, cluster, topic, starting_offsets="committed")
    with pytest.raises(UnknownTopicError, match="does not exist"):
        read_topic(spark, cluster, "no-such-topic")


def test_headers_and_decoders(spark, cluster: Cluster) -> None:
    topic = fresh("typed")
    cluster.create_topic(topic, partitions=1, replication_factor=1)
    producer = cluster.producer()
    producer.send(topic, key=b"k", value=msgpack.packb({"id": 7, "name": "seven"}),
                  headers=[("source", b"test")])
    producer.send(topic, key=b"bad", value=b"\xc1 not msgpack")
    producer.flush()
    producer.close()
    frame = read_topic(spark, cluster, topic, include_headers=True)
    assert frame.schema.fieldNames()[-1] == "headers"
    rows = msgpack_values(utf8(frame, "key"), "id long, name string").orderBy("offset").collect()
    assert (rows[0].key, rows[0].value.id, rows[0].value.name) == ("k", 7, "seven")
    assert [(h.key, bytes(h.value)) for h in rows[0].headers] == [("source", b"test")]
    assert rows[1].value.id is None and rows[1].value.name is None


def test_a_failing_batch_is_replayed_and_committed_after(spark, cluster: Cluster) -> None:
    topic, group = fresh("stream"), fresh("stream-group")
    cluster.create_topic(topic, partitions=2, replication_factor=2)
    send_clicks(cluster, topic, 50)
    seen: list[tuple[int, int]] = []
    failures = []

    def sink(df, batch_id: int) -> None:
        seen.append((batch_id, df.count()))
        if not failures:
            failures.append(batch_id)
            raise RuntimeError("sink unavailable")

    stream = stream_topic(spark, cluster, topic, group, sink, trigger_interval=0.2)
    deadline = time.monotonic() + 120
    while stream.records_processed < 50 and time.monotonic() < deadline:
        time.sleep(0.2)
    stream.stop()
    assert stream.await_termination(10)
    assert seen[:2] == [(0, 50), (0, 50)]  # the same batch, with the same id, came again
    assert stream.records_processed == 50 and stream.batch_id == 1
    assert sum(v for v in cluster.committed_offsets(
        group, [(topic, 0), (topic, 1)]).values()) == 50


def test_a_stream_keeps_up_while_producers_write(spark, cluster: Cluster) -> None:
    topic, group = fresh("live"), fresh("live-group")
    cluster.create_topic(topic, partitions=3, replication_factor=2)
    total = 3000
    values_seen: set[bytes] = set()
    batches = []

    def sink(df, batch_id: int) -> None:
        values = [bytes(row.value) for row in df.select("value").collect()]
        values_seen.update(values)
        batches.append((batch_id, len(values)))

    def produce() -> None:
        producer = cluster.producer(acks="all")
        for i in range(total):
            producer.send(topic, value=f"v{i}".encode())
            if i % 300 == 0:
                time.sleep(0.3)
        producer.flush()
        producer.close()

    writer = threading.Thread(target=produce)
    stream = stream_topic(spark, cluster, topic, group, sink, trigger_interval=0.5,
                          max_records_per_batch=1000)
    writer.start()
    writer.join(120)
    deadline = time.monotonic() + 120
    while len(values_seen) < total and time.monotonic() < deadline:
        time.sleep(0.3)
    stream.stop()
    stream.await_termination(10)
    assert values_seen == {f"v{i}".encode() for i in range(total)}
    assert len(batches) >= 3 and all(size <= 1000 for _batch, size in batches)
    assert [b for b, _size in batches] == list(range(len(batches)))
