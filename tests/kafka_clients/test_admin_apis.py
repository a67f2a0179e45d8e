"""Kafka's cluster-wide admin answers, asked by unmodified Kafka admin clients of the package's
three-broker cluster (an authorizer allowing everyone where no ACL says otherwise):
DescribeCluster (KIP-700) through confluent-kafka's `describe_cluster`, and OffsetDelete
(KIP-496) through kafka-python's `delete_group_offsets`, with Kafka's answers for a group that
subscribes to the topic, one that does not exist and a partition that does not; and
DeleteRecords across partitions led by different brokers, with every replica following."""

from __future__ import annotations

import uuid

import pytest
import ray
from confluent_kafka.admin import AclOperation, AdminClient
from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
from kafka.errors import (
    GroupIdNotFoundError,
    GroupSubscribedToTopicError,
    NoError,
    UnknownTopicOrPartitionError,
)
from kafka.protocol.admin import DescribeClusterRequest
from kafka.structs import OffsetAndMetadata

from rafka import Cluster
from tests.support.kafka_clients import PARTITIONS, new_topic
from tests.support.kafka_wire import KafkaWire, first_address
from tests.support.waiting import wait_until

# What Kafka's authorizer answers for the cluster when every operation is allowed.
EVERY_CLUSTER_OPERATION = {
    AclOperation.CREATE, AclOperation.CLUSTER_ACTION, AclOperation.DESCRIBE_CONFIGS,
    AclOperation.ALTER_CONFIGS, AclOperation.IDEMPOTENT_WRITE, AclOperation.ALTER,
    AclOperation.DESCRIBE}
MISMATCHED_ENDPOINT_TYPE = 114


def advertised(cluster: Cluster) -> set[tuple[str, int]]:
    return {(host, int(port)) for host, port in (
        address.rsplit(":", 1) for address in cluster.bootstrap_servers().split(","))}


def test_confluent_kafka_describes_the_cluster(kafka_cluster: Cluster) -> None:
    admin = AdminClient({"bootstrap.servers": kafka_cluster.bootstrap_servers()})
    described = admin.describe_cluster(include_authorized_operations=True,
                                       request_timeout=30).result(timeout=60)
    assert described.cluster_id == kafka_cluster.name
    assert {node.id for node in described.nodes} == {0, 1, 2}
    assert {(node.host, node.port) for node in described.nodes} == advertised(kafka_cluster)
    assert all(node.rack is None for node in described.nodes)  # none configured
    assert described.controller is not None and described.controller.id in {0, 1, 2}
    assert set(described.authorized_operations) == EVERY_CLUSTER_OPERATION
    # Not asked, none are said, as Kafka answers.
    plain = admin.describe_cluster(request_timeout=30).result(timeout=60)
    assert plain.cluster_id == kafka_cluster.name and not plain.authorized_operations
    # A broker is not KRaft's controller quorum: asked for controllers it says so (v1).
    with KafkaWire(first_address(kafka_cluster.bootstrap_servers())) as wire:
        answer = wire.ask(DescribeClusterRequest(include_cluster_authorized_operations=False,
                                                 endpoint_type=2), 1)
    assert (answer.error_code, answer.brokers) == (MISMATCHED_ENDPOINT_TYPE, [])


def committed_offsets(admin: KafkaAdminClient, group: str) -> dict[TopicPartition, int]:
    return {tp: meta.offset for tp, meta in admin.list_group_offsets(group)[group].items()
            if meta.offset >= 0}


