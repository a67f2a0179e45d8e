"""Partition state: the controller's initial write, conditional ISR updates, notifications."""

from __future__ import annotations

import json

import pytest

from rafka.common.topic_partition import TopicPartition
from rafka.coordination.admin import TopicAdmin
from rafka.coordination.errors import InvalidPartitionsError, StaleVersionError, UnknownTopicError
from rafka.coordination.models import PartitionState
from rafka.coordination.partition_state import PartitionStateStore
from rafka.coordination.store import ClusterStore

INITIAL = PartitionState(leader=1, leader_epoch=0, isr=(1, 2, 3), controller_epoch=1)


@pytest.fixture
def states(store: ClusterStore) -> PartitionStateStore:
    TopicAdmin(store).create_topic("orders", {0: [1, 2, 3], 1: [2, 3, 1]})
    return PartitionStateStore(store)


def test_the_controller_creates_states_in_kafka_format(states: PartitionStateStore) -> None:
    assert states.create_partition_states("orders", {0: INITIAL, 1: INITIAL}) == {0: 0, 1: 0}
    data, stat = states.store.get("/brokers/topics/orders/partitions/0/state")
    assert json.loads(data) == {
        "version": 1,
        "leader": 1,
        "leader_epoch": 0,
        "isr": [1, 2, 3],
        "controller_epoch": 1,
    }
    read = states.read_partition_state("orders", 0)
    assert read is not None and read.value == INITIAL and read.version == stat.version == 0


def test_creating_a_state_twice_or_for_unknown_partitions_fails(
    states: PartitionStateStore,
) -> None:
    states.create_partition_states("orders", {0: INITIAL})
    with pytest.raises(StaleVersionError, match="update_partition_state"):
        states.create_partition_states("orders", {0: INITIAL, 1: INITIAL})
    assert states.read_partition_state("orders", 1) is None, "all or nothing"
    with pytest.raises(InvalidPartitionsError, match="no partitions \\[5\\]"):
        states.create_partition_states("orders", {5: INITIAL})
    with pytest.raises(UnknownTopicError):
        states.create_partition_states("missing", {0: INITIAL})


def test_isr_updates_are_conditional_on_the_version_read(states: PartitionStateStore) -> None:
    states.create_partition_states("orders", {0: INITIAL})
    read = states.read_partition_state("orders", 0)
    assert read is not None
    shrunk = PartitionState(leader=1, leader_epoch=0, isr=(1, 2), controller_epoch=1)
    assert states.update_partition_state("orders", 0, shrunk, read.version) == 1
    # A leader still holding version 0 learns that someone moved the partition.
    expanded = PartitionState(leader=1, leader_epoch=0, isr=(1, 2, 3), controller_epoch=1)
    with pytest.raises(StaleVersionError, match="read it again"):
        states.update_partition_state("orders", 0, expanded, read.version)
    now = states.read_partition_state("orders", 0)
    assert now is not None and now.value == shrunk and now.version == 1


def test_a_leader_write_found_applied_after_its_answer_was_lost_counts_as_written(
    states: PartitionStateStore,
) -> None:
    states.create_partition_states("orders", {0: INITIAL})
    shrunk = PartitionState(leader=1, leader_epoch=0, isr=(1, 2), controller_epoch=1)
    # ZooKeeper applied the write at version 0, but the leader never heard: it tries again.
    assert states.update_leader_and_isr("orders", 0, shrunk, 0) == 1
    assert states.update_leader_and_isr("orders", 0, shrunk, 0) == 1
    # A different state at a moved version is someone else's: the leader must step down.
    expanded = PartitionState(leader=1, leader_epoch=0, isr=(1, 2, 3), controller_epoch=1)
    with pytest.raises(StaleVersionError):
        states.update_leader_and_isr("orders", 0, expanded, 0)
    moved = PartitionState(leader=2, leader_epoch=1, isr=(2,), controller_epoch=1)
    assert states.update_partition_state("orders", 0, moved, 1) == 2
    with pytest.raises(StaleVersionError):
        states.update_leader_and_isr("orders", 0, shrunk, 0)


def test_updating_a_missing_state_says_why(states: PartitionStateStore) -> None:
    with pytest.raises(UnknownTopicError, match="has no state"):
        states.update_partition_state("orders", 1, INITIAL, 0)


def test_isr_change_notifications(states: PartitionStateStore) -> None:
    first = states.write_isr_change_notification([("orders", 1), ("orders", 0)])
    second = states.write_isr_change_notification([("orders", 0)])
    assert first.startswith("isr_change_") and first < second
    assert states.isr_change_notifications() == [first, second]
    assert json.loads(states.store.get(f"/isr_change_notification/{first}")[0]) == {
        "version": 1,
        "partitions": [{"topic": "orders", "partition": 0}, {"topic": "orders", "partition": 1}],
    }
    assert states.read_isr_change_notifications([second]) == {second: [TopicPartition("orders", 0)]}
    assert states.consume_isr_change_notifications() == {
        TopicPartition("orders", 0),
        TopicPartition("orders", 1),
    }
    assert states.isr_change_notifications() == []
    with pytest.raises(ValueError):
        states.write_isr_change_notification([("../x", 0)])


def test_a_thousand_states_are_written_in_a_few_chunks_and_read_back_in_one_pass(
    store: ClusterStore,
) -> None:
    TopicAdmin(store).create_topic("wide", {p: [1, 2, 3] for p in range(1200)})
    states = PartitionStateStore(store)
    # A partition znode left without its state (an earlier attempt that died half way).
    store.ensure_path("/brokers/topics/wide/partitions/7")
    wanted = {p: PartitionState(p % 3 + 1, 0, (1, 2, 3), 1) for p in range(1200)}
    assert states.create_partition_states("wide", wanted) == dict.fromkeys(range(1200), 0)
    read = states.read_partition_states("wide", range(1200))
    assert {p: v.value for p, v in read.items() if v is not None} == wanted
    assert states.read_partition_states("wide", [1200 + 1]) == {1201: None}
    with pytest.raises(StaleVersionError):
        states.create_partition_states("wide", {0: INITIAL})
