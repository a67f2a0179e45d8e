"""Consumer-group partition assignors: who in a group reads which partition. Pure functions.

Each assignor maps the group's members (id -> subscribed topics) and the partition count of each
topic to ``{member: [TopicPartition, ...]}``, every member present, lists sorted. Every partition
of a subscribed topic goes to exactly one member that subscribes to its topic; topics without
metadata (absent from ``partitions_per_topic``) are skipped, as Kafka skips them.

- range (Kafka's default, and docs/consumer-groups.md's walk-through): per topic, members sorted
  by id each take a contiguous run of partitions; the first ``n % m`` take one more.
- roundrobin: all partitions, sorted, dealt in turn to the sorted members subscribing to each.
- sticky: as balanced as round-robin, keeping as many current owners as it can.

An incremental (cooperative) rebalance pauses only what moves: ``revocations`` and ``additions``
compare two assignments, and ``interim_assignment`` says what each member may read while the
moving partitions are released by their old owners (the owner znode is the lock:
docs/consumer-groups.md).
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from rafka.common.topic_partition import TopicPartition

__all__ = [
    "GroupAssignment",
    "PartitionAssignor",
    "RangeAssignor",
    "RoundRobinAssignor",
    "StickyAssignor",
    "Subscription",
    "additions",
    "interim_assignment",
    "range_assign",
    "resolve_assignor",
    "revocations",
    "round_robin_assign",
    "sticky_assign",
    "validate_group_assignment",
]


@dataclass(frozen=True)
class Subscription:
    """What a member asked to read: a set of topic names."""

    topics: frozenset[str]

    def __init__(self, topics: Iterable[str]) -> None:
        if isinstance(topics, str):
            # frozenset("orders") would subscribe to the topics "o", "r", "d", ...
            raise TypeError(f"Subscription takes a collection of topics, not the string {topics!r}")
        object.__setattr__(self, "topics", frozenset(topics))


# Kafka's GroupAssignment: each member's partitions. (A topic's replica assignment, partition to
# brokers, is coordination's ReplicaAssignment.)
GroupAssignment = dict[str, list[TopicPartition]]
Members = Mapping[str, Subscription]
CurrentAssignment = Mapping[str, Sequence[tuple[str, int]]]


@runtime_checkable
class PartitionAssignor(Protocol):
    """A user-supplied assignor: give it to the consumer as ``partition_assignment_strategy``.

    ``assign`` must follow the rules of the module docstring; the group checks its answer with
    ``validate_group_assignment`` before any member acts on it.
    """

    name: str

    def assign(
        self,
        members: Members,
        partitions_per_topic: Mapping[str, int],
        current_assignment: CurrentAssignment,
    ) -> GroupAssignment: ...


# -- the three strategies ----------------------------------------------------------------------


def range_assign(members: Members, partitions_per_topic: Mapping[str, int]) -> GroupAssignment:
    """Kafka's RangeAssignor: contiguous runs per topic, the first ``n % m`` members one more."""
    result: GroupAssignment = {member: [] for member in sorted(members)}
    for topic in _subscribed_topics(members, partitions_per_topic):
        readers = sorted(m for m, sub in members.items() if topic in sub.topics)
        per_member, extra = divmod(partitions_per_topic[topic], len(readers))
        start = 0
        for index, member in enumerate(readers):
            count = per_member + (1 if index < extra else 0)
            result[member].extend(TopicPartition(topic, p) for p in range(start, start + count))
            start += count
    return _sorted_lists(result)


def round_robin_assign(
    members: Members, partitions_per_topic: Mapping[str, int]
) -> GroupAssignment:
    """Kafka's RoundRobinAssignor: sorted partitions dealt over sorted members in turn, each
    partition to the next member (circularly) that subscribes to its topic."""
    ordered = sorted(members)
    result: GroupAssignment = {member: [] for member in ordered}
    cursor = 0
    for tp in _all_partitions(members, partitions_per_topic):
        # Ends: the topic is subscribed by someone, or _all_partitions would not list it.
        while tp.topic not in members[ordered[cursor % len(ordered)]].topics:
            cursor += 1
        result[ordered[cursor % len(ordered)]].append(tp)
        cursor += 1
    return result


