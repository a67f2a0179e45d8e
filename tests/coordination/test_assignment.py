"""Replica assignment: round-robin leaders, even replicas, rack awareness, typed errors."""

from __future__ import annotations

import random
from collections import Counter

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rafka.coordination.assignment import (
    MAX_PARTITIONS_PER_TOPIC,
    assign_replicas,
    validate_assignment,
)
from rafka.coordination.errors import (
    InvalidPartitionsError,
    InvalidReplicaAssignmentError,
    InvalidReplicationFactorError,
)
from rafka.coordination.models import TopicAssignment

broker_lists = st.lists(st.integers(0, 500), min_size=1, max_size=12, unique=True)


def _within_one(counts: Counter[int], brokers: list[int], total: int) -> None:
    low, high = total // len(brokers), -(-total // len(brokers))
    for broker in brokers:
        assert low <= counts[broker] <= high, (broker, counts, low, high)


def _check_shape(assignment: dict[int, list[int]], first: int, count: int, rf: int) -> None:
    assert sorted(assignment) == list(range(first, first + count))
    for replicas in assignment.values():
        assert len(replicas) == rf
        assert len(set(replicas)) == rf, "a broker twice in one partition"


@given(broker_lists, st.data())
def test_leaders_and_replicas_are_spread_evenly(brokers: list[int], data: st.DataObject) -> None:
    partitions = data.draw(st.integers(1, 60), label="partitions")
    rf = data.draw(st.integers(1, len(brokers)), label="replication factor")
    start = data.draw(st.none() | st.integers(0, 100), label="start index")
    assignment = assign_replicas(brokers, partitions, rf, start_index=start)
    _check_shape(assignment, 0, partitions, rf)
    assert {b for r in assignment.values() for b in r} <= set(brokers)
    _within_one(Counter(r[0] for r in assignment.values()), brokers, partitions)
    _within_one(Counter(b for r in assignment.values() for b in r), brokers, partitions * rf)


@given(broker_lists, st.data())
def test_adding_partitions_keeps_the_whole_topic_balanced(
    brokers: list[int], data: st.DataObject
) -> None:
    rf = data.draw(st.integers(1, len(brokers)), label="replication factor")
    before = data.draw(st.integers(1, 30), label="partitions before")
    added = data.draw(st.integers(1, 30), label="partitions added")
    start = data.draw(st.integers(0, 20), label="start index")
    existing = assign_replicas(brokers, before, rf, start_index=start)
    new = assign_replicas(brokers, added, rf, first_partition=before, existing=existing)
    _check_shape(new, before, added, rf)
    whole = {**existing, **new}
    _within_one(Counter(r[0] for r in whole.values()), brokers, before + added)
    _within_one(Counter(b for r in whole.values() for b in r), brokers, (before + added) * rf)


def test_a_broker_leading_the_last_partitions_takes_no_more_than_its_share_of_followers() -> None:
    # Found by the property above: broker 2 leads two of the eight added partitions, so it
    # could follow few of the rest; it was picked as a follower anyway and held 4 of 18.
    existing = assign_replicas(list(range(8)), 1, 2, start_index=0)
    new = assign_replicas(list(range(8)), 8, 2, first_partition=1, existing=existing)
    whole = {**existing, **new}
    _within_one(Counter(b for r in whole.values() for b in r), list(range(8)), 18)


@given(st.data())
def test_rack_aware_partitions_span_as_many_racks_as_they_can(data: st.DataObject) -> None:
    brokers = data.draw(broker_lists, label="brokers")
    rack_names = data.draw(st.lists(st.sampled_from("abcdef"), min_size=1, max_size=6))
    racks = {b: data.draw(st.sampled_from(rack_names), label=f"rack of {b}") for b in brokers}
    partitions = data.draw(st.integers(1, 40), label="partitions")
    rf = data.draw(st.integers(1, len(brokers)), label="replication factor")
    assignment = assign_replicas(racks, partitions, rf, start_index=data.draw(st.integers(0, 9)))
    _check_shape(assignment, 0, partitions, rf)
    rack_count = len(set(racks.values()))
    for replicas in assignment.values():
        assert len({racks[b] for b in replicas}) == min(rf, rack_count)
    _within_one(Counter(r[0] for r in assignment.values()), brokers, partitions)