def test_kafka_python_deletes_a_groups_offsets_but_not_those_it_subscribes_to(
    kafka_cluster: Cluster,
) -> None:
    kept, freed = (new_topic(kafka_cluster, f"offset-delete-{name}-{uuid.uuid4().hex[:6]}")
                   for name in ("kept", "freed"))
    group = f"offset-delete-{uuid.uuid4().hex[:8]}"
    bootstrap = kafka_cluster.bootstrap_servers()
    # Commits from outside any generation (assign()), into both topics.
    committer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=group,
                              enable_auto_commit=False)
    try:
        committer.commit({TopicPartition(topic, p): OffsetAndMetadata(7, "", -1)
                          for topic in (kept, freed) for p in range(PARTITIONS)})
    finally:
        committer.close()
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    member = KafkaConsumer(kept, bootstrap_servers=bootstrap, group_id=group,
                           enable_auto_commit=False, session_timeout_ms=10_000)
    try:
        assert len(committed_offsets(admin, group)) == 2 * PARTITIONS
        # A member subscribes to `kept`: its offsets stay; `freed`'s go.
        wait_until(lambda: member.poll(timeout_ms=200) is not None and member.assignment(), 60,
                   "the member's assignment")
        asked = [TopicPartition(topic, p) for topic in (kept, freed) for p in range(PARTITIONS)]
        answers = admin.delete_group_offsets(group, asked)
        assert answers == {tp: GroupSubscribedToTopicError if tp.topic == kept else NoError
                           for tp in asked}
        assert set(committed_offsets(admin, group)) == {
            TopicPartition(kept, p) for p in range(PARTITIONS)}
        missing = TopicPartition(freed, PARTITIONS + 5)
        assert admin.delete_group_offsets(group, [missing]) == {
            missing: UnknownTopicOrPartitionError}
    finally:
        member.close()
    # Without members every offset asked for may go.
    answers = admin.delete_group_offsets(group, [TopicPartition(kept, 0)])
    assert answers == {TopicPartition(kept, 0): NoError}
    assert TopicPartition(kept, 0) not in committed_offsets(admin, group)
    with pytest.raises(GroupIdNotFoundError):
        admin.delete_group_offsets(f"never-{uuid.uuid4().hex[:8]}", [TopicPartition(kept, 0)])
    admin.close()


def test_kafka_python_deletes_records_at_each_leader_and_every_replica_follows(
    kafka_cluster: Cluster,
) -> None:
    """DeleteRecords across partitions led by different brokers (issue 56: kafka-python's own
    test read 200 of the 380 records left in one poll; its poll returns as soon as one broker's
    fetch has records, so the rest come in the next polls, as they would from Kafka)."""
    topic = new_topic(kafka_cluster, f"delete-records-{uuid.uuid4().hex[:6]}")
    partitions = [TopicPartition(topic, p) for p in range(PARTITIONS)]
    leaders = {p["partition"]: p["leader"]
               for p in kafka_cluster.describe_topic(topic)["partitions"]}
    assert len(set(leaders.values())) > 1, "the partitions' leaders are on several brokers"
    bootstrap = kafka_cluster.bootstrap_servers()
    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all")
    for tp in partitions:
        for i in range(100):
            producer.send(topic, f"{tp.partition}-{i}".encode(), partition=tp.partition)
    producer.flush()
    producer.close()
    wanted = {0: -1, 1: 50}  # -1: up to the high watermark
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        result = admin.delete_records({partitions[p]: offset for p, offset in wanted.items()},
                                      timeout_ms=10_000)
    finally:
        admin.close()
    low = {0: 100, 1: 50, **{p: 0 for p in range(2, PARTITIONS)}}
    assert {tp.partition: (answer["error_code"], answer["low_watermark"])
            for tp, answer in result.items()} == {0: (0, 100), 1: (0, 50)}

    def log_starts() -> dict[tuple[int, int], int]:
        """(partition, broker) -> that replica's log start."""
        found = {}
        for tp in partitions:
            for broker, host in kafka_cluster.replica_hosts(topic, tp.partition).items():
                for replica in ray.get(host.describe.remote(topic), timeout=30):
                    if replica["partition"] == tp.partition:
                        found[(tp.partition, broker)] = replica["log_start_offset"]
        return found

    expected = {(p, broker): low[p] for p in range(PARTITIONS) for broker in (0, 1, 2)}
    wait_until(lambda: log_starts() == expected, 30, "every replica's log start")

    consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=None,
                             auto_offset_reset="earliest", enable_auto_commit=False)
    try:
        consumer.assign(partitions)
        assert consumer.beginning_offsets(partitions) == {
            tp: low[tp.partition] for tp in partitions}
        read: dict[int, list[int]] = {p: [] for p in range(PARTITIONS)}

        def read_all() -> bool:
            for tp, records in consumer.poll(max_records=600, timeout_ms=500).items():
                read[tp.partition] += [record.offset for record in records]
            return sum(map(len, read.values())) >= 100 * PARTITIONS - 150
        wait_until(read_all, 30, "every record left")
        assert not any(consumer.poll(max_records=1, timeout_ms=1000).values())
    finally:
        consumer.close()
    assert read == {p: list(range(low[p], 100)) for p in range(PARTITIONS)}
