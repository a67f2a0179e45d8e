"""Consumer-group assignors: the walk-through of docs/consumer-groups.md, Kafka's documented
examples, invariants."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rafka.actors.clients.assignors import (
    PartitionAssignor,
    RangeAssignor,
    RoundRobinAssignor,
    StickyAssignor,
    Subscription,
    additions,
    interim_assignment,
    range_assign,
    resolve_assignor,
    revocations,
    round_robin_assign,
    sticky_assign,
    validate_group_assignment,
)
from rafka.common.topic_partition import TopicPartition


def tp(topic: str, partition: int) -> TopicPartition:
    return TopicPartition(topic, partition)


def group(**subscriptions: set[str]) -> dict[str, Subscription]:
    return {member: Subscription(topics) for member, topics in subscriptions.items()}


# -- the rebalance walk-through of docs/consumer-groups.md ----------------------------------


def test_the_seeds_rebalance_walk_through_with_the_range_assignor() -> None:
    """topic1 has partitions 0, 1, 2; group1's consumers join one at a time, then leave."""
    partitions = {"topic1": 3}
    members: list[str] = []

    def assignment() -> dict[str, list[int]]:
        result = range_assign({m: Subscription({"topic1"}) for m in members}, partitions)
        return {m: [p.partition for p in tps] for m, tps in result.items()}

    members.append("consumer1")  # alone, consumer1 reads all three partitions
    assert assignment() == {"consumer1": [0, 1, 2]}

    members.append("consumer2")  # consumer1 reads two partitions, consumer2 the other one
    assert assignment() == {"consumer1": [0, 1], "consumer2": [2]}

    members.append("consumer3")  # consumer1 -> partition0, consumer2 -> 1, consumer3 -> 2
    assert assignment() == {"consumer1": [0], "consumer2": [1], "consumer3": [2]}

    members.append("consumer4")  # three read one partition each; consumer4 reads nothing
    assert assignment() == {"consumer1": [0], "consumer2": [1], "consumer3": [2], "consumer4": []}

    members.remove("consumer1")  # the rest read one partition each
    assert assignment() == {"consumer2": [0], "consumer3": [1], "consumer4": [2]}

    members.remove("consumer2")  # consumer3 reads two partitions, consumer4 one
    assert assignment() == {"consumer3": [0, 1], "consumer4": [2]}

    members.remove("consumer3")  # consumer4 reads all three
    assert assignment() == {"consumer4": [0, 1, 2]}


# -- Kafka's documented examples (the assignors' javadoc) -------------------------------------


def test_range_over_two_topics_gives_the_first_member_the_extra_partitions() -> None:
    members = group(C0={"t0", "t1"}, C1={"t0", "t1"})
    assert range_assign(members, {"t0": 3, "t1": 3}) == {
        "C0": [tp("t0", 0), tp("t0", 1), tp("t1", 0), tp("t1", 1)],
        "C1": [tp("t0", 2), tp("t1", 2)],
    }


def test_round_robin_deals_all_partitions_in_turn() -> None:
    members = group(C0={"t0", "t1"}, C1={"t0", "t1"})
    assert round_robin_assign(members, {"t0": 3, "t1": 3}) == {
        "C0": [tp("t0", 0), tp("t0", 2), tp("t1", 1)],
        "C1": [tp("t0", 1), tp("t1", 0), tp("t1", 2)],
    }


def test_round_robin_skips_members_not_subscribed() -> None:
    members = group(C0={"t0"}, C1={"t0", "t1"}, C2={"t0", "t1", "t2"})
    assert round_robin_assign(members, {"t0": 1, "t1": 2, "t2": 3}) == {
        "C0": [tp("t0", 0)],
        "C1": [tp("t1", 0)],
        "C2": [tp("t1", 1), tp("t2", 0), tp("t2", 1), tp("t2", 2)],
    }


