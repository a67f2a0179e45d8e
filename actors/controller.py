"""The controller: exactly one broker's, elected through `/controller`.

It watches brokers, topics, deletion requests and ISR change notifications; writes initial
partition states; elects leaders from the ISR when brokers die (unclean only when the topic
allows it); shrinks the ISR of dead followers; restores preferred leaders; deletes topics; and
sends LeaderAndIsr, stamped with its epoch, to the brokers affected. Every write it makes is
fenced by its controller epoch, so a deposed controller can change nothing.

As in Kafka it runs inside its broker (here: on the broker actor's asyncio loop) and keeps no
state it cannot rebuild from ZooKeeper. Watch callbacks only queue events; one task handles them
in order, as Kafka's controller event thread does. The decisions are `actors.replication`'s.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any

import ray

from actors.config import TopicConfig
from actors.naming import broker_name
from actors.replication import elect_leader, elect_preferred_leader, remove_from_isr
from coordination.admin import TopicAdmin
from coordination.errors import ControllerMovedError, StaleVersionError, UnknownTopicError
from coordination.models import (
    BrokerInfo,
    ControllerFence,
    PartitionState,
    TopicAssignment,
    TopicPartition,
    Versioned,
)
from coordination.partition_state import PartitionStateStore
from coordination.registration import read_brokers
from coordination.store import ClusterStore
from coordination.watches import ClusterWatches

log = logging.getLogger(__name__)


class Controller:
    """The active controller; `start()` on the broker's loop, `stop()` when resigning."""

    def __init__(
        self,
        store: ClusterStore,
        broker_id: int,
        fence: ControllerFence,
        namespace: str,
        *,
        preferred_leader_check_s: float = 300.0,
    ) -> None:
        self.store = store
        self.broker_id = broker_id
        self.fence = fence
        self.epoch = fence.epoch
        self.namespace = namespace
        self.preferred_leader_check_s = preferred_leader_check_s
        self.admin = TopicAdmin(store)
        self.partition_states = PartitionStateStore(store)
        self.live: dict[int, BrokerInfo] = {}
        self.assignments: dict[str, TopicAssignment] = {}
        self.configs: dict[str, TopicConfig] = {}
        self.raw_configs: dict[str, dict[str, str]] = {}
        self.states: dict[TopicPartition, Versioned[PartitionState]] = {}
        self.events: asyncio.Queue[tuple[str, Any]] = asyncio.Queue()
        self._loop = asyncio.get_running_loop()
        self._watches: list[Any] = []
        self._tasks: list[asyncio.Task] = []

    # ------------------------------------------------------------------------ life cycle

    def start(self) -> None:
        self._tasks.append(asyncio.ensure_future(self._run()))

    def stop(self) -> None:
        for watch in self._watches:
            with contextlib.suppress(Exception):
                watch.cancel()
        self._watches = []
        for task in self._tasks:
            task.cancel()
        self._tasks = []

    def _queue(self, kind: str) -> Any:
        def deliver(value: Any) -> None:
            self._loop.call_soon_threadsafe(self.events.put_nowait, (kind, value))

        return deliver

    async def _zk(self, function: Any, *args: Any, **kwargs: Any) -> Any:
        """A blocking kazoo call, off the loop so that the broker keeps answering."""
        return await asyncio.to_thread(function, *args, **kwargs)

    async def _run(self) -> None:
        try:
            await self._initialize()
            watches = ClusterWatches(self.store)
            self._watches = [
                watches.watch_brokers(self._queue("brokers")),
                watches.watch_topics(self._queue("topics")),
                watches.watch_topic_deletions(self._queue("deletions")),
                watches.watch_isr_change_notifications(self._queue("isr_changes")),
            ]
            self._tasks.append(asyncio.ensure_future(self._check_preferred_leaders_forever()))
            while True:
                kind, value = await self.events.get()
                try:
                    await getattr(self, f"_on_{kind}")(value)
                except ControllerMovedError:
                    log.warning("controller %d was deposed", self.broker_id)
                    return
                except Exception:
                    log.exception("controller %d failed handling %s", self.broker_id, kind)
        except asyncio.CancelledError:
            raise
        except ControllerMovedError:
            log.warning("controller %d was deposed while starting", self.broker_id)
        except Exception:
            log.exception("controller %d failed to start", self.broker_id)

    async def _initialize(self) -> None:
        """Rebuild everything from ZooKeeper, bring every partition online, tell every broker."""
        self.live = await self._zk(read_brokers, self.store)
        for topic in await self._zk(self.admin.list_topics):
            await self._load_topic(topic)
        await self._bring_online(set(self.states) | self._partitions_without_state())
        # Replicas on brokers that died while there was no controller leave the ISR now, as
        # Kafka's controller takes them offline when it starts.
        for tp, versioned in list(self.states.items()):
            dead = set(versioned.value.isr) - set(self.live)
            if dead and versioned.value.leader in self.live:
                await self._shrink_isr(tp, dead)
        await self._send_leader_and_isr(set(self.states), brokers=set(self.live))
        for topic in await self._zk(self.admin.topics_marked_for_deletion):
            await self._delete_topic(topic)

    async def _load_topic(self, topic: str) -> None:
        try:
            description = await self._zk(self.admin.describe_topic, topic)
        except UnknownTopicError:
            return
        self.assignments[topic] = description.assignment.value
        self.raw_configs[topic] = dict(description.config)
        self.configs[topic] = TopicConfig.from_dict(description.config)
        for partition, state in description.states.items():
            if state is not None:
                self.states[TopicPartition(topic, partition)] = state

    def _partitions_without_state(self) -> set[TopicPartition]:
        return {
            TopicPartition(topic, partition)
            for topic, assignment in self.assignments.items()
            for partition in assignment.partitions
            if TopicPartition(topic, partition) not in self.states
        }

    def _replicas(self, tp: TopicPartition) -> tuple[int, ...]:
        return self.assignments[tp.topic].partitions[tp.partition]

    # ---------------------------------------------------------------------- state changes

    async def _bring_online(self, partitions: set[TopicPartition]) -> set[TopicPartition]:
        """Create missing states; elect leaders where the leader is not live. Returns changes."""
        changed: set[TopicPartition] = set()
        new: dict[str, dict[int, PartitionState]] = {}
        for tp in sorted(partitions):
            if tp.topic not in self.assignments:
                continue
            if tp not in self.states:
                live_replicas = [r for r in self._replicas(tp) if r in self.live]
                if live_replicas:
                    new.setdefault(tp.topic, {})[tp.partition] = PartitionState(
                        leader=live_replicas[0],
                        leader_epoch=0,
                        isr=tuple(live_replicas),
                        controller_epoch=self.epoch,
                    )
            elif self.states[tp].value.leader not in self.live and await self._elect(tp):
                changed.add(tp)
        for topic, states in new.items():
            try:
                versions = await self._zk(
                    self.partition_states.create_partition_states, topic, states, fence=self.fence
                )
            except StaleVersionError:
                await self._load_topic(topic)
                continue
            for partition, state in states.items():
                tp = TopicPartition(topic, partition)
                self.states[tp] = Versioned(state, versions[partition])
                changed.add(tp)
        return changed

    async def _write_state(self, tp: TopicPartition, new_state: PartitionState) -> bool:
        current = self.states[tp]
        try:
            version = await self._zk(
                self.partition_states.update_partition_state,
                tp.topic, tp.partition, new_state, current.version, fence=self.fence,
            )
        except StaleVersionError:
            # The leader changed the ISR meanwhile: decide again on what is there now.
            fresh = await self._zk(self.partition_states.read_partition_state, *tp)
            if fresh is not None:
                self.states[tp] = fresh
            return False
        self.states[tp] = Versioned(new_state, version)
        return True

    async def _elect(self, tp: TopicPartition, attempts: int = 3) -> bool:
        """Offline-partition election for one partition; True if its state changed."""
        for _attempt in range(attempts):
            state = self.states[tp].value
            config = self.configs.get(tp.topic, TopicConfig())
            election = elect_leader(
                self._replicas(tp), state.isr, set(self.live),
                unclean_leader_election=config.unclean_leader_election_enable,
            )
            if election.leader == state.leader and set(election.isr) == set(state.isr):
                return False
            if election.unclean:
                log.warning("unclean leader election for %s-%d: broker %d leads without being "
                            "in the ISR %s; acknowledged records may be lost",
                            tp.topic, tp.partition, election.leader, list(state.isr))
            new_state = PartitionState(
                leader=election.leader,
                leader_epoch=state.leader_epoch + 1,
                isr=election.isr,
                controller_epoch=self.epoch,
            )
            if await self._write_state(tp, new_state):
                log.info("%s-%d: leader %d -> %d at epoch %d, ISR %s", tp.topic, tp.partition,
                         state.leader, election.leader, new_state.leader_epoch, election.isr)
                return True
        return False

    async def _shrink_isr(self, tp: TopicPartition, dead: set[int]) -> bool:
        for _attempt in range(3):
            state = self.states[tp].value
            isr = state.isr
            for broker in dead:
                isr = remove_from_isr(isr, broker)
            if set(isr) == set(state.isr):
                return False
            # Kafka's controller bumps the leader epoch when it takes a replica out of the ISR.
            new_state = PartitionState(state.leader, state.leader_epoch + 1, isr, self.epoch)
            if await self._write_state(tp, new_state):
                return True
        return False

    async def _send_leader_and_isr(
        self, partitions: set[TopicPartition], brokers: set[int] | None = None
    ) -> None:
        """LeaderAndIsr for `partitions` to their live replicas (or only to `brokers`)."""
        requests: dict[int, list[dict[str, Any]]] = {}
        for tp in partitions:
            if tp not in self.states or tp.topic not in self.assignments:
                continue
            versioned = self.states[tp]
            state = versioned.value
            request = {
                "topic": tp.topic,
                "partition": tp.partition,
                "leader": state.leader,
                "leader_epoch": state.leader_epoch,
                "isr": list(state.isr),
                "replicas": list(self._replicas(tp)),
                "zk_version": versioned.version,
                "config": self.raw_configs.get(tp.topic, {}),
            }
            for replica in self._replicas(tp):
                if replica in self.live and (brokers is None or replica in brokers):
                    requests.setdefault(replica, []).append(request)
        calls = []
        for broker, batch in requests.items():
            try:
                handle = ray.get_actor(broker_name(broker), namespace=self.namespace)
            except ValueError:
                continue
            calls.append(handle.leader_and_isr.remote(self.epoch, batch))
        for reply in await asyncio.gather(*calls, return_exceptions=True):
            if isinstance(reply, BaseException) or reply.get("error") or reply.get("failed"):
                log.warning("LeaderAndIsr not applied everywhere: %r", reply)

    # --------------------------------------------------------------------------- events

    async def _on_brokers(self, brokers: dict[int, BrokerInfo]) -> None:
        old, self.live = self.live, dict(brokers)
        # A new broker epoch is a bounce: the broker lost what it led, whatever the ids say.
        dead = {b for b, info in old.items() if b not in brokers or brokers[b].epoch != info.epoch}
        born = {b for b, info in brokers.items() if b not in old or old[b].epoch != info.epoch}
        if not dead and not born:
            return
        log.info("controller %d: brokers %s; dead %s, new %s", self.broker_id,
                 sorted(brokers), sorted(dead), sorted(born))
        changed: set[TopicPartition] = set()
        for tp, versioned in list(self.states.items()):
            state = versioned.value
            if state.leader in dead or state.leader not in self.live:
                if await self._elect(tp):
                    changed.add(tp)
            elif dead & set(state.isr) and await self._shrink_isr(tp, dead):
                changed.add(tp)
        changed |= await self._bring_online(self._partitions_without_state())
        await self._send_leader_and_isr(changed)
        # New brokers learn every partition they hold, to lead or to follow.
        hosted = {tp for tp in self.states if born & set(self._replicas(tp))}
        await self._send_leader_and_isr(hosted - changed, brokers=born)

    async def _on_topics(self, topics: set[str]) -> None:
        for topic in set(self.assignments) - topics:
            self._forget_topic(topic)
        added = topics - set(self.assignments)
        for topic in sorted(added):
            await self._load_topic(topic)
        if added:
            partitions = {tp for tp in self._partitions_without_state() if tp.topic in added}
            partitions |= {tp for tp in self.states if tp.topic in added}
            changed = await self._bring_online(partitions)
            await self._send_leader_and_isr(changed | {tp for tp in partitions
                                                       if tp in self.states})

    def _forget_topic(self, topic: str) -> None:
        self.assignments.pop(topic, None)
        self.configs.pop(topic, None)
        self.raw_configs.pop(topic, None)
        for tp in [tp for tp in self.states if tp.topic == topic]:
            del self.states[tp]

    async def _on_deletions(self, topics: set[str]) -> None:
        for topic in sorted(topics):
            await self._delete_topic(topic)

    async def _delete_topic(self, topic: str) -> None:
        assignment = self.assignments.get(topic)
        if assignment is not None:
            hosts: dict[int, list[tuple[str, int]]] = {}
            for partition, replicas in assignment.partitions.items():
                for replica in replicas:
                    hosts.setdefault(replica, []).append((topic, partition))
            calls = []
            for broker, partitions in hosts.items():
                if broker not in self.live:
                    continue
                with contextlib.suppress(ValueError):
                    handle = ray.get_actor(broker_name(broker), namespace=self.namespace)
                    calls.append(handle.stop_replicas.remote(self.epoch, partitions, True))
            await asyncio.gather(*calls, return_exceptions=True)
        await self._zk(self.admin.delete_topic_znodes, topic, fence=self.fence)
        self._forget_topic(topic)
        log.info("controller %d deleted topic %s", self.broker_id, topic)

    async def _on_isr_changes(self, names: list[str]) -> None:
        if not names:
            return
        partitions = await self._zk(self.partition_states.consume_isr_change_notifications)
        for tp in partitions:
            fresh = await self._zk(self.partition_states.read_partition_state, *tp)
            if fresh is not None and tp.topic in self.assignments:
                self.states[tp] = fresh

    # ---------------------------------------------------------------- preferred leaders

    async def _check_preferred_leaders_forever(self) -> None:
        while True:
            await asyncio.sleep(self.preferred_leader_check_s)
            self.events.put_nowait(("preferred_leaders", None))

    async def _on_preferred_leaders(self, _value: Any) -> None:
        await self.elect_preferred_leaders()

    async def elect_preferred_leaders(self) -> list[TopicPartition]:
        """Give leadership back to each partition's first replica where it is in sync."""
        moved = []
        for tp, versioned in list(self.states.items()):
            state = versioned.value
            preferred = elect_preferred_leader(
                self._replicas(tp), state.leader, state.isr, set(self.live)
            )
            if preferred is None:
                continue
            new_state = PartitionState(preferred, state.leader_epoch + 1, state.isr, self.epoch)
            if await self._write_state(tp, new_state):
                moved.append(tp)
        await self._send_leader_and_isr(set(moved))
        return moved
