"""Preferred leader election: Kafka's controller giving leadership back to each partition's
first replica, on request (ElectLeaders) and every `check_s` (Kafka's auto leader rebalance).

Who may lead is decided by `preferred_leader_election` (`elections.py`); the
`PreferredLeaderElector` reads the ISRs afresh and writes the new states through the
controller's `PartitionStateMachine`, on the controller's one event task.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable

from rafka.actors.controller.context import ControllerContext
from rafka.actors.controller.elections import preferred_leader_election
from rafka.actors.controller.events import PreferredLeaderCheck
from rafka.actors.errors import ErrorCode
from rafka.common.topic_partition import TopicPartition
from rafka.coordination.models import PartitionState


class PreferredLeaderElector:
    """Preferred leader elections for one controller."""

    def __init__(self, controller: ControllerContext, check_s: float) -> None:
        self.controller = controller
        self.check_s = check_s

    async def check_forever(self) -> None:
        """Queue a check every `check_s`: the election itself runs on the event task."""
        while True:
            await asyncio.sleep(self.check_s)
            self.controller.events.put_nowait(PreferredLeaderCheck())

    async def on_preferred_leader_check(self, _event: PreferredLeaderCheck) -> None:
        await self.elect()

    async def elect(
        self, partitions: Iterable[TopicPartition] | None = None,
    ) -> dict[TopicPartition, int]:
        """Give leadership back to the first replica of each of `partitions` (None: every
        partition) where it is in sync; what happened to each, as Kafka's ElectLeaders answers
        it: NONE where it moved, else why not (`preferred_leader_election`, and
        UNKNOWN_TOPIC_OR_PARTITION)."""
        controller = self.controller
        wanted = None if partitions is None else set(partitions)
        # Leaders change their ISR themselves and the notification may not have reached us:
        # decide on what ZooKeeper holds now (one pipelined read per topic).
        for topic, assignment in list(controller.assignments.items()):
            if wanted is not None and all(tp.topic != topic for tp in wanted):
                continue
            fresh = await controller.zk(controller.partition_states.read_partition_states,
                                        topic, list(assignment.partitions))
            for partition, versioned in fresh.items():
                tp = TopicPartition(topic, partition)
                if versioned is not None and tp in controller.states and (
                        versioned.version > controller.states[tp].version):
                    controller.states[tp] = versioned
        outcomes: dict[TopicPartition, int] = {}
        for tp in wanted if wanted is not None else list(controller.states):
            outcomes[tp] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            # A stale write means the leader changed the ISR meanwhile (its notification may
            # not have reached us yet): decide again on what ZooKeeper holds now.
            for _attempt in range(3):
                if tp not in controller.states or tp.topic in controller.deleting:
                    break  # unknown, or its topic went meanwhile
                state = controller.states[tp].value
                preferred, outcomes[tp] = preferred_leader_election(
                    controller.replicas(tp), state.leader, state.isr, set(controller.live)
                )
                if preferred is None:
                    break
                new_state = PartitionState(preferred, state.leader_epoch + 1, state.isr,
                                           controller.epoch)
                if await controller.partition_state_machine.write_state(tp, new_state):
                    break
                outcomes[tp] = ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE  # if no try succeeds
        moved = {tp for tp, outcome in outcomes.items() if outcome == ErrorCode.NONE}
        await controller.send_leader_and_isr(moved)
        return outcomes