def test_sticky_keeps_the_survivors_partitions_when_a_member_leaves() -> None:
    partitions = {"t0": 2, "t1": 2, "t2": 2, "t3": 2}
    everyone = {"t0", "t1", "t2", "t3"}
    before = sticky_assign(group(C0=everyone, C1=everyone, C2=everyone), partitions)
    assert before == {
        "C0": [tp("t0", 0), tp("t1", 1), tp("t3", 0)],
        "C1": [tp("t0", 1), tp("t2", 0), tp("t3", 1)],
        "C2": [tp("t1", 0), tp("t2", 1)],
    }
    after = sticky_assign(group(C0=everyone, C2=everyone), partitions, before)
    assert after == {
        "C0": [tp("t0", 0), tp("t1", 1), tp("t2", 0), tp("t3", 0)],
        "C2": [tp("t0", 1), tp("t1", 0), tp("t2", 1), tp("t3", 1)],
    }
    assert revocations(before, after) == {"C1": set(before["C1"])}  # nobody else pauses


def test_sticky_moves_only_what_a_new_member_needs() -> None:
    old = sticky_assign(group(a={"t"}, b={"t"}), {"t": 6})
    new = sticky_assign(group(a={"t"}, b={"t"}, c={"t"}), {"t": 6}, old)
    assert [len(new[m]) for m in "abc"] == [2, 2, 2]
    moved = revocations(old, new)
    assert sum(len(v) for v in moved.values()) == 2
    assert additions(old, new) == {"c": set(new["c"])}


# -- edge cases -------------------------------------------------------------------------------


@pytest.mark.parametrize("assign", [range_assign, round_robin_assign, sticky_assign])
def test_topics_without_metadata_are_skipped_and_every_member_is_listed(assign: Any) -> None:
    members = group(a={"t", "missing"}, b={"missing"})
    assert assign(members, {"t": 2, "other": 4}) == {"a": [tp("t", 0), tp("t", 1)], "b": []}
    assert assign({}, {"t": 2}) == {}


def test_subscription_refuses_a_bare_string() -> None:
    with pytest.raises(TypeError, match="not the string 'orders'"):
        Subscription("orders")
    assert Subscription(["a", "b", "a"]).topics == frozenset({"a", "b"})


def test_sticky_ignores_current_ownership_that_is_no_longer_valid() -> None:
    members = group(a={"t"}, b={"t", "u"})
    current = {
        "a": [("u", 0), ("t", 9), ("t", 0)],  # a no longer reads u; t has no partition 9
        "b": [("t", 0), ("u", 0)],  # t0 claimed twice: the first claim (sorted ids) wins
        "gone": [("t", 1)],
    }
    result = sticky_assign(members, {"t": 2, "u": 1}, current)
    validate_group_assignment(members, {"t": 2, "u": 1}, result)
    assert tp("t", 0) in result["a"] and tp("u", 0) in result["b"]


# -- invariants (hypothesis) ------------------------------------------------------------------

TOPICS = ["a", "b", "c", "d"]
partitions_per_topic_st = st.dictionaries(
    st.sampled_from(TOPICS), st.integers(min_value=1, max_value=9), min_size=1
)
member_ids = st.text(alphabet="xyz0123456789", min_size=1, max_size=4)
subscription_st = st.frozensets(st.sampled_from([*TOPICS, "unknown"]), min_size=1).map(Subscription)
members_st = st.dictionaries(member_ids, subscription_st, min_size=1, max_size=8)


@st.composite
def equal_members_st(draw: st.DrawFn) -> dict[str, Subscription]:
    topics = draw(st.frozensets(st.sampled_from(TOPICS), min_size=1))
    ids = draw(st.lists(member_ids, min_size=1, max_size=9, unique=True))
    return {m: Subscription(topics) for m in ids}


@st.composite
def current_assignment_st(
    draw: st.DrawFn, members: Mapping[str, Subscription], partitions: Mapping[str, int]
) -> dict[str, list[TopicPartition]]:
    """A previous assignment: each partition with at most one owner, who may have left."""
    owners = [*members, "departed-1", "departed-2", None]
    current: dict[str, list[TopicPartition]] = {}
    for topic, count in partitions.items():
        for p in range(count):
            owner = draw(st.sampled_from(owners))
            if owner is not None:
                current.setdefault(owner, []).append(tp(topic, p))
    return current


AssignmentCase = tuple[dict[str, Subscription], dict[str, int], dict[str, list[TopicPartition]]]


@st.composite
def assignment_cases(draw: st.DrawFn) -> AssignmentCase:
    """Members, their topics' partition counts, and a previous assignment among them."""
    members = draw(members_st)
    partitions = draw(partitions_per_topic_st)
    return members, partitions, draw(current_assignment_st(members, partitions))