def sticky_assign(
    members: Members,
    partitions_per_topic: Mapping[str, int],
    current_assignment: CurrentAssignment | None = None,
) -> GroupAssignment:
    """Balanced like round-robin, but moving as few partitions as possible from their owners.

    1. Keep every current ownership that is still valid (member present and subscribed, partition
       exists, not claimed twice).
    2. Give each partition left over to the least-loaded member that subscribes to its topic.
    3. While a member has two or more partitions more than another member that could take one
       of them, move one from the most loaded to the least loaded.

    With equal subscriptions the result is as even as possible (sizes differ by at most 1) and
    no other balanced assignment keeps more owners. Deterministic: ties go to the smaller member
    id and the later partition moves first.
    """
    ordered = sorted(members)
    result: GroupAssignment = {member: [] for member in ordered}
    exists = set(_all_partitions(members, partitions_per_topic))
    owned: set[TopicPartition] = set()
    current = current_assignment or {}
    for member in sorted(current):
        if member not in members:
            continue
        topics = members[member].topics
        for raw in current[member]:
            tp = TopicPartition(*raw)
            if tp in exists and tp.topic in topics and tp not in owned:
                result[member].append(tp)
                owned.add(tp)

    def load(member: str) -> tuple[int, str]:
        return len(result[member]), member

    for tp in sorted(exists - owned):
        takers = [m for m in ordered if tp.topic in members[m].topics]
        result[min(takers, key=load)].append(tp)

    while _move_one_for_balance(members, result, ordered):
        pass
    return _sorted_lists(result)


def _move_one_for_balance(members: Members, result: GroupAssignment, ordered: list[str]) -> bool:
    """Move one partition from a most-loaded to a least-loaded member that can take it.

    Each move lowers the sum of squared loads, so repeating it ends.
    """
    by_load = sorted(ordered, key=lambda m: (len(result[m]), m))
    for donor in reversed(by_load):
        for receiver in by_load:
            if len(result[donor]) - len(result[receiver]) <= 1:
                break
            topics = members[receiver].topics
            movable = [tp for tp in result[donor] if tp.topic in topics]
            if movable:
                # The highest partition moves: a choice that depends on values, not list order.
                chosen = max(movable)
                result[donor].remove(chosen)
                result[receiver].append(chosen)
                return True
    return False


class _StrategyAssignor:
    """An assignor object over one of the strategy functions above: subclasses name the
    strategy and say how it is called (range and round-robin ignore the current assignment)."""

    name: str

    def assign(
        self,
        members: Members,
        partitions_per_topic: Mapping[str, int],
        current_assignment: CurrentAssignment | None = None,
    ) -> GroupAssignment:
        return self._strategy(members, partitions_per_topic, current_assignment)

    def _strategy(
        self,
        members: Members,
        partitions_per_topic: Mapping[str, int],
        current_assignment: CurrentAssignment | None,
    ) -> GroupAssignment:
        raise NotImplementedError


class RangeAssignor(_StrategyAssignor):
    name = "range"

    def _strategy(self, members: Members, partitions_per_topic: Mapping[str, int],
                  current_assignment: CurrentAssignment | None) -> GroupAssignment:
        return range_assign(members, partitions_per_topic)


class RoundRobinAssignor(_StrategyAssignor):
    name = "roundrobin"

    def _strategy(self, members: Members, partitions_per_topic: Mapping[str, int],
                  current_assignment: CurrentAssignment | None) -> GroupAssignment:
        return round_robin_assign(members, partitions_per_topic)


class StickyAssignor(_StrategyAssignor):
    name = "sticky"

    def _strategy(self, members: Members, partitions_per_topic: Mapping[str, int],
                  current_assignment: CurrentAssignment | None) -> GroupAssignment:
        return sticky_assign(members, partitions_per_topic, current_assignment)


class _FunctionAssignor(_StrategyAssignor):
    """A plain function ``f(members, partitions_per_topic, current_assignment)`` as an assignor."""

    def __init__(self, function: Callable[..., GroupAssignment]) -> None:
        self.function = function
        self.name = getattr(function, "__name__", "custom")

    def _strategy(self, members: Members, partitions_per_topic: Mapping[str, int],
                  current_assignment: CurrentAssignment | None) -> GroupAssignment:
        return self.function(members, partitions_per_topic, current_assignment or {})


_BUILT_IN: dict[str, Callable[[], Any]] = {
    "range": RangeAssignor,
    "roundrobin": RoundRobinAssignor,
    "sticky": StickyAssignor,
}
# Kafka's class names, so a Java consumer's configuration works unchanged.
_ALIASES = {
    "org.apache.kafka.clients.consumer.rangeassignor": "range",
    "org.apache.kafka.clients.consumer.roundrobinassignor": "roundrobin",
    "org.apache.kafka.clients.consumer.stickyassignor": "sticky",
    "round_robin": "roundrobin",
    "round-robin": "roundrobin",
}


