"""The JSON of every znode value: Kafka's field names, round trips, tolerant reads."""

from __future__ import annotations

import uuid

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rafka.common.topic_partition import TopicPartition
from rafka.coordination.models import (
    BrokerInfo,
    ControllerInfo,
    MemberSubscription,
    PartitionState,
    TopicAssignment,
    isr_change_from_json,
    isr_change_json,
)
from rafka.coordination.topic_ids import (
    NO_TOPIC_ID,
    InvalidTopicIdError,
    new_topic_id,
    topic_id_text,
    topic_id_uuid,
)

ids = st.integers(0, 2**31 - 1)


@given(ids, st.integers(0, 2**31), st.lists(ids, max_size=5, unique=True), st.integers(0, 99))
def test_partition_state_round_trips(leader: int, epoch: int, isr: list[int], ce: int) -> None:
    state = PartitionState(leader, epoch, isr, ce)
    assert state.isr == tuple(isr)
    assert PartitionState.from_json(state.to_json()) == state
    assert set(state.to_json()) == {"version", "leader", "leader_epoch", "isr", "controller_epoch"}


@given(st.dictionaries(st.integers(0, 50), st.lists(ids, min_size=1, max_size=4), max_size=8))
def test_topic_assignment_round_trips_with_string_keys(partitions: dict[int, list[int]]) -> None:
    assignment = TopicAssignment(partitions)
    data = assignment.to_json()
    assert data["version"] == 1
    assert all(isinstance(key, str) for key in data["partitions"])
    assert TopicAssignment.from_json(data) == assignment


def test_broker_info_writes_kafka_style_timestamps_and_reads_numbers_too() -> None:
    info = BrokerInfo(1, "broker-1", "h", rack=None, timestamp=5, replica_hosts=2,
                      endpoints=("PLAINTEXT://h:9092", "SSL://h:9093"),
                      listener_security_protocol_map=(("PLAINTEXT", "PLAINTEXT"),
                                                      ("SSL", "SSL")))
    assert info.to_json() == {
        "node_id": 1,
        "actor": "broker-1",
        "host": "h",
        "rack": None,
        "replica_hosts": 2,
        "endpoints": ["PLAINTEXT://h:9092", "SSL://h:9093"],
        "listener_security_protocol_map": {"PLAINTEXT": "PLAINTEXT", "SSL": "SSL"},
        "version": 1,
        "timestamp": "5",
    }
    assert BrokerInfo.from_json({**info.to_json(), "timestamp": 5}) == info
    assert BrokerInfo.from_json(info.to_json(), epoch=9).epoch == 9
    assert BrokerInfo.from_json(info.to_json(), epoch=9) == info, "the epoch is not compared"
    # A registration written before brokers served Kafka's protocol has no endpoints.
    older = {k: v for k, v in info.to_json().items()
             if k not in ("endpoints", "listener_security_protocol_map")}
    assert BrokerInfo.from_json(older).endpoints == ()
    assert BrokerInfo.from_json(older).listener_security_protocol_map == ()


def test_controller_and_member_values() -> None:
    controller = ControllerInfo(3, timestamp=7)
    assert controller.to_json() == {"version": 1, "brokerid": 3, "timestamp": "7"}
    assert ControllerInfo.from_json(controller.to_json()) == controller
    member = MemberSubscription({"orders": 2}, timestamp=8)
    assert member.to_json() == {
        "version": 1,
        "subscription": {"orders": 2},
        "pattern": "static",
        "timestamp": "8",
    }
    assert MemberSubscription.from_json(member.to_json()) == member


def test_isr_change_notifications_are_deduplicated_and_sorted() -> None:
    data = isr_change_json([("b", 1), ("a", 2), ("b", 1)])  # type: ignore[list-item]
    assert data == {
        "version": 1,
        "partitions": [{"topic": "a", "partition": 2}, {"topic": "b", "partition": 1}],
    }
    assert isr_change_from_json(data) == [TopicPartition("a", 2), TopicPartition("b", 1)]


def test_topic_ids_are_kafkas_text_of_a_random_uuid() -> None:
    texts = {new_topic_id() for _ in range(200)}
    assert len(texts) == 200
    for text in texts:
        assert len(text) == 22 and not text.startswith("-")
        assert topic_id_text(topic_id_uuid(text)) == text
        assert topic_id_uuid(text) not in (NO_TOPIC_ID, uuid.UUID(int=1))
    # Kafka's text of a UUID: URL-safe base64 of its 16 bytes, unpadded.
    assert topic_id_text(uuid.UUID(int=1)) == "AAAAAAAAAAAAAAAAAAAAAQ"
    for bad in ("", "AAAA", "not a topic id at all!", "AAAAAAAAAAAAAAAAAAAA*Q"):
        with pytest.raises(InvalidTopicIdError):
            topic_id_uuid(bad)


def test_a_topic_assignment_keeps_its_id_and_reads_one_written_without() -> None:
    named = TopicAssignment({0: (1, 2)}, topic_id="AAAAAAAAAAAAAAAAAAAAAQ")
    assert named.to_json()["topic_id"] == "AAAAAAAAAAAAAAAAAAAAAQ"
    assert TopicAssignment.from_json(named.to_json()) == named
    assert TopicAssignment.from_json({"version": 1, "partitions": {"0": [1, 2]}}).topic_id is None
