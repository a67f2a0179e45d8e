"""The group coordinator's own assignors for consumer groups of the new protocol (KIP-848):
`uniform` and `range`, Kafka's names. Pure functions: the members' subscriptions, the topics'
partition counts and the current target go in, the next target comes out.

Both are sticky, as Kafka's server-side assignors are: a partition stays with the member that
has it while that keeps the assignment balanced, so a member joining takes partitions from the
others and no partition moves between members that stay.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

# {topic: partitions}; a member's share of a group's partitions.
Assignment = Mapping[str, frozenset[int]]
TopicPartition = tuple[str, int]

UNIFORM = "uniform"
RANGE = "range"


def assign(assignor: str, subscriptions: Mapping[str, frozenset[str]],
           partition_counts: Mapping[str, int], current: Mapping[str, Assignment],
           ) -> dict[str, dict[str, frozenset[int]]]:
    """The next target assignment: for every member of `subscriptions` (member id -> the
    topics it subscribes to, already resolved), its partitions of the topics that exist
    (`partition_counts`), starting from `current` (member id -> its target so far). ValueError
    for an assignor that is neither uniform nor range."""
    assignors: dict[str, Callable[..., dict[str, set[TopicPartition]]]] = {
        UNIFORM: _uniform, RANGE: _range}
    if assignor not in assignors:
        raise ValueError(f"no server assignor {assignor!r}: {UNIFORM} or {RANGE}")
    kept = {member: {(topic, partition) for topic, partitions in current.get(member, {}).items()
                     if topic in topics for partition in partitions
                     if partition < partition_counts.get(topic, 0)}
            for member, topics in subscriptions.items()}
    owned = assignors[assignor](subscriptions, partition_counts, kept)
    return {member: _by_topic(partitions) for member, partitions in owned.items()}


def _by_topic(partitions: set[TopicPartition]) -> dict[str, frozenset[int]]:
    grouped: dict[str, set[int]] = {}
    for topic, partition in partitions:
        grouped.setdefault(topic, set()).add(partition)
    return {topic: frozenset(indexes) for topic, indexes in grouped.items()}


def _uniform(subscriptions: Mapping[str, frozenset[str]], partition_counts: Mapping[str, int],
             kept: dict[str, set[TopicPartition]]) -> dict[str, set[TopicPartition]]:
    """Every partition to one of its subscribers, as evenly as the subscriptions let: each
    member keeps what it had (once), the partitions left go to the least loaded of their
    subscribers, then partitions move one at a time from the most loaded member to a less
    loaded one that subscribes to them, while the two differ by more than one."""
    owned: dict[str, set[TopicPartition]] = {member: set() for member in subscriptions}
    taken: set[TopicPartition] = set()
    for member in sorted(kept):
        mine = kept[member] - taken
        owned[member] |= mine
        taken |= mine
    subscribers: dict[str, list[str]] = {}
    for member in sorted(subscriptions):
        for topic in subscriptions[member]:
            if partition_counts.get(topic, 0) > 0:
                subscribers.setdefault(topic, []).append(member)
    for topic in sorted(subscribers):
        for partition in range(partition_counts[topic]):
            if (topic, partition) not in taken:
                least = min(subscribers[topic], key=lambda member: (len(owned[member]), member))
                owned[least].add((topic, partition))
    _even_out(owned, subscriptions)
    return owned


def _even_out(owned: dict[str, set[TopicPartition]],
              subscriptions: Mapping[str, frozenset[str]]) -> None:
    """Move partitions from the most loaded members to the least loaded that may take them,
    one at a time, while a move narrows a gap of two or more."""
    while True:
        moved = False
        for giver in sorted(owned, key=lambda member: (-len(owned[member]), member)):
            takers = sorted((member for member in owned
                             if len(owned[member]) + 1 < len(owned[giver])),
                            key=lambda member: (len(owned[member]), member))
            for taker in takers:
                movable = sorted(tp for tp in owned[giver] if tp[0] in subscriptions[taker])
                if movable:
                    owned[giver].remove(movable[-1])
                    owned[taker].add(movable[-1])
                    moved = True
                    break
            if moved:
                break
        if not moved:
            return


def _range(subscriptions: Mapping[str, frozenset[str]], partition_counts: Mapping[str, int],
           kept: dict[str, set[TopicPartition]]) -> dict[str, set[TopicPartition]]:
    """Topic by topic, each subscriber's quota of the topic's partitions (the first members,
    by member id, one more where they do not divide evenly): a member keeps what it had up
    to its quota, and the partitions left go, lowest first, to members under theirs. With
    the same members on several topics, a member gets the same range of each."""
    owned: dict[str, set[TopicPartition]] = {member: set() for member in subscriptions}
    topics = sorted({topic for topics in subscriptions.values() for topic in topics})
    for topic in topics:
        count = partition_counts.get(topic, 0)
        members = sorted(member for member, subscribed in subscriptions.items()
                         if topic in subscribed)
        if count == 0 or not members:
            continue
        base, extra = divmod(count, len(members))
        quota = {member: base + (index < extra) for index, member in enumerate(members)}
        taken: set[int] = set()
        for member in members:
            mine = sorted(p for t, p in kept[member] if t == topic and p not in taken)
            mine = mine[:quota[member]]
            owned[member] |= {(topic, partition) for partition in mine}
            taken |= set(mine)
        free = iter(p for p in range(count) if p not in taken)
        for member in members:
            while sum(1 for t, _ in owned[member] if t == topic) < quota[member]:
                owned[member].add((topic, next(free)))
    return owned
