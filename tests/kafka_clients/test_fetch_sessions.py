"""Incremental fetch sessions (KIP-227) with kafka-python, whose consumer opens one with each
broker it fetches from: it reads every record of many partitions, each once and in order, while
its fetches list only what changed; and a session is checked against the ACLs at every fetch,
so that a principal that loses READ is refused the partitions its session already held."""

from __future__ import annotations

import random
import time
import uuid

from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import (
    ACL,
    ACLFilter,
    ACLOperation,
    ACLPermissionType,
    ResourcePattern,
    ResourceType,
)
from kafka.errors import TopicAuthorizationFailedError

from rafka import Cluster
from tests.support.kafka_clients import listener_stats
from tests.support.waiting import wait_until

PARTITIONS = 48


def sessions_held(cluster: Cluster) -> int:
    return sum(stats["fetch_sessions"] for stats in listener_stats(cluster))


def topic_and_clients(cluster: Cluster, prefix: str
                      ) -> tuple[str, KafkaProducer, KafkaConsumer]:
    """A new topic of PARTITIONS partitions, a producer, and a consumer assigned them all."""
    topic = f"{prefix}-{uuid.uuid4().hex[:6]}"
    cluster.create_topic(topic, partitions=PARTITIONS, replication_factor=2)
    producer = KafkaProducer(bootstrap_servers=cluster.bootstrap_servers(), acks="all")
    consumer = KafkaConsumer(bootstrap_servers=cluster.bootstrap_servers(),
                             enable_auto_commit=False, auto_offset_reset="earliest",
                             fetch_max_wait_ms=100)
    consumer.assign([TopicPartition(topic, partition) for partition in range(PARTITIONS)])
    return topic, producer, consumer


def read(consumer: KafkaConsumer, got: dict[int, list[bytes]], until: int,
         timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while sum(map(len, got.values())) < until:
        assert time.monotonic() < deadline, (
            f"read {sum(map(len, got.values()))} of {until} records")
        for tp, records in consumer.poll(timeout_ms=200).items():
            got.setdefault(tp.partition, []).extend(record.value for record in records)


def test_a_consumer_of_many_partitions_reads_each_record_once_in_fetch_sessions(
        kafka_cluster: Cluster) -> None:
    topic, producer, consumer = topic_and_clients(kafka_cluster, "sessions")
    sessions_before = sessions_held(kafka_cluster)
    sent: dict[int, list[bytes]] = {}
    got: dict[int, list[bytes]] = {}
    rng = random.Random(5)
    try:
        # A few partitions take records at a time, so that most fetches find most partitions
        # unchanged: those are what a session leaves out.
        for round_ in range(8):
            for partition in rng.sample(range(PARTITIONS), 4):
                for i in range(25):
                    value = f"{round_}-{partition}-{i}".encode()
                    producer.send(topic, value=value, partition=partition)
                    sent.setdefault(partition, []).append(value)
            producer.flush(timeout=30)
            read(consumer, got, sum(map(len, sent.values())))
        # Nothing more comes, however long it polls.
        for _ in range(5):
            for tp, records in consumer.poll(timeout_ms=200).items():
                got.setdefault(tp.partition, []).extend(record.value for record in records)
        sessions = sessions_held(kafka_cluster)
    finally:
        consumer.close()
        producer.close(timeout=10)
    assert got == sent
    # One session with each broker that leads some of the partitions (all three do).
    assert sessions - sessions_before >= 3, (sessions_before, sessions)


def test_a_session_is_refused_a_topic_its_principal_may_no_longer_read(
        kafka_cluster: Cluster) -> None:
    topic, producer, consumer = topic_and_clients(kafka_cluster, "sessions-acl")
    admin = KafkaAdminClient(bootstrap_servers=kafka_cluster.bootstrap_servers())
    # This listener's clients are all User:ANONYMOUS, allowed where no ACL names a topic.
    deny = ACL(principal="User:ANONYMOUS", host="*", operation=ACLOperation.READ,
               permission_type=ACLPermissionType.DENY,
               resource_pattern=ResourcePattern(ResourceType.TOPIC, topic))
    try:
        for partition in range(PARTITIONS):
            producer.send(topic, value=b"before", partition=partition)
        producer.flush(timeout=30)
        got: dict[int, list[bytes]] = {}
        read(consumer, got, PARTITIONS)
        assert sessions_held(kafka_cluster) >= 3

        assert not admin.create_acls([deny])["failed"]
        refused: list[BaseException] = []
        after: list[bytes] = []

        def poll() -> None:
            try:
                for records in consumer.poll(timeout_ms=200).values():
                    after.extend(record.value for record in records)
            except TopicAuthorizationFailedError as error:
                refused.append(error)

        # Nothing new is written, so only a fetch that checks the partitions its session
        # holds (and the client no longer lists) can be refused.
        wait_until(lambda: poll() or refused, 30, "the consumer's session refused the topic")
        producer.send(topic, value=b"after", partition=0)
        producer.flush(timeout=30)
        deadline = time.monotonic() + 3
        while time.monotonic() < deadline:
            poll()
        assert not after, after
    finally:
        admin.delete_acls([ACLFilter(
            principal="User:ANONYMOUS", host="*", operation=ACLOperation.READ,
            permission_type=ACLPermissionType.DENY,
            resource_pattern=ResourcePattern(ResourceType.TOPIC, topic))])
        admin.close()
        consumer.close()
        producer.close(timeout=10)

