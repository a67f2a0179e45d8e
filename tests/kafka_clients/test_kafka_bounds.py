"""What a Kafka client may make a broker hold, and what it gets past a bound: batches bounded by
the topic's max.message.bytes before they are converted (a million empty records in 763 KB of
zstd is refused from its header), connections per address and in all, request bytes queued,
members per group and groups per coordinator. Each refusal is Kafka's error for it, and the
connection or client that broke no bound goes on.

One broker of its own, with small limits; requests go byte for byte (tests/support/kafka_wire.py)
so that a client library's own checks do not stand in for the broker's.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest
import ray
from kafka.protocol.consumer import JoinGroupRequest, LeaveGroupRequest
from kafka.protocol.metadata import ApiVersionsRequest, FindCoordinatorRequest
from kafka.protocol.producer import ProduceRequest

from rafka import Cluster
from rafka.actors.errors import ErrorCode
from tests.support.cluster import cluster_of_its_own
from tests.support.kafka_batches import ZSTD, encoded_records, kafka_batch
from tests.support.kafka_wire import KafkaWire, first_address
from tests.support.waiting import wait_until

MAX_CONNECTIONS = 5
MAX_CONNECTIONS_PER_IP = 3
REQUEST_MAX_BYTES = 1_200_000
# Room for two requests of a little under 600 KB, not three.
QUEUED_MAX_REQUEST_BYTES = REQUEST_MAX_BYTES
GROUPS = 2
GROUP_MAX_SIZE = 2


@pytest.fixture(scope="module")
def bounded(zookeeper, ray_session, tmp_path_factory) -> Iterator[Cluster]:
    yield from cluster_of_its_own(
        zookeeper, tmp_path_factory, "kafka-bounds", brokers=1,
        kafka_listeners="PLAINTEXT://127.0.0.1:0",
        broker_config={"max.connections": MAX_CONNECTIONS,
                       "max.connections.per.ip": MAX_CONNECTIONS_PER_IP,
                       "socket.request.max.bytes": REQUEST_MAX_BYTES,
                       "queued.max.request.bytes": QUEUED_MAX_REQUEST_BYTES,
                       "group.coordinator.max.groups": GROUPS,
                       "group.max.size": GROUP_MAX_SIZE,
                       "group.initial.rebalance.delay.ms": 0,
                       "auto.create.topics.enable": False})


def _address(cluster: Cluster) -> tuple[str, int]:
    return first_address(cluster.bootstrap_servers())


def _stats(cluster: Cluster) -> dict:
    broker = ray.get_actor("broker-0", namespace=cluster.namespace)
    return ray.get(broker.kafka_listener_stats.remote(), timeout=30)


def _produce(topic: str, batch: bytes) -> ProduceRequest:
    return ProduceRequest(transactional_id=None, acks=-1, timeout_ms=30_000, topic_data=[
        ProduceRequest.TopicProduceData(name=topic, partition_data=[
            ProduceRequest.TopicProduceData.PartitionProduceData(index=0, records=batch)])])


def _answer(wire: KafkaWire, topic: str, batch: bytes):
    return wire.ask(_produce(topic, batch), 9).responses[0].partition_responses[0]


def _connect(cluster: Cluster, source_ip: str) -> KafkaWire:
    return KafkaWire(_address(cluster), source_ip=source_ip)


def _is_served(wire: KafkaWire) -> bool:
    """Whether the broker answers an ApiVersions on `wire` (False: it closed it)."""
    try:
        return wire.ask(ApiVersionsRequest(), 0).error_code == 0
    except ConnectionError:
        return False


# ------------------------------------------------------------------------------- batches


def test_a_million_empty_records_are_refused_from_the_batch_header(bounded: Cluster) -> None:
    bounded.create_topic("million", partitions=1, replication_factor=1)
    bomb = kafka_batch(encoded_records(1_000_000), 1_000_000, codec=ZSTD)
    assert len(bomb) < REQUEST_MAX_BYTES  # small on the wire: Kafka's own size check passes
    with KafkaWire(_address(bounded)) as wire:
        refused = _answer(wire, "million", bomb)
        assert refused.error_code == ErrorCode.MESSAGE_TOO_LARGE
        assert "1000000 records" in refused.error_message
        assert "max.message.bytes=1048588" in refused.error_message
        # The connection goes on, and nothing of the refused batch was stored.
        stored = _answer(wire, "million", kafka_batch(encoded_records(3, b"v"), 3))
    assert (stored.error_code, stored.base_offset) == (0, 0)


def test_records_that_decompress_past_max_message_bytes_are_refused(bounded: Cluster) -> None:
    bounded.create_topic("inflated", partitions=1, replication_factor=1,
                         config={"max.message.bytes": 100_000})
    # 20 records of 10 KB of zeros: 200 KB once decompressed, a few hundred bytes of zstd.
    inflated = kafka_batch(encoded_records(20, bytes(10_000)), 20, codec=ZSTD)
    assert len(inflated) < 1_000
    with KafkaWire(_address(bounded)) as wire:
        refused = _answer(wire, "inflated", inflated)
        assert refused.error_code == ErrorCode.MESSAGE_TOO_LARGE
        assert "100000" in refused.error_message
        fits = _answer(wire, "inflated", kafka_batch(encoded_records(5, bytes(10_000)), 5,
                                                     codec=ZSTD))
    assert (fits.error_code, fits.base_offset) == (0, 0)


def test_a_produce_without_a_batch_is_answered_corrupt_message(bounded: Cluster) -> None:
    bounded.create_topic("no-batch", partitions=1, replication_factor=1)
    with KafkaWire(_address(bounded)) as wire:
        empty = _answer(wire, "no-batch", b"")
        assert empty.error_code == ErrorCode.CORRUPT_MESSAGE
        assert "at least one batch" in empty.error_message


# --------------------------------------------------------------------------- connections


def test_connections_past_a_limit_are_closed_and_the_others_go_on(bounded: Cluster) -> None:
    opened: list[KafkaWire] = []
    try:
        for _ in range(MAX_CONNECTIONS_PER_IP):
            opened.append(_connect(bounded, "127.0.0.2"))
        assert all(_is_served(connection) for connection in opened)
        one_too_many = _connect(bounded, "127.0.0.2")
        assert not _is_served(one_too_many)  # max.connections.per.ip
        one_too_many.close()
        # Another address still gets in, up to max.connections in all.
        other = [_connect(bounded, "127.0.0.3") for _ in range(MAX_CONNECTIONS - len(opened))]
        opened += other
        assert all(_is_served(connection) for connection in other)
        past_total = _connect(bounded, "127.0.0.4")
        assert not _is_served(past_total)  # max.connections
        past_total.close()
        assert all(_is_served(connection) for connection in opened)  # none of them noticed
        assert _stats(bounded)["connections"] == MAX_CONNECTIONS
        # A connection closed makes room for one more.
        opened.pop(0).close()
        again = _connect(bounded, "127.0.0.2")
        opened.append(again)
        assert _is_served(again)
    finally:
        for connection in opened:
            connection.close()


def test_request_bytes_held_at_once_stay_within_queued_max_request_bytes(
    bounded: Cluster,
) -> None:
    bounded.create_topic("queued", partitions=1, replication_factor=1)
    # Four requests of about 550 KB at once: the broker holds two at a time.
    batch = kafka_batch(encoded_records(5_000, bytes(100)), 5_000)
    assert 2 * len(batch) < QUEUED_MAX_REQUEST_BYTES < 3 * len(batch)
    answers: list = []

    def send(source_ip: str) -> None:
        with KafkaWire(_address(bounded), source_ip=source_ip) as wire:
            answers.append(_answer(wire, "queued", batch))

    # From four addresses: the per-address connection limit is not what this test is about.
    senders = [threading.Thread(target=send, args=(f"127.0.1.{i}",)) for i in range(1, 5)]
    for sender in senders:
        sender.start()
    for sender in senders:
        sender.join(60)
    assert sorted((a.error_code, a.base_offset) for a in answers) == [
        (0, 0), (0, 5_000), (0, 10_000), (0, 15_000)]
    stats = _stats(bounded)
    assert len(batch) < stats["queued_request_bytes_peak"] <= QUEUED_MAX_REQUEST_BYTES
    assert stats["queued_request_bytes"] == 0


# -------------------------------------------------------------------------------- groups


def _join(wire: KafkaWire, group: str, version: int = 1):
    """A new member's JoinGroup: v1 is let in at once, v4 first given an id (KIP-394)."""
    return wire.ask(JoinGroupRequest(
        group_id=group, session_timeout_ms=10_000, rebalance_timeout_ms=10_000, member_id="",
        protocol_type="consumer",
        protocols=[JoinGroupRequest.JoinGroupRequestProtocol(name="range", metadata=b"")]),
        version)


