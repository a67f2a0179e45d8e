"""Spark's Kafka-source options against a live cluster and Spark session: what a Spark user
would check, row by row."""

from __future__ import annotations

import json

import pytest
import ray

from rafka import Cluster
from rafka.actors.clients.metadata import ClientMetadata
from rafka.actors.errors import UnknownTopicError, code_of
from rafka.actors.messages import RecordsDeletion
from rafka.pipelines.source_options import DataLossError, SourceOptionError
from rafka.pipelines.topics import read_dataset, read_topic
from tests.support.cluster import fresh, module_cluster

T0 = 1_700_000_000_000


cluster = module_cluster("kafka-source", 2)


def fill(cluster: Cluster, topic: str, partitions: int, per_partition: int,
         step_ms: int = 10) -> None:
    """`per_partition` records in each partition, values "p<partition>-<i>", timestamps T0 +
    i * step_ms."""
    cluster.create_topic(topic, partitions=partitions, replication_factor=2)
    producer = cluster.producer(acks="all")
    for partition in range(partitions):
        for i in range(per_partition):
            producer.send(topic, value=f"p{partition}-{i}".encode(), partition=partition,
                          timestamp_ms=T0 + i * step_ms)
    producer.flush()
    producer.close()


def rows(frame) -> list[tuple[str, int, int]]:
    return sorted((r.topic, r.partition, r.offset)
                  for r in frame.select("topic", "partition", "offset").collect())


def test_several_topics_a_pattern_and_assigned_partitions(spark, cluster: Cluster) -> None:
    prefix = fresh("src")
    first, second, other = f"{prefix}-a", f"{prefix}-b", fresh("other")
    for topic in (first, second, other):
        fill(cluster, topic, 2, 3)
    both = rows(read_topic(spark, cluster, options={"subscribe": f"{first},{second}"}))
    assert both == [(t, p, o) for t in (first, second) for p in range(2) for o in range(3)]
    assert rows(read_topic(spark, cluster, options={"subscribePattern": f"{prefix}-.*"})) == both
    assigned = read_topic(spark, cluster, options={
        "assign": json.dumps({first: [1], other: [0]})})
    assert rows(assigned) == sorted([(first, 1, o) for o in range(3)]
                                  + [(other, 0, o) for o in range(3)])
    with pytest.raises(SourceOptionError, match=r"has partitions 0\.\.1"):
        read_topic(spark, cluster, options={"assign": json.dumps({first: [5]})})
    with pytest.raises(UnknownTopicError, match="does not exist"):
        read_topic(spark, cluster, options={"subscribe": f"{first},no-such-topic"})
    assert read_topic(spark, cluster, options={"subscribePattern": "nothing-like-this"}
                      ).count() == 0


def test_offsets_by_timestamp(spark, cluster: Cluster) -> None:
    topic = fresh("times")
    fill(cluster, topic, 2, 10)  # timestamps T0, T0 + 10, ..., T0 + 90 in each
    frame = read_topic(spark, cluster, topic, options={
        "startingTimestamp": str(T0 + 25), "endingTimestamp": str(T0 + 60)})
    assert rows(frame) == [(topic, p, o) for p in range(2) for o in range(3, 6)]
    frame = read_topic(spark, cluster, topic, options={
        "startingOffsetsByTimestamp": json.dumps({topic: {"0": T0 + 80, "1": T0}})})
    assert rows(frame) == [(topic, 0, 8), (topic, 0, 9)] + [(topic, 1, o) for o in range(10)]
    with pytest.raises(SourceOptionError, match="no record at or after"):
        read_topic(spark, cluster, topic, options={"startingTimestamp": str(T0 + 10_000)})
    assert read_topic(spark, cluster, topic, options={
        "startingTimestamp": str(T0 + 10_000),
        "startingOffsetsByTimestampStrategy": "latest"}).count() == 0
    stamps = read_topic(spark, cluster, topic, ending_offsets=json.dumps(
        {topic: {"0": 2, "1": 1}})).orderBy("partition", "offset").collect()
    assert [int(r.timestamp.timestamp() * 1000) for r in stamps] == [T0, T0 + 10, T0]


def test_min_partitions_splits_a_partition_over_several_spark_partitions(
        spark, cluster: Cluster) -> None:
    topic = fresh("split")
    fill(cluster, topic, 1, 1000)
    frame = read_topic(spark, cluster, topic, options={"minPartitions": "4"})
    assert frame.rdd.getNumPartitions() >= 4
    assert rows(frame) == [(topic, 0, o) for o in range(1000)]


def test_records_deleted_before_they_are_read_fail_the_read_unless_told(
        spark, cluster: Cluster) -> None:
    topic = fresh("lost")
    fill(cluster, topic, 1, 20)
    _name, host = ClientMetadata(cluster.namespace).leader_host(topic, 0)
    assert code_of(ray.get(host.delete_records.remote([RecordsDeletion(topic, 0, 8)]))[0]) == 0
    from_five = json.dumps({topic: {"0": 5}})
    with pytest.raises(DataLossError, match=rf"{topic}-0: offsets 5\.\.7 are gone"):
        read_topic(spark, cluster, topic, starting_offsets=from_five)
    frame = read_topic(spark, cluster, topic, starting_offsets=from_five,
                       options={"failOnDataLoss": "false"})
    assert rows(frame) == [(topic, 0, o) for o in range(8, 20)]


def test_ray_data_reads_the_same_records_without_spark(cluster: Cluster) -> None:
    topic = fresh("dataset")
    fill(cluster, topic, 3, 50)
    dataset = read_dataset(cluster, topic, include_headers=True)
    records = sorted((r["partition"], r["offset"], r["value"]) for r in dataset.take_all())
    assert records == [(p, o, f"p{p}-{o}".encode()) for p in range(3) for o in range(50)]
    assert dataset.schema().names[-1] == "headers"
    assert read_dataset(cluster, options={"subscribePattern": "none-such-.*"}).count() == 0
