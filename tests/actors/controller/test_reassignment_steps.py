"""The controller's reassignment decisions, step by step, with plain values (no ZooKeeper)."""

from __future__ import annotations

from rafka.actors.controller.reassignment import (
    AddReplicas,
    CompleteReassignment,
    ReassignmentDone,
    ReorderReplicas,
    WaitForReplicas,
    next_reassignment_step,
)
from rafka.coordination.models import PartitionState

EPOCH = 7  # the controller's


def step(current, target, leader, isr, live=(0, 1, 2, 3), announced=True, leader_epoch=4):
    state = PartitionState(leader, leader_epoch, tuple(isr), 1)
    return next_reassignment_step(tuple(current), tuple(target), state, set(live),
                                  announced=announced, controller_epoch=EPOCH)


def test_a_partition_already_on_its_target_is_done() -> None:
    assert step((0, 1), (0, 1), leader=0, isr=(0, 1)) == ReassignmentDone()


def test_the_same_replicas_in_another_order_only_reorder() -> None:
    assert step((0, 1, 2), (2, 0, 1), leader=0, isr=(0, 1, 2)) == ReorderReplicas((2, 0, 1))


def test_first_the_new_replicas_join_the_assignment_at_a_new_leader_epoch() -> None:
    decided = step((0, 1, 2), (1, 2, 3), leader=0, isr=(0, 1, 2), announced=False)
    assert decided == AddReplicas((0, 1, 2, 3), PartitionState(0, 5, (0, 1, 2), EPOCH))


def test_then_it_waits_until_every_target_replica_is_in_sync() -> None:
    assert step((0, 1, 2, 3), (1, 2, 3), leader=0, isr=(0, 1, 2)) == WaitForReplicas()


def test_leadership_moves_last_to_the_first_live_in_sync_target_replica() -> None:
    decided = step((0, 1, 2, 3), (3, 1, 2), leader=0, isr=(0, 1, 2, 3), live=(0, 2, 3))
    assert decided == CompleteReassignment(PartitionState(3, 5, (1, 2, 3), EPOCH), leaving=(0,))


def test_a_leader_that_stays_keeps_leading() -> None:
    decided = step((0, 1, 2, 3), (1, 2, 3), leader=1, isr=(0, 1, 2, 3))
    assert decided == CompleteReassignment(PartitionState(1, 5, (1, 2, 3), EPOCH), leaving=(0,))


def test_no_live_in_sync_target_replica_to_lead_means_waiting() -> None:
    assert step((0, 1, 2, 3), (3,), leader=0, isr=(0, 3), live=(0,)) == WaitForReplicas()


def test_shrinking_to_a_subset_adds_nothing_and_announces_once() -> None:
    decided = step((0, 1, 2), (0, 1), leader=2, isr=(0, 1, 2), announced=False)
    assert decided == AddReplicas((0, 1, 2), PartitionState(2, 5, (0, 1, 2), EPOCH))
    decided = step((0, 1, 2), (0, 1), leader=2, isr=(0, 1, 2))
    assert decided == CompleteReassignment(PartitionState(0, 5, (0, 1), EPOCH), leaving=(2,))