def _sizes(assignment: Mapping[str, list[TopicPartition]]) -> list[int]:
    return [len(v) for v in assignment.values()]


@settings(max_examples=150)
@given(assignment_cases())
def test_every_assignor_gives_each_partition_once_to_a_subscriber(case: AssignmentCase) -> None:
    members, partitions, current = case
    for assignor in (RangeAssignor(), RoundRobinAssignor(), StickyAssignor()):
        result = assignor.assign(members, partitions, current)
        validate_group_assignment(members, partitions, result)  # exactly once, subscribed only
        assert set(result) == set(members)
        assert all(v == sorted(v) for v in result.values())


@given(members_st, partitions_per_topic_st)
def test_range_is_balanced_per_topic(
    members: dict[str, Subscription], partitions: dict[str, int]
) -> None:
    result = range_assign(members, partitions)
    for topic in partitions:
        readers = [m for m, s in members.items() if topic in s.topics]
        counts = [sum(p.topic == topic for p in result[m]) for m in readers]
        if counts:
            assert max(counts) - min(counts) <= 1
            # the extra partitions go to the members first in id order
            ordered = sorted(readers)
            per_member = [sum(p.topic == topic for p in result[m]) for m in ordered]
            assert per_member == sorted(per_member, reverse=True)


@given(equal_members_st(), partitions_per_topic_st, st.data())
def test_round_robin_and_sticky_are_balanced_when_subscriptions_are_equal(
    members: dict[str, Subscription], partitions: dict[str, int], data: st.DataObject
) -> None:
    current = data.draw(current_assignment_st(members, partitions))
    for result in (
        round_robin_assign(members, partitions),
        sticky_assign(members, partitions),
        sticky_assign(members, partitions, current),
    ):
        sizes = _sizes(result)
        assert max(sizes) - min(sizes) <= 1


@settings(max_examples=200)
@given(equal_members_st(), partitions_per_topic_st, st.data())
def test_sticky_moves_the_fewest_partitions_a_balanced_assignment_allows(
    members: dict[str, Subscription], partitions: dict[str, int], data: st.DataObject
) -> None:
    current = data.draw(current_assignment_st(members, partitions))
    subscribed = next(iter(members.values())).topics
    total = sum(n for t, n in partitions.items() if t in subscribed)
    kept_before = sorted(
        (sum(p.topic in subscribed for p in current.get(m, [])) for m in members), reverse=True
    )
    # Balanced means q or q+1 each; the fewest moves give the r larger quotas to those who own most.
    q, r = divmod(total, len(members))
    quotas = [q + 1] * r + [q] * (len(members) - r)
    fewest = sum(max(0, owned - quota) for owned, quota in zip(kept_before, quotas, strict=True))

    result = sticky_assign(members, partitions, current)
    owner = {p: m for m, ps in result.items() for p in ps}
    moved = sum(
        1
        for m, ps in current.items()
        if m in members
        for p in ps
        if p.topic in subscribed and owner[p] != m
    )
    assert moved == fewest


@given(assignment_cases())
def test_sticky_is_balanced_in_kafkas_sense_for_any_subscriptions(case: AssignmentCase) -> None:
    """No partition could move from a member to one with two fewer that also subscribes to it."""
    members, partitions, current = case
    result = sticky_assign(members, partitions, current)
    for owned in result.values():
        for receiver, theirs in result.items():
            if len(owned) - len(theirs) >= 2:
                assert not any(p.topic in members[receiver].topics for p in owned)


@given(assignment_cases())
def test_sticky_is_stable_and_deterministic(case: AssignmentCase) -> None:
    members, partitions, current = case
    first = sticky_assign(members, partitions, current)
    assert sticky_assign(members, partitions, first) == first  # nothing changed: nothing moves
    reversed_members = dict(reversed(list(members.items())))
    reversed_current = {m: list(reversed(ps)) for m, ps in reversed(list(current.items()))}
    assert sticky_assign(reversed_members, partitions, reversed_current) == first


# -- cooperative helpers ----------------------------------------------------------------------


