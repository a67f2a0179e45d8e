"""Topic administration: create, list, describe, configure, grow, request deletion, delete."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable

import pytest

from rafka.coordination.admin import TopicAdmin
from rafka.coordination.errors import (
    InvalidPartitionsError,
    InvalidReplicaAssignmentError,
    InvalidReplicationFactorError,
    InvalidTopicConfigError,
    InvalidTopicError,
    StaleVersionError,
    TopicExistsError,
    UnknownTopicError,
)
from rafka.coordination.models import BrokerInfo, PartitionState, TopicAssignment
from rafka.coordination.registration import BrokerRegistration
from rafka.coordination.store import ClusterStore


def test_create_topic_writes_assignment_and_config_only(admin: TopicAdmin) -> None:
    created = admin.create_topic(
        "orders",
        {0: [1, 2, 3], 1: [2, 3, 1]},
        {"min.insync.replicas": 2, "unclean.leader.election.enable": False},
    )
    assert created.topic_id is not None  # KIP-516: a topic is born with its id
    assert created == TopicAssignment({0: (1, 2, 3), 1: (2, 3, 1)}, topic_id=created.topic_id)
    store = admin.store
    assert json.loads(store.get("/brokers/topics/orders")[0]) == {
        "version": 1,
        "partitions": {"0": [1, 2, 3], "1": [2, 3, 1]},
        "topic_id": created.topic_id,
    }
    assert json.loads(store.get("/config/topics/orders")[0]) == {
        "version": 1,
        "config": {"min.insync.replicas": "2", "unclean.leader.election.enable": "false"},
    }
    # Partition states are the controller's to write.
    assert not store.exists("/brokers/topics/orders/partitions")
    description = admin.describe_topic("orders")
    assert description.states == {0: None, 1: None}
    assert description.assignment.version == 0
    assert not description.marked_for_deletion


def test_create_refuses_duplicates_collisions_and_bad_input(admin: TopicAdmin) -> None:
    admin.create_topic("orders.eu", {0: [1]})
    with pytest.raises(TopicExistsError, match="exists already"):
        admin.create_topic("orders.eu", {0: [1]})
    with pytest.raises(InvalidTopicError, match="collides"):
        admin.create_topic("orders_eu", {0: [1]})
    with pytest.raises(InvalidTopicError):
        admin.create_topic("../escape", {0: [1]})
    with pytest.raises(InvalidReplicaAssignmentError):
        admin.create_topic("gaps", {0: [1], 2: [1]})
    with pytest.raises(InvalidTopicConfigError):
        admin.create_topic("badconfig", {0: [1]}, {"retention.ms": [1]})
    assert admin.list_topics() == ["orders.eu"]
    assert not admin.store.exists("/config/topics/gaps")


def test_list_and_describe_with_partition_states(admin: TopicAdmin) -> None:
    admin.create_topic("b", {0: [1]})
    admin.create_topic("a", {0: [1, 2], 1: [2, 1]}, {"retention.ms": "1000"})
    assert admin.list_topics() == ["a", "b"]
    state = PartitionState(leader=1, leader_epoch=0, isr=(1, 2), controller_epoch=1)
    admin.partition_states.create_partition_states("a", {0: state})
    description = admin.describe_topic("a")
    assert description.config == {"retention.ms": "1000"}
    assert description.states[1] is None
    first = description.states[0]
    assert first is not None and first.value == state and first.version == 0
    with pytest.raises(UnknownTopicError, match="does not exist"):
        admin.describe_topic("missing")


def test_alter_config_sets_and_removes_overrides(admin: TopicAdmin) -> None:
    admin.create_topic("orders", {0: [1]}, {"retention.ms": 10, "cleanup.policy": "delete"})
    changed = admin.alter_config("orders", {"retention.ms": 20, "cleanup.policy": None})
    assert changed.value == {"retention.ms": "20"}
    assert changed.version == 1
    assert admin.read_config("orders").value == {"retention.ms": "20"}
    with pytest.raises(UnknownTopicError):
        admin.alter_config("missing", {"retention.ms": 1})


def test_add_partitions_is_conditional_and_never_shrinks(admin: TopicAdmin) -> None:
    topic_id = admin.create_topic("orders", {0: [1, 2], 1: [2, 1]}).topic_id
    grown = admin.add_partitions("orders", {2: [1, 2]}, expected_version=0)
    assert grown.value.partition_count == 3 and grown.version == 1
    assert grown.value.topic_id == topic_id  # growing keeps the topic's id
    full = {**grown.value.partitions, 3: (2, 1)}
    assert admin.add_partitions("orders", full).value.partition_count == 4
    with pytest.raises(StaleVersionError):
        admin.add_partitions("orders", {4: [1, 2]}, expected_version=1)
    with pytest.raises(InvalidPartitionsError, match="never shrink"):
        admin.add_partitions("orders", {0: [1, 2], 1: [2, 1]})
    with pytest.raises(InvalidReplicaAssignmentError, match="cannot move existing"):
        admin.add_partitions("orders", {0: [2, 1], 4: [1, 2]})
    with pytest.raises(InvalidReplicaAssignmentError, match="without gaps"):
        admin.add_partitions("orders", {6: [1, 2]})
    with pytest.raises(InvalidReplicaAssignmentError, match="same number"):
        admin.add_partitions("orders", {4: [1]})
    assert admin.read_assignment("orders").value.partition_count == 4
    moved = admin.write_partition_replicas("orders", 0, [2, 1])  # and so does a reassignment
    assert moved.value.topic_id == topic_id and moved.value.partitions[0] == (2, 1)


def test_automatic_assignment_over_the_live_brokers(
    admin: TopicAdmin, make_store: Callable[..., ClusterStore]
) -> None:
    for broker_id, rack in [(1, "a"), (2, "a"), (3, "b"), (4, "b")]:
        info = BrokerInfo(broker_id, f"b{broker_id}", "h", rack)
        BrokerRegistration(make_store(), info).register()
    created = admin.create_topic_auto("orders", 8, 2, {"retention.ms": 1})
    racks = {1: "a", 2: "a", 3: "b", 4: "b"}
    for replicas in created.partitions.values():
        assert {racks[b] for b in replicas} == {"a", "b"}
    assert set(Counter(r[0] for r in created.partitions.values()).values()) == {2}
    grown = admin.add_partitions_auto("orders", 12)
    assert grown.value.partition_count == 12
    assert set(Counter(r[0] for r in grown.value.partitions.values()).values()) == {3}
    with pytest.raises(InvalidPartitionsError, match="never shrink"):
        admin.add_partitions_auto("orders", 5)
    with pytest.raises(InvalidReplicationFactorError, match="larger than the 4 available"):
        admin.create_topic_auto("too-wide", 1, 5)


def test_deletion_is_requested_then_carried_out(admin: TopicAdmin) -> None:
    admin.create_topic("orders", {0: [1], 1: [1]}, {"retention.ms": 1})
    state = PartitionState(leader=1, leader_epoch=0, isr=(1,), controller_epoch=1)
    admin.partition_states.create_partition_states("orders", {0: state, 1: state})
    admin.request_topic_deletion("orders")
    admin.request_topic_deletion("orders")  # idempotent
    assert admin.topics_marked_for_deletion() == ["orders"]
    assert admin.describe_topic("orders").marked_for_deletion
    with pytest.raises(UnknownTopicError):
        admin.request_topic_deletion("missing")
    admin.delete_topic_znodes("orders")
    for path in ["/brokers/topics/orders", "/config/topics/orders", "/admin/delete_topics/orders"]:
        assert not admin.store.exists(path), path
    assert admin.list_topics() == []
    admin.delete_topic_znodes("orders")  # idempotent
    admin.create_topic("orders", {0: [1]})  # the name is free again


def test_a_topic_without_an_id_is_given_one_once(admin: TopicAdmin) -> None:
    """A topic an earlier rafka created has no id; the controller gives it one, and a second
    call (another controller, a race) keeps it."""
    admin.store.create("/brokers/topics/older", TopicAssignment({0: (1, 2)}).to_json())
    assert admin.read_assignment("older").value.topic_id is None
    named = admin.assign_topic_id("older")
    assert named.value.topic_id is not None and named.version == 1
    assert admin.assign_topic_id("older") == named
    assert admin.read_assignment("older").value == TopicAssignment(
        {0: (1, 2)}, topic_id=named.value.topic_id)