def test_rack_aware_leaders_alternate_racks() -> None:
    racks = {0: "a", 1: "a", 2: "b", 3: "b", 4: "c", 5: "c"}
    assignment = assign_replicas(racks, 6, 3, start_index=0)
    leader_racks = [racks[assignment[p][0]] for p in range(6)]
    assert leader_racks == ["a", "b", "c", "a", "b", "c"]
    assert all(len({racks[b] for b in replicas}) == 3 for replicas in assignment.values())
    # Balanced racks and a replication factor of the rack count: every broker holds 3.
    assert set(Counter(b for r in assignment.values() for b in r).values()) == {3}


def test_racks_are_ignored_unless_every_broker_has_one() -> None:
    mixed = {0: "a", 1: None, 2: "b"}
    assert assign_replicas(mixed, 5, 2, start_index=1) == assign_replicas([0, 1, 2], 5, 2,
                                                                          start_index=1)


def test_leaders_go_round_robin_from_the_start_index() -> None:
    assignment = assign_replicas([10, 11, 12, 13, 14], 10, 3, start_index=2)
    assert [assignment[p][0] for p in range(10)] == [12, 13, 14, 10, 11] * 2


def test_random_start_is_reproducible_with_a_seeded_rng() -> None:
    first = assign_replicas(range(6), 12, 2, rng=random.Random(7))  # type: ignore[arg-type]
    again = assign_replicas(range(6), 12, 2, rng=random.Random(7))  # type: ignore[arg-type]
    assert first == again


@pytest.mark.parametrize(
    ("brokers", "partitions", "rf", "error", "words"),
    [
        ([1, 2], 3, 3, InvalidReplicationFactorError, "larger than the 2 available"),
        ([1, 2], 3, 0, InvalidReplicationFactorError, "at least 1"),
        ([1, 2], 0, 1, InvalidPartitionsError, "at least 1"),
        ([], 1, 1, InvalidReplicationFactorError, "no brokers"),
    ],
)
def test_impossible_requests_raise_typed_errors(
    brokers: list[int], partitions: int, rf: int, error: type[Exception], words: str
) -> None:
    with pytest.raises(error, match=words):
        assign_replicas(brokers, partitions, rf)


def test_new_partitions_must_not_overlap_existing_ones() -> None:
    existing = assign_replicas([1, 2, 3], 3, 2, start_index=0)
    with pytest.raises(InvalidPartitionsError, match="first_partition=3"):
        assign_replicas([1, 2, 3], 2, 2, existing=existing)


def test_a_topic_has_at_most_max_partitions_and_refusing_more_is_quick() -> None:
    assert len(assign_replicas([1, 2, 3], MAX_PARTITIONS_PER_TOPIC, 3)) == MAX_PARTITIONS_PER_TOPIC
    with pytest.raises(InvalidPartitionsError, match="ZooKeeper znode"):
        assign_replicas([1, 2, 3], 10**9, 3)  # refused before anything is assigned
    existing = assign_replicas([1, 2, 3], MAX_PARTITIONS_PER_TOPIC - 1, 2)
    with pytest.raises(InvalidPartitionsError, match=f"{MAX_PARTITIONS_PER_TOPIC + 1} partitions"):
        assign_replicas([1, 2, 3], 2, 2, existing=existing, first_partition=len(existing))


def test_validate_assignment_normalises_and_checks() -> None:
    assert validate_assignment({1: [2, 3], 0: [1, 2]}) == TopicAssignment({0: (1, 2), 1: (2, 3)})
    with pytest.raises(InvalidReplicaAssignmentError, match="without gaps"):
        validate_assignment({0: [1], 2: [2]})
    with pytest.raises(InvalidReplicaAssignmentError, match="broker twice"):
        validate_assignment({0: [1, 1]})
    with pytest.raises(InvalidReplicaAssignmentError, match="same number of replicas"):
        validate_assignment({0: [1, 2], 1: [1]})
    with pytest.raises(InvalidReplicaAssignmentError, match="no replicas"):
        validate_assignment({0: []})
    with pytest.raises(InvalidPartitionsError, match="at least 1"):
        validate_assignment({})
