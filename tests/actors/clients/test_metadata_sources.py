"""Where a client learns its leaders when no broker answers: the cluster's ZooKeeper, which a
client made by the cluster holds a session of (actors/clients/metadata.py). Every broker's
process is paused (SIGSTOP), well inside its ZooKeeper session, so the leaders and their replica
hosts stay what they were while no broker can answer a metadata request."""

from __future__ import annotations

from rafka import Cluster
from tests.support.faults import broker_pids, paused

# Well under the brokers' ZooKeeper session (4 s in the tests): no leader moves meanwhile.
SILENCE_S = 2.5


def _broker_processes(cluster: Cluster) -> list[int]:
    """Each broker actor's own process (not its replica hosts')."""
    return [broker_pids(cluster, found["id"])[0] for found in cluster.brokers()]


def test_a_producer_reads_its_leaders_from_zookeeper_while_every_broker_is_silent(
        cluster: Cluster) -> None:
    cluster.create_topic("brokers-silent", partitions=3, replication_factor=2)
    producer = cluster.producer(acks="all")
    producer.metadata.zookeeper_after_s = 0.3
    try:
        with paused(_broker_processes(cluster)):
            # A new producer knows no leader yet: its first look finds the brokers silent.
            futures = [producer.send("brokers-silent", value=f"v{p}".encode(), partition=p)
                       for p in range(3)]
            # Within the silence: asking the brokers alone would wait 30 s for them.
            written = [future.result(timeout=SILENCE_S) for future in futures]
        assert sorted(record.partition for record in written) == [0, 1, 2]
        assert producer.metadata.zookeeper_answers >= 1
    finally:
        producer.close()
    consumer = cluster.consumer(["brokers-silent"], auto_offset_reset="earliest")
    try:
        read = []
        for _ in range(50):
            read += consumer.poll(100)
            if len(read) == 3:
                break
        assert sorted(record.value for record in read) == [b"v0", b"v1", b"v2"]
    finally:
        consumer.close()


def test_a_consumer_reads_its_leaders_from_zookeeper_while_every_broker_is_silent(
        cluster: Cluster) -> None:
    cluster.create_topic("brokers-silent-reads", partitions=2, replication_factor=2)
    producer = cluster.producer(acks="all")
    for partition in range(2):
        producer.send("brokers-silent-reads", value=f"r{partition}".encode(),
                      partition=partition)
    producer.flush()
    producer.close()
    consumer = cluster.consumer(auto_offset_reset="earliest")
    consumer.metadata.zookeeper_after_s = 0.3
    try:
        with paused(_broker_processes(cluster)):
            consumer.assign_topics(["brokers-silent-reads"])
            read = []
            for _ in range(20):
                read += consumer.poll(100)
                if len(read) == 2:
                    break
        assert sorted(record.value for record in read) == [b"r0", b"r1"]
        assert consumer.metadata.zookeeper_answers >= 1
    finally:
        consumer.close()

