"""The controller: exactly one broker's, elected through `/controller`.

It watches brokers, topics and their configs, deletion requests, reassignment requests and ISR
change notifications; writes initial partition states; elects leaders from the ISR when brokers die
(unclean only when the topic allows it); shrinks the ISR of dead followers; restores preferred
leaders; moves replicas between brokers (reassignment); deletes topics; and sends LeaderAndIsr
and topic config changes, stamped with its epoch, to the brokers affected. Every write it makes
is fenced by its controller epoch, so a deposed controller can change nothing.

As in Kafka it runs inside its broker (here: on the broker actor's asyncio loop) and keeps no
state it cannot rebuild from ZooKeeper. Watch callbacks only queue events; one task handles them
in order, as Kafka's controller event thread does. The decisions are pure functions: who leads
in `elections.py`, the next reassignment step in `reassignment.py`. What the brokers are told
is built by the `ControllerBrokerRequestBatch` (`request_batch.py`); how requests reach them,
and their resends, is the `ControllerChannel`'s (`channel.py`). Partition state
changes are carried out by the `PartitionStateMachine` (`partition_states.py`), preferred leader
elections by the `PreferredLeaderElector` (`preferred_leaders.py`), reassignments by the
`Reassigner` (`reassigner.py`) and topic deletions by the `TopicDeleter` (`deletion.py`), all on
this controller's picture (`context.py`).

A step that fails (the initialization, or the handling of an event) is never just logged: the
controller rebuilds from ZooKeeper after a backoff, resigns so that another broker takes over, or
stops because it is controller no more; `recovery.py` decides which.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import ssl
import time
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

from rafka.actors.config import TopicConfig
from rafka.actors.controller import channel as channel_module
from rafka.actors.controller.broker_connections import BrokerConnections
from rafka.actors.controller.channel import ControllerChannel
from rafka.actors.controller.deletion import TopicDeleter
from rafka.actors.controller.events import (
    AssignmentChanged,
    BrokersChanged,
    ControllerEvent,
    DeletionsRequested,
    IsrChangesNotified,
    LeaderAndIsrResend,
    MetadataResync,
    PreferredLeaderCheck,
    ReassignmentCheck,
    ReassignmentsRequested,
    TopicConfigChanged,
    TopicsChanged,
)
from rafka.actors.controller.partition_states import PartitionStateMachine
from rafka.actors.controller.preferred_leaders import PreferredLeaderElector
from rafka.actors.controller.reassigner import Reassigner
from rafka.actors.controller.recovery import RecoveryPolicy, Resign, Retry, Stop
from rafka.actors.controller.request_batch import ControllerBrokerRequestBatch
from rafka.common.config import InvalidConfigError
from rafka.common.topic_partition import TopicPartition
from rafka.coordination.admin import TopicAdmin
from rafka.coordination.election import ControllerElection
from rafka.coordination.errors import (
    UnknownTopicError,
)
from rafka.coordination.models import (
    BrokerInfo,
    ControllerFence,
    PartitionState,
    TopicAssignment,
    Versioned,
)
from rafka.coordination.partition_state import PartitionStateStore
from rafka.coordination.registration import read_brokers
from rafka.coordination.store import ClusterStore
from rafka.coordination.watches import ClusterWatches

log = logging.getLogger(__name__)

class Controller:
    """The active controller; `start()` on the broker's loop, `stop()` when resigning.

    It holds the picture of the cluster and the handlers of the events that change it; its
    helpers (partition states, preferred leaders, reassignment, deletion) change the picture
    through `ControllerContext`, whose names it keeps public for them."""

    def __init__(
        self,
        store: ClusterStore,
        broker_id: int,
        fence: ControllerFence,
        namespace: str,
        *,
        election: ControllerElection,
        recovery: RecoveryPolicy,
        preferred_leader_check_s: float = 300.0,
        reassignment_check_s: float = 0.5,
        control_token: bytes = b"",
        control_ssl: ssl.SSLContext | None = None,
    ) -> None:
        self.store = store
        self.broker_id = broker_id
        self.fence = fence
        self.epoch = fence.epoch
        self.namespace = namespace
        # The election that made us controller (we resign through it) and how we recover from
        # a step that failed (`recovery.py`).
        self.election = election
        self.recovery = recovery
        self.admin = TopicAdmin(store)
        self.partition_states = PartitionStateStore(store)
        # Carry out partition state changes (`partition_states.py`), preferred leader
        # elections (`preferred_leaders.py`), reassignments (`reassigner.py`) and topic
        # deletions (`deletion.py`), on this controller's picture.
        self.partition_state_machine = PartitionStateMachine(self)
        self.preferred_leaders = PreferredLeaderElector(self, preferred_leader_check_s)
        self.reassigner = Reassigner(self, reassignment_check_s)
        self.deleter = TopicDeleter(self)
        # What the brokers are told, built from the picture (`request_batch.py`).
        self.requests = ControllerBrokerRequestBatch(self)
        # Which method handles which event: every event the controller knows, in one place.
        self._handlers: dict[type, Callable[[Any], Awaitable[None]]] = {
            BrokersChanged: self._on_brokers,
            TopicsChanged: self._on_topics,
            AssignmentChanged: self._on_assignment,
            TopicConfigChanged: self._on_topic_config,
            DeletionsRequested: self.deleter.on_deletions,
            IsrChangesNotified: self._on_isr_changes,
            PreferredLeaderCheck: self.preferred_leaders.on_preferred_leader_check,
            ReassignmentsRequested: self.reassigner.on_reassignments,
            ReassignmentCheck: self.reassigner.on_reassignment_check,
            MetadataResync: self.requests.on_metadata_resync,
            LeaderAndIsrResend: self.requests.on_leader_and_isr_resend,
        }
        self._loop = asyncio.get_running_loop()
        self._tasks: list[asyncio.Task] = []
        self._watches: list[Any] = []
        # Each topic's watches: its assignment (partitions added) and its config.
        self._topic_watches: dict[str, tuple[Any, ...]] = {}
        # How requests reach the brokers (a connection to each one's control endpoint, opened
        # with `control_token`, over `control_ssl` when the cluster's links speak TLS), and
        # what they missed (`channel.py`).
        self.channel = ControllerChannel(
            broker_id, self.epoch,
            BrokerConnections(control_token, control_ssl, channel_module.BROKER_ANSWER_TIMEOUT_S),
            lambda: self.live)
        self._forget_everything()

    def _forget_everything(self) -> None:
        """Drop the picture of the cluster and the watches that feed it: before a rebuild."""
        self._cancel_watches()
        self.live: dict[int, BrokerInfo] = {}
        self.assignments: dict[str, TopicAssignment] = {}
        self.configs: dict[str, TopicConfig] = {}
        self.raw_configs: dict[str, dict[str, str]] = {}
        self.states: dict[TopicPartition, Versioned[PartitionState]] = {}
        # Topics being deleted whose replicas are not all gone yet: a broker holding one was
        # down. As in Kafka, the deletion waits for it, its partitions lead nowhere meanwhile,
        # and the name stays taken, so a new topic cannot pick up the old one's logs.
        self.deleting: set[str] = set()
        # Events queued so far are about what the rebuild reads afresh.
        self.events: asyncio.Queue[ControllerEvent] = asyncio.Queue()
        # Reassignment: what is being moved, and the assignment versions its steps wrote (so
        # that a late watch event cannot undo them).
        self.reassigner.forget()
        self.assignment_versions: dict[str, int] = {}
        self.channel.forget()

    # ------------------------------------------------------------------------ life cycle

    def start(self) -> None:
        self._tasks = [asyncio.ensure_future(self._run()),
                       asyncio.ensure_future(self.preferred_leaders.check_forever()),
                       asyncio.ensure_future(self.reassigner.check_forever()),
                       asyncio.ensure_future(self.requests.resync_metadata_forever())]

    def stop(self) -> None:
        self._cancel_watches()
        for task in self._tasks:
            task.cancel()
        self._tasks = []
        self.channel.close()

    def _cancel_watches(self) -> None:
        topic_watches = [watch for pair in self._topic_watches.values() for watch in pair]
        for watch in [*self._watches, *topic_watches]:
            with contextlib.suppress(Exception):
                watch.cancel()
        self._watches = []
        self._topic_watches = {}

    def _queue(self, event: Callable[..., ControllerEvent]) -> Callable[..., None]:
        """A watch callback (on a kazoo thread) that queues `event(*what it is given)`."""
        def deliver(*value: Any) -> None:
            self._loop.call_soon_threadsafe(self.events.put_nowait, event(*value))

        return deliver

    async def zk(self, function: Any, *args: Any, **kwargs: Any) -> Any:
        """A blocking kazoo call, off the loop so that the broker keeps answering."""
        return await asyncio.to_thread(function, *args, **kwargs)

    async def _run(self) -> None:
        """Rebuild from ZooKeeper, then handle events one at a time, in order. A step that
        fails is retried (by rebuilding), or ends in resigning or stopping (`recovery.py`)."""
        rebuild, attempts, first_failure = True, 0, 0.0
        while True:
            step = "rebuilding from ZooKeeper" if attempts else "initializing"
            try:
                if rebuild:
                    await self._rebuild()
                    rebuild, attempts = False, 0
                event = await self.events.get()
                step = f"handling {event!r}"
                await self._handlers[type(event)](event)
                attempts = 0
            except asyncio.CancelledError:
                raise
            except Exception as error:
                attempts += 1
                if attempts == 1:
                    first_failure = time.monotonic()
                decision = self.recovery.decide(
                    error, attempts=attempts, elapsed_s=time.monotonic() - first_failure,
                    elected=self.election.fence == self.fence)
                match decision:
                    case Retry(delay_s, reason):
                        log.warning("controller %d (epoch %d) failed %s: %s; rebuilding from "
                                    "ZooKeeper in %.1f s", self.broker_id, self.epoch, step,
                                    reason, delay_s)
                        self._forget_everything()
                        rebuild = True
                        await asyncio.sleep(delay_s)
                    case Resign(hold_off_s, reason):
                        # The traceback too: an unexpected failure is a fault to look into.
                        log.warning("controller %d (epoch %d) failed %s: %s; resigning so that "
                                    "another broker takes over", self.broker_id, self.epoch,
                                    step, reason, exc_info=True)
                        self._end()
                        self.election.resign(self.fence, hold_off_s)
                        return
                    case Stop(reason):
                        log.warning("controller %d (epoch %d) stops, %s: %s", self.broker_id,
                                    self.epoch, step, reason)
                        self._end()
                        return

    def _end(self) -> None:
        """Stop the timers and the watches from `_run`, which returns next; the broker drops
        this controller when the election tells it that it is controller no more."""
        self._forget_everything()
        current = asyncio.current_task()
        for task in self._tasks:
            if task is not current:
                task.cancel()

    async def _rebuild(self) -> None:
        """Everything from ZooKeeper (`_initialize`), then the watches that keep it current.

        The watches are set after the reads: each delivers its current value first, which the
        handlers compare with what was read, so nothing that changed in between is missed.
        """
        self._forget_everything()
        await self._initialize()
        watches = ClusterWatches(self.store)
        self._watches = [
            watches.watch_brokers(self._queue(BrokersChanged)),
            watches.watch_topics(self._queue(TopicsChanged)),
            watches.watch_topic_deletions(self._queue(DeletionsRequested)),
            watches.watch_isr_change_notifications(self._queue(IsrChangesNotified)),
            watches.watch_partition_reassignment(self._queue(ReassignmentsRequested)),
        ]
        log.info("controller %d (epoch %d) initialized: %d live brokers, %d topics, %d "
                 "partitions", self.broker_id, self.epoch, len(self.live), len(self.assignments),
                 len(self.states))

    async def _initialize(self) -> None:
        """Rebuild everything from ZooKeeper, bring every partition online, tell every broker."""
        self.live = await self.zk(read_brokers, self.store)
        for topic in await self.zk(self.admin.list_topics):
            await self.load_topic(topic)
        self.deleting = set(await self.zk(self.admin.topics_marked_for_deletion))
        state_machine = self.partition_state_machine
        await state_machine.bring_online(set(self.states) | self.partitions_without_state())
        # Replicas on brokers that died while there was no controller leave the ISR now, as
        # Kafka's controller takes them offline when it starts.
        for tp, versioned in list(self.states.items()):
            dead = set(versioned.value.isr) - set(self.live)
            if dead and versioned.value.leader in self.live:
                await state_machine.shrink_isr(tp, dead)
        await self.send_leader_and_isr(set(self.states), brokers=set(self.live),
                                       update_metadata=False)
        self.update_metadata()  # every broker: the whole picture, from its controller
        for topic in sorted(self.deleting):
            await self.deleter.delete_topic(topic)

    async def load_topic(self, topic: str) -> None:
        try:
            description = await self.zk(self.admin.describe_topic, topic)
        except UnknownTopicError:
            return
        if topic not in self._topic_watches:  # its partition count may grow, its config change
            watches = ClusterWatches(self.store)
            assignment_changed = self._queue(AssignmentChanged)
            config_changed = self._queue(TopicConfigChanged)
            self._topic_watches[topic] = (
                watches.watch_topic_assignment(topic, functools.partial(assignment_changed, topic)),
                watches.watch_topic_config(topic, functools.partial(config_changed, topic)),
            )
        assignment = description.assignment.value
        if assignment.topic_id is None:  # created before topics had ids (KIP-516)
            assignment = (await self.zk(self.admin.assign_topic_id, topic)).value
        self.assignments[topic] = assignment
        self.raw_configs[topic] = dict(description.config)
        self.configs[topic] = TopicConfig.from_dict(description.config)
        for partition, state in description.states.items():
            if state is not None:
                self.states[TopicPartition(topic, partition)] = state

    def partitions_without_state(self) -> set[TopicPartition]:
        return {
            TopicPartition(topic, partition)
            for topic, assignment in self.assignments.items()
            for partition in assignment.partitions
            if TopicPartition(topic, partition) not in self.states
        }

    def replicas(self, tp: TopicPartition) -> tuple[int, ...]:
        return self.assignments[tp.topic].partitions[tp.partition]

    async def send_leader_and_isr(
        self, partitions: set[TopicPartition], brokers: set[int] | None = None, *,
        update_metadata: bool = True, wait: bool = True,
    ) -> None:
        """`ControllerBrokerRequestBatch.send_leader_and_isr`, for the helpers and handlers."""
        await self.requests.send_leader_and_isr(partitions, brokers,
                                                update_metadata=update_metadata, wait=wait)

    def update_metadata(self, partitions: set[TopicPartition] | None = None,
                        deleted: tuple[str, ...] = ()) -> None:
        """`ControllerBrokerRequestBatch.update_metadata`, for the helpers and handlers."""
        self.requests.update_metadata(partitions, deleted)

    # --------------------------------------------------------------------------- events

    async def _on_brokers(self, event: BrokersChanged) -> None:
        brokers = event.brokers
        old, self.live = self.live, dict(brokers)
        # A new broker epoch is a bounce: the broker lost what it led, whatever the ids say.
        dead = {b for b, info in old.items() if b not in brokers or brokers[b].epoch != info.epoch}
        born = {b for b, info in brokers.items() if b not in old or old[b].epoch != info.epoch}
        # Both at once: its old registration gone and its new one made before this read. The
        # elections below count it as dead (`elect_leader`).
        bounced = dead & born
        if not dead and not born:
            if brokers != old:  # a registration changed (a new advertised listener)
                self.update_metadata(set())
            return
        for broker in dead | born:  # a broker registered anew may be another actor
            self.channel.broker_registered_anew(broker)  # a new one is told everything
        log.info("controller %d: brokers %s; dead %s, new %s, bounced %s", self.broker_id,
                 sorted(brokers), sorted(dead - bounced), sorted(born - bounced), sorted(bounced))
        # Each partition's write is conditional on its own version, so they go to ZooKeeper
        # together (kazoo pipelines them on the session): a broker that led hundreds of
        # partitions costs a few round trips, not hundreds in a row.
        to_elect, to_shrink = [], []
        for tp, versioned in list(self.states.items()):
            if tp.topic in self.deleting:
                continue
            state = versioned.value
            if state.leader in dead or state.leader not in self.live:
                to_elect.append(tp)
            elif dead & set(state.isr):
                to_shrink.append(tp)
        state_machine = self.partition_state_machine
        outcomes = await asyncio.gather(*(state_machine.elect(tp, bounced=bounced)
                                          for tp in to_elect),
                                        *(state_machine.shrink_isr(tp, dead) for tp in to_shrink))
        changed = {tp for tp, moved in zip(to_elect + to_shrink, outcomes, strict=True) if moved}
        changed |= await state_machine.bring_online(self.partitions_without_state())
        # New brokers learn every partition they hold, to lead or to follow; every broker,
        # the brokers now and what changed (a new one, everything).
        self.channel.needs_everything(born)
        await self.send_leader_and_isr(changed)
        hosted = {tp for tp in self.states if born & set(self.replicas(tp))}
        await self.send_leader_and_isr(hosted - changed, brokers=born, update_metadata=False)
        if not changed:
            self.update_metadata(set())
        # A deletion that waited for a broker goes on now that it is back.
        waiting = [topic for topic in self.deleting if topic in self.assignments]
        for topic in sorted(t for t in waiting if born & self.assignments[t].brokers):
            await self.deleter.delete_topic(topic)

    async def _on_topics(self, event: TopicsChanged) -> None:
        topics = event.topics
        for topic in set(self.assignments) - topics:
            self.forget_topic(topic)
        added = topics - set(self.assignments)
        for topic in sorted(added):
            await self.load_topic(topic)
        if added:
            partitions = {tp for tp in self.partitions_without_state() if tp.topic in added}
            partitions |= {tp for tp in self.states if tp.topic in added}
            changed = await self.partition_state_machine.bring_online(partitions)
            await self.send_leader_and_isr(changed | {tp for tp in partitions
                                                       if tp in self.states})

    def forget_topic(self, topic: str) -> None:
        for watch in self._topic_watches.pop(topic, ()):
            watch.cancel()
        self.deleting.discard(topic)
        self.assignments.pop(topic, None)
        self.assignment_versions.pop(topic, None)
        self.configs.pop(topic, None)
        self.raw_configs.pop(topic, None)
        for tp in [tp for tp in self.states if tp.topic == topic]:
            del self.states[tp]

    async def _on_assignment(self, event: AssignmentChanged) -> None:
        """A topic's assignment changed: partitions were added (Kafka never removes any)."""
        topic, versioned = event.topic, event.assignment
        if versioned is None or topic not in self.assignments:
            return
        if versioned.version < self.assignment_versions.get(topic, -1):
            return  # older than what a reassignment step wrote since: already applied
        if versioned.value.partitions == self.assignments[topic].partitions:
            return
        self.assignments[topic] = versioned.value
        added = {tp for tp in self.partitions_without_state() if tp.topic == topic}
        log.info("controller %d: %s grows to %d partitions", self.broker_id, topic,
                 versioned.value.partition_count)
        await self.send_leader_and_isr(await self.partition_state_machine.bring_online(added))

    async def _on_topic_config(self, event: TopicConfigChanged) -> None:
        """A topic's config changed (`Cluster.alter_topic_config`, `rafka topics alter`): the
        brokers holding its replicas apply it to their logs now, as Kafka's brokers do on a
        config change notification. A broker down meanwhile gets it with its next LeaderAndIsr,
        which carries the config, and so does one that did not apply it (the channel sends
        it LeaderAndIsr again)."""
        topic = event.topic
        if event.config is None or topic not in self.assignments:
            return  # the topic is being deleted
        raw = dict(event.config.value)
        if raw == self.raw_configs.get(topic):
            return
        try:
            config = TopicConfig.from_dict(raw)
        except InvalidConfigError as error:
            # Written to ZooKeeper past rafka's checks: keep what the replicas have.
            log.warning("controller %d ignores the config of %s: %s", self.broker_id, topic,
                        error)
            return
        self.raw_configs[topic], self.configs[topic] = raw, config
        partitions_of: dict[int, set[TopicPartition]] = {}
        for partition, replicas in self.assignments[topic].partitions.items():
            for broker in replicas:
                if broker in self.live:
                    partitions_of.setdefault(broker, set()).add(TopicPartition(topic, partition))
        await self.channel.update_topic_config(partitions_of, topic, raw)
        log.info("controller %d: %s config now %s", self.broker_id, topic, raw)

    async def _on_isr_changes(self, event: IsrChangesNotified) -> None:
        if not event.notifications:
            return
        partitions = await self.zk(self.partition_states.consume_isr_change_notifications)
        for tp in partitions:
            fresh = await self.zk(self.partition_states.read_partition_state, *tp)
            if fresh is not None and tp.topic in self.assignments:
                self.states[tp] = fresh
        self.update_metadata(set(partitions))
        # A new replica joining the ISR is what a reassignment waits for.
        reassigning = self.reassigner.reassigning
        if reassigning and set(partitions) & set(reassigning):
            await self.reassigner.continue_reassignments()

    async def elect_preferred_leaders(
        self, partitions: Iterable[TopicPartition] | None = None,
    ) -> dict[TopicPartition, int]:
        """Kafka's ElectLeaders, preferred: what happened to each partition
        (`PreferredLeaderElector.elect`)."""
        return await self.preferred_leaders.elect(partitions)