def test_revocations_and_additions_only_name_partitions_that_change_owner() -> None:
    old = {"a": [tp("t", 0), tp("t", 1)], "b": [tp("t", 2)]}
    new = {"a": [tp("t", 0)], "b": [tp("t", 2)], "c": [tp("t", 1)]}
    assert revocations(old, new) == {"a": {tp("t", 1)}}
    assert additions(old, new) == {"c": {tp("t", 1)}}
    assert interim_assignment(old, new) == {"a": {tp("t", 0)}, "b": {tp("t", 2)}, "c": set()}


@given(assignment_cases())
def test_revoking_then_adding_turns_the_old_assignment_into_the_new(case: AssignmentCase) -> None:
    members, partitions, old = case
    new = sticky_assign(members, partitions, old)
    revoked, added = revocations(old, new), additions(old, new)
    for member in set(old) | set(new):
        before = set(old.get(member, []))
        after = set(new.get(member, []))
        assert (before - revoked.get(member, set())) | added.get(member, set()) == after
        assert not revoked.get(member, set()) & after

    # While the rebalance runs, a partition has at most one reader: its old owner until it
    # revokes, or its new owner if the interim assignment lets it start at once.
    interim = interim_assignment(old, new)
    readers = Counter(p for ps in interim.values() for p in ps)
    readers.update(p for m, ps in revoked.items() for p in ps)
    assert all(count == 1 for count in readers.values())
    assert all(interim[m] <= set(new[m]) for m in new)


# -- choosing an assignor ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "cls"),
    [
        ("range", RangeAssignor),
        ("RoundRobin", RoundRobinAssignor),
        ("sticky", StickyAssignor),
        ("org.apache.kafka.clients.consumer.RangeAssignor", RangeAssignor),
    ],
)
def test_resolve_assignor_by_name(name: str, cls: type) -> None:
    assignor = resolve_assignor(name)
    assert isinstance(assignor, cls)
    assert isinstance(assignor, PartitionAssignor)


def test_resolve_assignor_suggests_a_name() -> None:
    with pytest.raises(ValueError, match="did you mean 'roundrobin'"):
        resolve_assignor("roundrobbin")
    with pytest.raises(TypeError):
        resolve_assignor(42)  # type: ignore[arg-type]


def test_a_user_assignor_is_used_as_given_and_its_answer_can_be_checked() -> None:
    class EverythingToTheFirst:
        name = "first"

        def assign(self, members: Any, partitions_per_topic: Any, current: Any) -> dict:
            first = min(members)
            result = {m: [] for m in members}
            result[first] = [tp(t, p) for t, n in partitions_per_topic.items() for p in range(n)]
            return result

    mine = EverythingToTheFirst()
    assert resolve_assignor(mine) is mine
    members = group(a={"t"}, b={"t"})
    result = resolve_assignor(mine).assign(members, {"t": 2}, {})
    validate_group_assignment(members, {"t": 2}, result)
    with pytest.raises(ValueError, match="does not subscribe to 'u'"):
        validate_group_assignment(
            members, {"t": 2, "u": 1}, mine.assign(members, {"t": 2, "u": 1}, {}))


def test_a_plain_function_becomes_an_assignor() -> None:
    calls = []

    def alphabetical(members: Any, partitions_per_topic: Any, current: Any) -> dict:
        calls.append(current)
        return range_assign(members, partitions_per_topic)

    assignor = resolve_assignor(alphabetical)
    assert assignor.name == "alphabetical"
    assert assignor.assign(group(a={"t"}), {"t": 1}) == {"a": [tp("t", 0)]}
    assert calls == [{}]


@pytest.mark.parametrize(
    ("assignment", "message"),
    [
        ({"a": [("t", 0), ("t", 1)], "b": [("t", 0)]}, "given to both a and b"),
        ({"a": [("t", 0)], "b": []}, r"no member got \[TopicPartition\(topic='t', partition=1"),
        ({"a": [("t", 0), ("t", 1), ("t", 2)], "b": []}, "does not exist"),
        ({"a": [("t", 0), ("t", 1)], "stranger": []}, "not in the group"),
    ],
)
def test_validate_assignment_catches_broken_answers(assignment: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        validate_group_assignment(group(a={"t"}, b={"t"}), {"t": 2}, assignment)