def test_members_per_group_and_groups_per_coordinator_are_bounded(bounded: Cluster) -> None:
    with KafkaWire(_address(bounded)) as wire:
        # The first FindCoordinator creates __consumer_offsets; the only broker then leads it.
        wait_until(lambda: wire.ask(FindCoordinatorRequest(key="bounded-a", key_type=0),
                                    1).error_code == 0, 60, "a coordinator")
        joined = {group: _join(wire, group) for group in ("bounded-a", "bounded-b")}
        assert [answer.error_code for answer in joined.values()] == [0, 0]
        # A third group on this coordinator is refused; the two it has go on.
        assert _join(wire, "bounded-c").error_code == ErrorCode.POLICY_VIOLATION
        # A member given its id to join with holds the second place of a group: a third is
        # refused.
        assert _join(wire, "bounded-a", 4).error_code == ErrorCode.MEMBER_ID_REQUIRED
        assert _join(wire, "bounded-a", 4).error_code == ErrorCode.GROUP_MAX_SIZE_REACHED
        for group, answer in joined.items():
            left = wire.ask(LeaveGroupRequest(group_id=group, member_id=answer.member_id), 0)
            assert left.error_code == 0
        # A group whose members left is forgotten, and leaves room for a new one.
        assert _join(wire, "bounded-c").error_code == 0
