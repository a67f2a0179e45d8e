"""Moving a partition's replicas between brokers: the controller's decisions, as pure functions.

Kafka's ZooKeeper-era algorithm (`KafkaController.onPartitionReassignment`), per partition, with
RS the replicas now, TRS the target and RS - TRS the replicas that leave:

1. assignment = RS + (TRS - RS); bump the leader epoch so that the leader learns the new replica
   list; LeaderAndIsr to all, so that the new replicas start fetching as followers;
2. wait until every replica of TRS is in the ISR (the leader adds each once caught up);
3. if the leader is not in TRS (or not live), the first live in-sync replica of TRS leads; the
   leaving replicas leave the ISR, in the same fenced write (one epoch bump instead of Kafka's
   two: the leaving replicas are told nothing in between anyway);
4. assignment = TRS; LeaderAndIsr to TRS; StopReplica (delete) to the leaving replicas;
5. the partition leaves /admin/reassign_partitions (the znode goes when empty).

`next_reassignment_step` decides, from what ZooKeeper holds now, which of these comes next; the
controller (`actors/controller/controller.py`) makes the writes. Deciding afresh each time is what
lets a new controller resume where the last one stopped.
"""

from __future__ import annotations

from collections.abc import Set
from dataclasses import dataclass

from rafka.coordination.models import PartitionState


@dataclass(frozen=True)
class ReassignmentDone:
    """The replicas are the target's already: done, by this controller or an earlier one."""


@dataclass(frozen=True)
class ReorderReplicas:
    """Only the order changes (the preferred leader): write it, nothing moves."""

    replicas: tuple[int, ...]


@dataclass(frozen=True)
class AddReplicas:
    """Step 1: the replicas become RS + (TRS - RS), announced by a new leader epoch."""

    replicas: tuple[int, ...]
    state: PartitionState


@dataclass(frozen=True)
class WaitForReplicas:
    """Step 2: some target replica is not in the ISR yet (or none of them can lead)."""


@dataclass(frozen=True)
class CompleteReassignment:
    """Steps 3 and 4: the new state (leader, ISR within the target), then the replicas become
    the target and `leaving` are stopped and deleted."""

    state: PartitionState
    leaving: tuple[int, ...]


ReassignmentStep = (ReassignmentDone | ReorderReplicas | AddReplicas | WaitForReplicas
                    | CompleteReassignment)


def next_reassignment_step(
    current: tuple[int, ...],
    target: tuple[int, ...],
    state: PartitionState,
    live_brokers: Set[int],
    *,
    announced: bool,
    controller_epoch: int,
) -> ReassignmentStep:
    """What to do next to move a partition from replicas `current` to `target`.

    `state` is its state in ZooKeeper now; `announced` says whether this controller has done
    step 1 for it (a new controller does it again: announcing twice is harmless).
    """
    if current == target:
        return ReassignmentDone()
    if set(current) == set(target):
        return ReorderReplicas(target)
    if not announced:
        union = current + tuple(broker for broker in target if broker not in current)
        return AddReplicas(union, PartitionState(state.leader, state.leader_epoch + 1,
                                                 state.isr, controller_epoch))
    if not set(target) <= set(state.isr):
        return WaitForReplicas()
    leader = state.leader  # leadership moves last
    if leader not in target or leader not in live_brokers:
        candidates = [b for b in target if b in state.isr and b in live_brokers]
        if not candidates:
            return WaitForReplicas()
        leader = candidates[0]
    isr = tuple(broker for broker in state.isr if broker in target)
    return CompleteReassignment(
        PartitionState(leader, state.leader_epoch + 1, isr, controller_epoch),
        leaving=tuple(broker for broker in current if broker not in target),
    )
