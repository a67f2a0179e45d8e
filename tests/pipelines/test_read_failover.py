"""A read planned before the partition's leader dies is done by the new leader: the driver's
Ray Data read and Spark's tasks alike find it and read every record once."""

from __future__ import annotations

from rafka import Cluster
from rafka.pipelines.topics import (
    offset_ranges,
    ranges_dataset,
    ranges_frame,
    source_options,
)
from tests.support.cluster import module_cluster, partition_state

cluster = module_cluster("read-failover", 3)


def test_reads_planned_before_the_leader_died_are_done_by_the_new_one(spark, cluster: Cluster
                                                                      ) -> None:
    topic = "failover"
    cluster.create_topic(topic, partitions=2, replication_factor=3)
    producer = cluster.producer(acks="all")
    for i in range(2000):
        producer.send(topic, value=f"v{i}".encode(), partition=i % 2)
    producer.flush()
    producer.close()
    options = source_options(topic, None, streaming=False)
    ranges = offset_ranges(cluster, options)
    assert ranges == {(topic, 0): (0, 1000), (topic, 1): (0, 1000)}
    dataset = ranges_dataset(cluster, ranges)  # the hosts hold the tables now
    victim = partition_state(cluster, topic, 0)["leader"]
    cluster.kill_broker(victim)
    # Spark reads when it computes: after the death, from the new leaders.
    frame = ranges_frame(spark, cluster, ranges, None, options)
    values = sorted(bytes(row.value) for row in frame.select("value").collect())
    assert values == sorted(f"v{i}".encode() for i in range(2000))
    assert partition_state(cluster, topic, 0)["leader"] not in (victim, -1)
    # The tables read before the death are the driver's: they outlive the host that made them.
    assert sorted(r["value"] for r in dataset.take_all()) == values
    again = ranges_dataset(cluster, ranges)
    assert sorted(r["value"] for r in again.take_all()) == values
