"""Reassignment carried out: Kafka's controller moving a partition's replicas between brokers.

The steps, and the decision of which comes next, are in `reassignment.py`; the `Reassigner`
does them, on the controller's event task (the controller's handlers call it), reading and
writing the controller's picture of the cluster. Waiting never blocks the event loop: steps are
re-checked on ISR change notifications and every `check_s`.
"""

from __future__ import annotations

import asyncio
import logging

from rafka.actors.controller import reassignment
from rafka.actors.controller.channel import not_applied
from rafka.actors.controller.context import ControllerContext
from rafka.actors.controller.events import (
    ReassignmentCheck,
    ReassignmentsRequested,
)
from rafka.common.topic_partition import TopicPartition
from rafka.coordination.admin import parse_reassignment
from rafka.coordination.errors import ControllerMovedError, CoordinationError
from rafka.coordination.layout import REASSIGN_PARTITIONS

log = logging.getLogger(__name__)


class Reassigner:
    """The partitions being moved and their next steps, for one controller.

    It shares the controller's picture (`live`, `assignments`, `states`) and its fenced writes
    (`PartitionStateMachine.write_state`, `send_leader_and_isr`) on purpose, through
    `ControllerContext`: a step is a change of that picture, made as any other controller
    event makes it."""

    def __init__(self, controller: ControllerContext, check_s: float) -> None:
        self.controller = controller
        self.check_s = check_s
        self.forget()

    def forget(self) -> None:
        """Drop what is being moved: before a rebuild, which reads the request again."""
        # The target replicas of each partition being moved, and the partitions whose new
        # replicas this controller has announced (a new controller announces them again).
        self.reassigning: dict[TopicPartition, tuple[int, ...]] = {}
        self.announced: set[TopicPartition] = set()
        self._check_queued = False

    async def on_reassignments(self, event: ReassignmentsRequested) -> None:
        controller = self.controller
        versioned = event.request
        if versioned is None:
            self.reassigning = {}
            self.announced.clear()
            return
        try:
            targets = parse_reassignment(versioned.value)
        except Exception as error:  # a malformed request must not wedge the controller
            log.error("controller %d: ignoring malformed reassignment request: %s",
                      controller.broker_id, error)
            try:
                await controller.zk(controller.store.delete, REASSIGN_PARTITIONS,
                                    version=versioned.version)
            except CoordinationError as cleanup_error:  # the next request replaces it anyway
                log.warning("controller %d: could not delete the malformed request: %s",
                            controller.broker_id, cleanup_error)
            return
        self.reassigning = targets
        self.announced &= set(targets)
        log.info("controller %d: reassigning %s", controller.broker_id,
                 {f"{tp.topic}-{tp.partition}": list(r) for tp, r in targets.items()})
        await self.continue_reassignments()

    async def check_forever(self) -> None:
        controller = self.controller
        while True:
            await asyncio.sleep(self.check_s)
            if self.reassigning and not self._check_queued:
                self._check_queued = True
                controller.events.put_nowait(ReassignmentCheck())

    async def on_reassignment_check(self, _event: ReassignmentCheck) -> None:
        self._check_queued = False
        await self.continue_reassignments()

    async def continue_reassignments(self) -> None:
        controller = self.controller
        done = []
        for tp, target in sorted(self.reassigning.items()):
            try:
                if await self._reassign_partition(tp, target):
                    done.append(tp)
            except ControllerMovedError:
                raise
            except Exception:
                log.exception("controller %d: reassigning %s-%d failed; retrying",
                              controller.broker_id, tp.topic, tp.partition)
        if done:
            left = await controller.zk(controller.admin.complete_reassignment, done,
                                       fence=controller.fence)
            self.reassigning = dict(left)
            self.announced -= set(done)
            log.info("controller %d: reassignment of %s done", controller.broker_id,
                     [f"{tp.topic}-{tp.partition}" for tp in done])

    async def _reassign_partition(self, tp: TopicPartition, target: tuple[int, ...]) -> bool:
        """Take one partition one step further; True once it is done (or moot)."""
        controller = self.controller
        assignment = controller.assignments.get(tp.topic)
        if assignment is None or tp.partition not in assignment.partitions:
            return True  # topic deleted meanwhile: nothing left to move
        # The leader writes ISR changes itself: read what is there now, not our cached copy.
        fresh = await controller.zk(controller.partition_states.read_partition_state, *tp)
        if fresh is None:
            return False  # not online yet: its state comes first
        controller.states[tp] = fresh
        current = controller.replicas(tp)
        step = reassignment.next_reassignment_step(
            current, target, fresh.value, set(controller.live),
            announced=tp in self.announced, controller_epoch=controller.epoch)
        match step:
            case reassignment.ReassignmentDone():
                return True
            case reassignment.ReorderReplicas(replicas):
                await self._write_replicas(tp, replicas)
                await controller.send_leader_and_isr({tp})
                return True
            case reassignment.AddReplicas(replicas, state):
                if replicas != current:
                    await self._write_replicas(tp, replicas)
                if not await controller.partition_state_machine.write_state(tp, state):
                    return False  # the leader changed the ISR meanwhile: again at the next check
                self.announced.add(tp)
                log.info("%s-%d: replicas %s -> %s, waiting for %s to catch up", tp.topic,
                         tp.partition, list(current), list(replicas),
                         sorted(set(target) - set(state.isr)))
                await controller.send_leader_and_isr({tp})
                return False
            case reassignment.WaitForReplicas():
                return False
            case reassignment.CompleteReassignment(state, leaving):
                if not await controller.partition_state_machine.write_state(tp, state):
                    return False
                await self._write_replicas(tp, target)
                log.info("%s-%d: replicas %s, leader %d at epoch %d, ISR %s; %s leave", tp.topic,
                         tp.partition, list(target), state.leader, state.leader_epoch,
                         list(state.isr), list(leaving))
                await controller.send_leader_and_isr({tp})
                await self._stop_replicas(tp, list(leaving), delete=True)
                return True
        raise AssertionError(f"unknown reassignment step {step!r}")

    async def _write_replicas(self, tp: TopicPartition, replicas: tuple[int, ...]) -> None:
        controller = self.controller
        written = await controller.zk(controller.admin.write_partition_replicas, tp.topic,
                                      tp.partition, replicas, fence=controller.fence)
        controller.assignments[tp.topic] = written.value
        controller.assignment_versions[tp.topic] = written.version

    async def _stop_replicas(self, tp: TopicPartition, brokers: list[int], *, delete: bool) -> None:
        """StopReplica to `brokers` for one partition. A broker that is down keeps its copy, as
        in Kafka, until it is told again (the log is no longer in the assignment)."""
        controller = self.controller
        answers = await controller.channel.stop_replicas(
            {broker: [(tp.topic, tp.partition)] for broker in brokers}, delete,
            f"StopReplica of {tp.topic}-{tp.partition}")
        for reply in answers.values():
            if not_applied(reply):
                log.warning("StopReplica %s-%d not applied everywhere: %r", tp.topic,
                            tp.partition, reply)