def resolve_assignor(
    name_or_object: str | PartitionAssignor | Callable[..., GroupAssignment],
) -> Any:
    """The assignor for a strategy name ("range", "roundrobin", "sticky", or Kafka's class
    name), a user assignor object (returned as it is), or a plain assign function (wrapped)."""
    if isinstance(name_or_object, str):
        key = name_or_object.strip().lower()
        key = _ALIASES.get(key, key)
        if key in _BUILT_IN:
            return _BUILT_IN[key]()
        close = difflib.get_close_matches(key, list(_BUILT_IN), n=1)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        raise ValueError(
            f"unknown partition assignment strategy {name_or_object!r}: use one of "
            f"{', '.join(_BUILT_IN)}, or an object with name and assign(){hint}"
        )
    if callable(getattr(name_or_object, "assign", None)):
        return name_or_object
    if callable(name_or_object):
        return _FunctionAssignor(name_or_object)
    raise TypeError(
        f"a partition assignment strategy is a name or an assignor, not {name_or_object!r}"
    )


# -- checking and comparing assignments --------------------------------------------------------


def validate_group_assignment(
    members: Members, partitions_per_topic: Mapping[str, int], assignment: Mapping[str, Any]
) -> None:
    """Raise ValueError unless ``assignment`` gives every partition of every subscribed topic to
    exactly one member subscribed to its topic, and names only members of the group."""
    strangers = sorted(set(assignment) - set(members))
    if strangers:
        raise ValueError(f"assignment names members that are not in the group: {strangers}")
    owners: dict[TopicPartition, str] = {}
    for member, partitions in assignment.items():
        for raw in partitions:
            tp = TopicPartition(*raw)
            if tp.topic not in members[member].topics:
                raise ValueError(f"{member} got {tp} but does not subscribe to {tp.topic!r}")
            if tp.topic not in partitions_per_topic or not (
                0 <= tp.partition < partitions_per_topic[tp.topic]
            ):
                raise ValueError(f"{member} got {tp}, which does not exist")
            if tp in owners:
                raise ValueError(f"{tp} is given to both {owners[tp]} and {member}")
            owners[tp] = member
    missing = [tp for tp in _all_partitions(members, partitions_per_topic) if tp not in owners]
    if missing:
        raise ValueError(f"no member got {missing[:10]}{' ...' if len(missing) > 10 else ''}")


def revocations(
    old: Mapping[str, Iterable[tuple[str, int]]], new: Mapping[str, Iterable[tuple[str, int]]]
) -> dict[str, set[TopicPartition]]:
    """What each member must give up: partitions it owns in ``old`` but not in ``new``.

    Only members with something to give up appear. A partition that keeps its owner is not
    revoked, so its reading never pauses.
    """
    revoked: dict[str, set[TopicPartition]] = {}
    for member, partitions in old.items():
        keep = {TopicPartition(*tp) for tp in new.get(member, ())}
        lost = {TopicPartition(*tp) for tp in partitions} - keep
        if lost:
            revoked[member] = lost
    return revoked


def additions(
    old: Mapping[str, Iterable[tuple[str, int]]], new: Mapping[str, Iterable[tuple[str, int]]]
) -> dict[str, set[TopicPartition]]:
    """What each member takes on: partitions it owns in ``new`` but not in ``old``.

    Only members with something new appear.
    """
    return revocations(new, old)


def interim_assignment(
    old: Mapping[str, Iterable[tuple[str, int]]], new: Mapping[str, Iterable[tuple[str, int]]]
) -> dict[str, set[TopicPartition]]:
    """What each member of ``new`` may read while a rebalance from ``old`` is under way.

    A member keeps what it owned and still owns, and takes at once a new partition nobody owned;
    a partition moving from another member waits until that member has released it, so no
    partition ever has two readers.
    """
    previous_owner = {TopicPartition(*tp): m for m, tps in old.items() for tp in tps}
    return {
        member: {
            tp
            for tp in (TopicPartition(*raw) for raw in partitions)
            if previous_owner.get(tp, member) == member
        }
        for member, partitions in new.items()
    }


# -- helpers -----------------------------------------------------------------------------------


def _subscribed_topics(members: Members, partitions_per_topic: Mapping[str, int]) -> list[str]:
    wanted = set().union(*(sub.topics for sub in members.values())) if members else set()
    return sorted(t for t in wanted if partitions_per_topic.get(t, 0) > 0)


def _all_partitions(
    members: Members, partitions_per_topic: Mapping[str, int]
) -> list[TopicPartition]:
    return [
        TopicPartition(topic, p)
        for topic in _subscribed_topics(members, partitions_per_topic)
        for p in range(partitions_per_topic[topic])
    ]


def _sorted_lists(result: GroupAssignment) -> GroupAssignment:
    for partitions in result.values():
        partitions.sort()
    return result
