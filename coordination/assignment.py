"""Replica assignment: which brokers hold each partition, the first one being its preferred leader.

Pure functions (no ZooKeeper), after Kafka's `AdminUtils.assignReplicasToBrokers`:

- Leaders go round-robin over the brokers from a start index (random unless given), continuing
  the rotation at `first_partition` when partitions are added, so every broker leads
  floor(P/B) or ceil(P/B) of the topic's partitions. When `existing` partitions are passed, the
  brokers leading fewest of them (then holding fewest replicas) lead first, so the topic as a
  whole stays balanced.
- Followers are spread so that every broker holds floor or ceil of the replicas (counting
  `existing`). Kafka shifts each partition's followers by an increasing offset from its leader;
  here that shifted order only breaks ties, and the choice itself goes to the broker that most
  needs replicas given the partitions still to come. (Kafka's own shift can leave one broker with
  two more replicas than another when P is not a multiple of B; this never does, without racks.)
- Rack-aware when every broker has a rack: brokers are ordered alternating racks (Kafka's
  `getRackAlternatedBrokerList`), and each partition's replicas take distinct racks first, so a
  partition spans min(replication factor, racks) racks. Replica balance is then best effort:
  uneven racks make it impossible. If only some brokers have a rack, racks are ignored (Kafka's
  "safe" rack-aware mode).
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Mapping, Sequence

from rafka.coordination.errors import (
    InvalidPartitionsError,
    InvalidReplicaAssignmentError,
    InvalidReplicationFactorError,
)
from rafka.coordination.models import TopicAssignment
from rafka.coordination.validation import validate_broker_id

Brokers = Sequence[int] | Mapping[int, "str | None"]
ReplicaAssignment = Mapping[int, Sequence[int]]

# A topic's replica assignment is one znode, and ZooKeeper refuses znodes over 1 MB
# (jute.maxbuffer): 10 000 partitions of replication factor 3 take about 200 KB of it.
MAX_PARTITIONS_PER_TOPIC = 10_000


def assign_replicas(
    brokers: Brokers,
    partitions: int,
    replication_factor: int,
    *,
    start_index: int | None = None,
    first_partition: int = 0,
    existing: ReplicaAssignment | None = None,
    rng: random.Random | None = None,
) -> dict[int, list[int]]:
    """Assign `partitions` new partitions, numbered from `first_partition`, to `brokers`.

    `brokers` is a sequence of broker ids, or a mapping of broker id to rack (or None).
    `existing` is the topic's current assignment when adding partitions: it is taken into
    account for balance and must not overlap the new partition ids.
    Raises `InvalidPartitionsError` when partitions < 1 and `InvalidReplicationFactorError` when
    the replication factor is < 1 or larger than the number of brokers.
    """
    racks = _broker_racks(brokers)
    if not isinstance(partitions, int) or partitions < 1:
        raise InvalidPartitionsError(
            f"number of partitions must be at least 1, got {partitions!r}"
        )
    if first_partition + partitions > MAX_PARTITIONS_PER_TOPIC:
        raise InvalidPartitionsError(
            f"{first_partition + partitions} partitions is more than the "
            f"{MAX_PARTITIONS_PER_TOPIC} a topic may have: a topic's assignment lives in one "
            "ZooKeeper znode (1 MB at most) and every replica is a Ray actor of its own"
        )
    if not isinstance(replication_factor, int) or replication_factor < 1:
        raise InvalidReplicationFactorError(
            f"replication factor must be at least 1, got {replication_factor!r}"
        )
    if replication_factor > len(racks):
        raise InvalidReplicationFactorError(
            f"replication factor {replication_factor} is larger than the {len(racks)} available "
            f"broker(s) {sorted(racks)}: start more brokers or lower the replication factor"
        )
    if first_partition < 0:
        raise InvalidPartitionsError(f"first_partition must be >= 0, got {first_partition}")
    existing = {int(p): [int(b) for b in r] for p, r in (existing or {}).items()}
    overlap = sorted(p for p in existing if first_partition <= p < first_partition + partitions)
    if overlap:
        raise InvalidPartitionsError(
            f"partitions {overlap} exist already: pass first_partition={len(existing)} to add "
            f"partitions after them"
        )

    rack_aware = all(rack is not None for rack in racks.values())
    order = _rack_alternated(racks) if rack_aware else sorted(racks)
    count = len(order)
    position = {broker: index for index, broker in enumerate(order)}
    start = (rng or random).randrange(count) if start_index is None else start_index % count

    leader_counts = Counter({broker: 0 for broker in order})
    replica_counts = Counter({broker: 0 for broker in order})
    for replicas in existing.values():
        # Brokers that are gone do not count: only live ones take new replicas.
        if replicas and replicas[0] in position:
            leader_counts[replicas[0]] += 1
        replica_counts.update(b for b in replicas if b in position)

    def rotation(broker: int, base: int) -> int:
        """How far `broker` comes after position `base` in the round-robin order."""
        return (position[broker] - base) % count

    leaders: list[int] = []
    for index in range(partitions):
        base = start + first_partition + index
        def leader_rank(b: int, base: int = base) -> tuple[int, int, int]:
            return (leader_counts[b], replica_counts[b], rotation(b, base))

        leader = min(order, key=leader_rank)
        leader_counts[leader] += 1
        replica_counts[leader] += 1
        leaders.append(leader)

    need = _follower_targets(order, leaders, replica_counts, replication_factor, start, rotation)

    rack_count = len(set(racks.values()))
    spread_racks = rack_aware and replication_factor <= rack_count
    leads_to_come = Counter(leaders)
    rack_leads_to_come = Counter(racks[leader] for leader in leaders)
    shift = start
    assignment: dict[int, list[int]] = {}
    for index, leader in enumerate(leaders):
        partition = first_partition + index
        leads_to_come[leader] -= 1
        rack_leads_to_come[racks[leader]] -= 1
        partitions_to_come = partitions - index - 1
        if partition > 0 and partition % count == 0:
            shift += 1  # Kafka's increasing follower offset, one step per round of brokers

        # Urgency of a broker: the partitions still to come that it could follow, minus the
        # followers it still needs; the smaller, the sooner it must be picked.
        if spread_racks:
            could_follow = {b: partitions_to_come - rack_leads_to_come[racks[b]] for b in order}
        else:
            could_follow = {b: partitions_to_come - leads_to_come[b] for b in order}

        replicas = [leader]
        for follower in range(replication_factor - 1):
            candidates = [b for b in order if b not in replicas]
            if rack_aware:
                used = {racks[b] for b in replicas}
                fresh = [b for b in candidates if racks[b] not in used]
                candidates = fresh or candidates
            base = position[leader] + 1 + shift + follower
            # A broker whose followers are all placed comes last, however few partitions it
            # could still follow (it may lead the rest): else it takes one more than its share.
            def follower_rank(b: int, base: int = base,
                              could_follow: dict[int, int] = could_follow,
                              ) -> tuple[bool, int, int, int]:
                return (need[b] <= 0, could_follow[b] - need[b], -need[b], rotation(b, base))

            chosen = min(candidates, key=follower_rank)
            need[chosen] -= 1
            replicas.append(chosen)
        assignment[partition] = replicas
    return assignment


def _follower_targets(
    order: list[int],
    leaders: list[int],
    replica_counts: Counter[int],
    replication_factor: int,
    start: int,
    rotation: object,
) -> Counter[int]:
    """How many follower replicas each broker should take: fill up the least loaded first."""
    new_leads = Counter(leaders)
    load = Counter(replica_counts)
    need: Counter[int] = Counter({broker: 0 for broker in order})
    for _ in range(len(leaders) * (replication_factor - 1)):
        # A broker cannot follow the partitions it leads.
        open_brokers = [b for b in order if need[b] < len(leaders) - new_leads[b]]
        broker = min(open_brokers, key=lambda b: (load[b], rotation(b, start)))  # type: ignore[operator]
        need[broker] += 1
        load[broker] += 1
    return need


def _broker_racks(brokers: Brokers) -> dict[int, str | None]:
    if isinstance(brokers, Mapping):
        racks = {validate_broker_id(b): (None if r is None else str(r)) for b, r in brokers.items()}
    else:
        racks = {validate_broker_id(b): None for b in brokers}
    if not racks:
        raise InvalidReplicationFactorError(
            "there are no brokers to assign replicas to: start at least one broker"
        )
    return racks


def _rack_alternated(racks: Mapping[int, str | None]) -> list[int]:
    """Brokers ordered so that consecutive ones sit in different racks, Kafka's way:
    take the next broker of each rack in turn (racks and brokers in sorted order)."""
    by_rack: dict[str, list[int]] = {}
    for broker in sorted(racks):
        by_rack.setdefault(str(racks[broker]), []).append(broker)
    queues = [by_rack[rack] for rack in sorted(by_rack)]
    ordered: list[int] = []
    depth = 0
    while len(ordered) < len(racks):
        ordered.extend(queue[depth] for queue in queues if depth < len(queue))
        depth += 1
    return ordered


def validate_assignment(assignment: ReplicaAssignment | TopicAssignment) -> TopicAssignment:
    """Check a replica assignment as Kafka does before writing it; return it normalised.

    Partitions must be numbered 0..n-1 without gaps, each with the same number (>= 1) of
    distinct, valid broker ids.
    """
    partitions = assignment.partitions if isinstance(assignment, TopicAssignment) else assignment
    if not partitions:
        raise InvalidPartitionsError("a topic needs at least 1 partition; the assignment is empty")
    try:
        ids = sorted(int(p) for p in partitions)
    except (TypeError, ValueError):
        raise InvalidReplicaAssignmentError(
            f"partition ids must be ints, got {sorted(map(repr, partitions))}"
        ) from None
    if ids != list(range(len(ids))):
        raise InvalidReplicaAssignmentError(
            f"partitions must be numbered 0 to {len(ids) - 1} without gaps, got {ids}"
        )
    sizes = set()
    for partition, replicas in partitions.items():
        replicas = list(replicas)
        for broker in replicas:
            validate_broker_id(broker)
        if not replicas:
            raise InvalidReplicaAssignmentError(f"partition {partition} has no replicas")
        if len(set(replicas)) != len(replicas):
            raise InvalidReplicaAssignmentError(
                f"partition {partition} lists a broker twice: {replicas}; each replica must be "
                f"on a different broker"
            )
        sizes.add(len(replicas))
    if len(sizes) > 1:
        raise InvalidReplicaAssignmentError(
            f"all partitions must have the same number of replicas, got {sorted(sizes)}"
        )
    return TopicAssignment({int(p): tuple(r) for p, r in partitions.items()})
