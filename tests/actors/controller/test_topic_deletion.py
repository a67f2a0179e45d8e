"""Deleting a topic removes every replica of it from disk, including those of a broker that is
down at the time: as in Kafka, the deletion waits for that broker, and the name stays taken
meanwhile, so a topic created again with the same name cannot pick up the old records. The
producer that wrote the old topic writes the new one: its leader has no state of the producer,
and the producer takes a new epoch for it (KIP-360)."""

from __future__ import annotations

import pytest

from rafka import Cluster
from rafka.actors.errors import RequestTimedOutError
from rafka.actors.naming import partition_log_dir
from rafka.coordination.errors import TopicExistsError
from tests.support.waiting import wait_until

TOPIC = "short-lived"
PARTITIONS = 2


def log_dirs(cluster: Cluster, broker: int) -> list[bool]:
    """Whether each partition of TOPIC has a log directory on `broker`."""
    data_dir = cluster.data_dir / f"broker-{broker}"
    return [partition_log_dir(data_dir, TOPIC, p).exists() for p in range(PARTITIONS)]


def test_a_deleted_topics_replicas_go_even_from_a_broker_down_at_the_time(
        cluster: Cluster) -> None:
    cluster.create_topic(TOPIC, partitions=PARTITIONS, replication_factor=3)
    producer = cluster.producer(acks="all", linger_ms=0)
    for i in range(20):
        producer.send(TOPIC, value=f"old-{i}".encode(), partition=i % PARTITIONS).result(timeout=60)
    assert all(all(log_dirs(cluster, b)) for b in range(3))

    absent = 2
    cluster.stop_broker(absent)
    with pytest.raises(RequestTimedOutError, match=rf"brokers \[{absent}\] hold replicas"):
        cluster.delete_topic(TOPIC, timeout_s=5)
    # The live brokers' replicas are gone; the name is still taken.
    wait_until(lambda: not any(log_dirs(cluster, 0) + log_dirs(cluster, 1)), 30,
               "the live brokers to delete their replicas")
    assert log_dirs(cluster, absent) == [True] * PARTITIONS
    assert cluster.describe_topic(TOPIC)["marked_for_deletion"]
    with pytest.raises(TopicExistsError):
        cluster.create_topic(TOPIC, partitions=1, replication_factor=1)

    cluster.start_broker(absent)
    wait_until(lambda: not cluster.topic_exists(TOPIC), 60, "the deletion to finish")
    assert log_dirs(cluster, absent) == [False] * PARTITIONS

    # A topic of the same name starts empty, on every broker.
    cluster.create_topic(TOPIC, partitions=PARTITIONS, replication_factor=3)
    producer.send(TOPIC, value=b"new", partition=0).result(timeout=60)
    assert cluster.offset_bounds(TOPIC) == {0: (0, 1), 1: (0, 0)}
    consumer = cluster.consumer(auto_offset_reset="earliest")
    consumer.assign([(TOPIC, 0), (TOPIC, 1)])
    values: list[bytes] = []
    wait_until(lambda: values.extend(r.value for r in consumer.poll(timeout_ms=500))
               or values, 30, "the new record")
    assert values == [b"new"]
    consumer.close()
    producer.close()
