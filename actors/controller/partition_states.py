"""Kafka's partition state machine: each partition's leader and ISR, as the controller sets them.

The controller brings partitions online (their first state, or a leader where the leader is not
live), elects leaders when brokers die, takes dead followers out of the ISR and writes every
such change to ZooKeeper under its fence. Who leads is decided in `elections.py`; the
`PartitionStateMachine` carries the decisions out on the controller's picture of the cluster
(`ControllerContext.states`), on the controller's one event task.
"""

from __future__ import annotations

import logging
from collections.abc import Set

from rafka.actors.config import TopicConfig
from rafka.actors.controller.context import ControllerContext
from rafka.actors.controller.elections import elect_leader, remove_from_isr
from rafka.common.topic_partition import TopicPartition
from rafka.coordination.errors import StaleVersionError
from rafka.coordination.models import PartitionState, Versioned

log = logging.getLogger(__name__)


class PartitionStateMachine:
    """Partition state changes for one controller, each a write fenced by its epoch that is
    conditional on the version the controller last saw (a stale one is read again)."""

    def __init__(self, controller: ControllerContext) -> None:
        self.controller = controller

    async def bring_online(self, partitions: set[TopicPartition]) -> set[TopicPartition]:
        """Create missing states; elect leaders where the leader is not live. Returns changes."""
        controller = self.controller
        changed: set[TopicPartition] = set()
        new: dict[str, dict[int, PartitionState]] = {}
        for tp in sorted(partitions):
            if tp.topic not in controller.assignments:
                continue
            if tp not in controller.states:
                live_replicas = [r for r in controller.replicas(tp) if r in controller.live]
                if live_replicas:
                    new.setdefault(tp.topic, {})[tp.partition] = PartitionState(
                        leader=live_replicas[0],
                        leader_epoch=0,
                        isr=tuple(live_replicas),
                        controller_epoch=controller.epoch,
                    )
            elif (controller.states[tp].value.leader not in controller.live
                  and await self.elect(tp)):
                changed.add(tp)
        for topic, states in new.items():
            try:
                versions = await controller.zk(
                    controller.partition_states.create_partition_states, topic, states,
                    fence=controller.fence,
                )
            except StaleVersionError:
                await controller.load_topic(topic)
                continue
            for partition, state in states.items():
                tp = TopicPartition(topic, partition)
                controller.states[tp] = Versioned(state, versions[partition])
                changed.add(tp)
        return changed

    async def write_state(self, tp: TopicPartition, new_state: PartitionState) -> bool:
        """Write `new_state` over the version last seen; False (and the picture read again)
        where it was stale."""
        controller = self.controller
        current = controller.states[tp]
        try:
            version = await controller.zk(
                controller.partition_states.update_partition_state,
                tp.topic, tp.partition, new_state, current.version, fence=controller.fence,
            )
        except StaleVersionError:
            # The leader changed the ISR meanwhile: decide again on what is there now.
            fresh = await controller.zk(controller.partition_states.read_partition_state, *tp)
            if fresh is not None:
                controller.states[tp] = fresh
            return False
        controller.states[tp] = Versioned(new_state, version)
        return True

    async def elect(self, tp: TopicPartition, attempts: int = 3,
                    bounced: Set[int] = frozenset()) -> bool:
        """Offline-partition election for one partition; True if its state changed.

        A leader that `bounced` (see `elect_leader`) is a new incarnation: even chosen again,
        it leads under a new leader epoch."""
        controller = self.controller
        for _attempt in range(attempts):
            state = controller.states[tp].value
            config = controller.configs.get(tp.topic, TopicConfig())
            election = elect_leader(
                controller.replicas(tp), state.isr, set(controller.live),
                unclean_leader_election=config.unclean_leader_election_enable,
                bounced=bounced,
            )
            if (election.leader == state.leader and set(election.isr) == set(state.isr)
                    and state.leader not in bounced):
                return False
            if election.unclean:
                log.warning("unclean leader election for %s-%d: broker %d leads without being "
                            "in the ISR %s; acknowledged records may be lost",
                            tp.topic, tp.partition, election.leader, list(state.isr))
            new_state = PartitionState(
                leader=election.leader,
                leader_epoch=state.leader_epoch + 1,
                isr=election.isr,
                controller_epoch=controller.epoch,
            )
            if await self.write_state(tp, new_state):
                log.info("%s-%d: leader %d -> %d at epoch %d, ISR %s", tp.topic, tp.partition,
                         state.leader, election.leader, new_state.leader_epoch, election.isr)
                return True
        return False

    async def shrink_isr(self, tp: TopicPartition, dead: set[int]) -> bool:
        """Take the `dead` brokers out of the ISR of `tp`; True if its state changed."""
        controller = self.controller
        for _attempt in range(3):
            state = controller.states[tp].value
            isr = state.isr
            for broker in dead:
                isr = remove_from_isr(isr, broker)
            if set(isr) == set(state.isr):
                return False
            # Kafka's controller bumps the leader epoch when it takes a replica out of the ISR.
            new_state = PartitionState(state.leader, state.leader_epoch + 1, isr, controller.epoch)
            if await self.write_state(tp, new_state):
                return True
        return False
