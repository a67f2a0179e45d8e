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
in `elections.py`, the next reassignment step in `reassignment.py`.

A step that fails (the initialization, or the handling of an event) is never just logged: the
controller rebuilds from ZooKeeper after a backoff, resigns so that another broker takes over, or
stops because it is controller no more; `recovery.py` decides which.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import time
from collections.abc import Awaitable, Callable, Iterable, Set
from typing import Any

from rafka.actors.broker_handles import BrokerHandles
from rafka.actors.config import TopicConfig
from rafka.actors.controller.elections import (
    elect_leader,
    preferred_leader_election,
    remove_from_isr,
)
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
from rafka.actors.controller.reassignment import (
    AddReplicas,
    CompleteReassignment,
    ReassignmentDone,
    ReorderReplicas,
    WaitForReplicas,
    next_reassignment_step,
)
from rafka.actors.controller.recovery import RecoveryPolicy, Resign, Retry, Stop
from rafka.actors.errors import ErrorCode
from rafka.actors.messages import PartitionMetadata, UpdateMetadataRequest
from rafka.common.config import InvalidConfigError
from rafka.common.errors import RafkaError
from rafka.common.topic_partition import TopicPartition
from rafka.coordination.admin import TopicAdmin, parse_reassignment
from rafka.coordination.election import ControllerElection
from rafka.coordination.errors import (
    ControllerMovedError,
    CoordinationError,
    StaleVersionError,
    UnknownTopicError,
)
from rafka.coordination.layout import REASSIGN_PARTITIONS
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

# How long the controller waits for the brokers' answers to one of its requests (LeaderAndIsr,
# StopReplica, a config change). A broker cut off from the network would otherwise hold the
# controller's one event task until Ray gave up on it, which can be never, and no partition
# would be elected meanwhile. Past it the controller goes on; the request is still delivered if
# the broker comes back (Ray keeps one caller's calls to an actor in order), and a broker that
# registers anew is told everything again.
BROKER_ANSWER_TIMEOUT_S = 5.0
# How often brokers an UpdateMetadata did not reach are sent everything again, and brokers
# that did not apply a LeaderAndIsr are sent it again.
METADATA_RESYNC_S = 2.0


class BrokerDidNotAnswer(RafkaError, TimeoutError):
    """A broker did not answer the controller within `BROKER_ANSWER_TIMEOUT_S`."""


async def answers_of(calls: dict[int, Awaitable[Any]], what: str) -> dict[int, Any]:
    """Each broker's answer to `calls` (its exception if it raised), waiting at most
    `BROKER_ANSWER_TIMEOUT_S`: a broker still silent then answers `BrokerDidNotAnswer`, and its
    call goes on without us."""
    tasks = {broker: asyncio.ensure_future(call) for broker, call in calls.items()}
    if not tasks:
        return {}
    await asyncio.wait(tasks.values(), timeout=BROKER_ANSWER_TIMEOUT_S)
    answers: dict[int, Any] = {}
    for broker, task in tasks.items():
        if not task.done():
            # Not cancelled: the request stays queued for the broker, as in Kafka's controller
            # channel, and is dropped with the broker if it never comes back.
            task.add_done_callback(_retrieve_late_answer)
            answers[broker] = BrokerDidNotAnswer(
                f"broker {broker} did not answer {what} within {BROKER_ANSWER_TIMEOUT_S:g} s")
        else:
            answers[broker] = task.exception() or task.result()
    return answers


def _retrieve_late_answer(task: asyncio.Future) -> None:
    # Read, so that asyncio does not report an exception nobody retrieved.
    if not task.cancelled() and task.exception() is not None:
        log.info("a late answer to the controller: %r", task.exception())


class Controller:
    """The active controller; `start()` on the broker's loop, `stop()` when resigning."""

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
        broker_handles: BrokerHandles | None = None,
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
        self.preferred_leader_check_s = preferred_leader_check_s
        self.reassignment_check_s = reassignment_check_s
        self.admin = TopicAdmin(store)
        self.partition_states = PartitionStateStore(store)
        # Which method handles which event: every event the controller knows, in one place.
        self._handlers: dict[type, Callable[[Any], Awaitable[None]]] = {
            BrokersChanged: self._on_brokers,
            TopicsChanged: self._on_topics,
            AssignmentChanged: self._on_assignment,
            TopicConfigChanged: self._on_topic_config,
            DeletionsRequested: self._on_deletions,
            IsrChangesNotified: self._on_isr_changes,
            PreferredLeaderCheck: self._on_preferred_leader_check,
            ReassignmentsRequested: self._on_reassignments,
            ReassignmentCheck: self._on_reassignment_check,
            MetadataResync: self._on_metadata_resync,
            LeaderAndIsrResend: self._on_leader_and_isr_resend,
        }
        self._loop = asyncio.get_running_loop()
        self._tasks: list[asyncio.Task] = []
        self._watches: list[Any] = []
        # Each topic's watches: its assignment (partitions added) and its config.
        self._topic_watches: dict[str, tuple[Any, ...]] = {}
        # Broker actor handles, kept warm by the broker hosting this controller: looking one
        # up asks Ray's GCS, which may be down (its head restarting) while brokers and
        # ZooKeeper are fine, and the controller must still move leaders then.
        self.broker_handles = broker_handles or BrokerHandles(namespace)
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
        # Reassignment: the target replicas of each partition being moved, the partitions whose
        # new replicas this controller has announced (a new controller announces them again),
        # and the assignment versions it wrote (so that a late watch event cannot undo them).
        self.reassigning: dict[TopicPartition, tuple[int, ...]] = {}
        self._reassignment_announced: set[TopicPartition] = set()
        self._reassignment_check_queued = False
        self._assignment_versions: dict[str, int] = {}
        # Brokers an UpdateMetadata did not reach: they are sent everything next.
        self._metadata_behind: set[int] = set()
        # The partitions whose LeaderAndIsr each broker did not apply (its actor restarted
        # under the call, a host failed, it was not registered yet): sent again until applied,
        # as Kafka's controller channel retries a request until its broker answers or leaves.
        self._leader_and_isr_behind: dict[int, set[TopicPartition]] = {}

    # ------------------------------------------------------------------------ life cycle

    def start(self) -> None:
        self._tasks = [asyncio.ensure_future(self._run()),
                       asyncio.ensure_future(self._check_preferred_leaders_forever()),
                       asyncio.ensure_future(self._check_reassignments_forever()),
                       asyncio.ensure_future(self._resync_metadata_forever())]

    def stop(self) -> None:
        self._cancel_watches()
        for task in self._tasks:
            task.cancel()
        self._tasks = []

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

    async def _zk(self, function: Any, *args: Any, **kwargs: Any) -> Any:
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
        self.live = await self._zk(read_brokers, self.store)
        for topic in await self._zk(self.admin.list_topics):
            await self._load_topic(topic)
        self.deleting = set(await self._zk(self.admin.topics_marked_for_deletion))
        await self._bring_online(set(self.states) | self._partitions_without_state())
        # Replicas on brokers that died while there was no controller leave the ISR now, as
        # Kafka's controller takes them offline when it starts.
        for tp, versioned in list(self.states.items()):
            dead = set(versioned.value.isr) - set(self.live)
            if dead and versioned.value.leader in self.live:
                await self._shrink_isr(tp, dead)
        await self._send_leader_and_isr(set(self.states), brokers=set(self.live),
                                        update_metadata=False)
        self._update_metadata()  # every broker: the whole picture, from its controller
        for topic in sorted(self.deleting):
            await self._delete_topic(topic)

    async def _load_topic(self, topic: str) -> None:
        try:
            description = await self._zk(self.admin.describe_topic, topic)
        except UnknownTopicError:
            return
        if topic not in self._topic_watches:  # its partition count may grow, its config change
            watches = ClusterWatches(self.store)
            assignment_changed = self._queue(AssignmentChanged)
            config_changed = self._queue(TopicConfigChanged)
            self._topic_watches[topic] = (
                watches.watch_topic_assignment(
                    topic, lambda versioned, topic=topic: assignment_changed(topic, versioned)),
                watches.watch_topic_config(
                    topic, lambda versioned, topic=topic: config_changed(topic, versioned)),
            )
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

    async def _elect(self, tp: TopicPartition, attempts: int = 3,
                     bounced: Set[int] = frozenset()) -> bool:
        """Offline-partition election for one partition; True if its state changed.

        A leader that `bounced` (see `elect_leader`) is a new incarnation: even chosen again,
        it leads under a new leader epoch."""
        for _attempt in range(attempts):
            state = self.states[tp].value
            config = self.configs.get(tp.topic, TopicConfig())
            election = elect_leader(
                self._replicas(tp), state.isr, set(self.live),
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
        self, partitions: set[TopicPartition], brokers: set[int] | None = None, *,
        update_metadata: bool = True, wait: bool = True,
    ) -> None:
        """LeaderAndIsr for `partitions` to their live replicas (or only to `brokers`), and
        with it (unless told not to) UpdateMetadata of them to every live broker, as Kafka's
        controller sends them together. Waits (unless told not to) for the answers, at most
        `BROKER_ANSWER_TIMEOUT_S`; a broker that does not apply its part, even later, is
        sent it again (`_leader_and_isr_answered`)."""
        requests: dict[int, list[dict[str, Any]]] = {}
        for tp in partitions:
            if tp not in self.states or tp.topic not in self.assignments or (
                    tp.topic in self.deleting):
                continue  # a topic being deleted: its replicas must not come back
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
        calls = {}
        for broker, batch in requests.items():
            sent = {TopicPartition(r["topic"], r["partition"]) for r in batch}
            handle = self.broker_handles.get(broker)
            if handle is None:
                self._leader_and_isr_behind.setdefault(broker, set()).update(sent)
                continue
            calls[broker] = asyncio.ensure_future(handle.leader_and_isr.remote(self.epoch, batch))
            calls[broker].add_done_callback(functools.partial(
                self._leader_and_isr_answered, broker, self.live[broker].epoch, sent))
        if update_metadata and partitions:
            self._update_metadata(partitions)
        if not wait:
            return
        for reply in (await answers_of(calls, "LeaderAndIsr")).values():
            if isinstance(reply, BaseException) or reply.get("error") or reply.get("failed"):
                log.warning("LeaderAndIsr not applied everywhere: %r", reply)

    def _leader_and_isr_answered(self, broker: int, broker_epoch: int | None,
                                 sent: set[TopicPartition], call: asyncio.Future) -> None:
        """A broker's answer to LeaderAndIsr, whenever it comes: what it did not apply is
        sent again at the next resend, unless the broker registered anew meanwhile (it is
        then sent everything it holds) or the answer says this controller is stale."""
        if call.cancelled():
            return
        failure = call.exception()
        reply = None if failure is not None else call.result()
        if reply is not None and not reply.get("error") and not reply.get("failed"):
            return
        if reply is not None and reply.get("error") == ErrorCode.STALE_CONTROLLER_EPOCH:
            return
        info = self.live.get(broker)
        if info is None or info.epoch != broker_epoch:
            return
        log.info("controller %d: broker %d did not apply LeaderAndIsr of %d partitions (%r): "
                 "sending it again", self.broker_id, broker, len(sent), failure or reply)
        self._leader_and_isr_behind.setdefault(broker, set()).update(sent)

    async def _on_leader_and_isr_resend(self, _event: LeaderAndIsrResend) -> None:
        behind, self._leader_and_isr_behind = self._leader_and_isr_behind, {}
        for broker, partitions in sorted(behind.items()):
            if broker in self.live:
                # Not waited for: a broker that still does not answer must not hold up the
                # controller's events; its failure brings it back here.
                await self._send_leader_and_isr(partitions & set(self.states), {broker},
                                                update_metadata=False, wait=False)

    def _update_metadata(self, partitions: set[TopicPartition] | None = None,
                         deleted: tuple[str, ...] = ()) -> None:
        """UpdateMetadata to every live broker: `partitions` (everything for None) and the
        topics `deleted`; a broker a previous one did not reach gets everything. Their metadata
        caches answer clients, so no client request reads ZooKeeper.

        Sent, not waited for: a broker that does not answer (cut off, not yet expired) must
        not hold the controller up. Ray runs one caller's calls to an actor in order; a call
        that fails marks its broker for everything at the next resync."""
        brokers = {broker: handle for broker in sorted(self.live)
                   if (handle := self.broker_handles.get(broker)) is not None}
        if not brokers:
            return
        behind = self._metadata_behind & set(brokers) if partitions is not None else set(brokers)
        full = self._metadata_message(None) if behind else None
        changed = full if partitions is None else self._metadata_message(partitions, deleted)
        self._metadata_behind -= set(brokers)
        for broker, handle in brokers.items():
            call = asyncio.ensure_future(
                handle.update_metadata.remote(full if broker in behind else changed))
            call.add_done_callback(functools.partial(self._metadata_answered, broker))

    def _metadata_answered(self, broker: int, call: asyncio.Future) -> None:
        failure = None if call.cancelled() else call.exception()
        if failure is None and not call.cancelled() and not call.result().get("error"):
            return
        log.warning("controller %d: UpdateMetadata not applied by broker %d: %r",
                    self.broker_id, broker, failure or call)
        self._metadata_behind.add(broker)

    def _metadata_message(self, partitions: set[TopicPartition] | None,
                          deleted: tuple[str, ...] = ()) -> UpdateMetadataRequest:
        """What UpdateMetadata says: `partitions` (every partition when None, which replaces
        what a broker knew) and the live brokers. Topics being deleted are left out."""
        wanted = set(self.states) if partitions is None else partitions
        return UpdateMetadataRequest(
            controller_id=self.broker_id, controller_epoch=self.epoch, brokers=dict(self.live),
            partitions={tp: PartitionMetadata(
                versioned.value.leader, versioned.value.leader_epoch, tuple(versioned.value.isr),
                self._replicas(tp), versioned.version)
                for tp in wanted if (versioned := self.states.get(tp)) is not None
                and tp.topic in self.assignments and tp.topic not in self.deleting},
            deleted_topics=tuple(deleted) if partitions is not None else (),
            full=partitions is None)

    async def _resync_metadata_forever(self) -> None:
        while True:
            await asyncio.sleep(METADATA_RESYNC_S)
            if self._metadata_behind:
                self.events.put_nowait(MetadataResync())
            if self._leader_and_isr_behind:
                self.events.put_nowait(LeaderAndIsrResend())

    async def _on_metadata_resync(self, _event: MetadataResync) -> None:
        self._metadata_behind &= set(self.live)
        if self._metadata_behind:
            self._update_metadata(set())

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
                self._update_metadata(set())
            return
        for broker in dead | born:  # a broker registered anew may be another actor
            self.broker_handles.drop(broker)
            self._leader_and_isr_behind.pop(broker, None)  # a new one is told everything
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
        outcomes = await asyncio.gather(*(self._elect(tp, bounced=bounced) for tp in to_elect),
                                        *(self._shrink_isr(tp, dead) for tp in to_shrink))
        changed = {tp for tp, moved in zip(to_elect + to_shrink, outcomes, strict=True) if moved}
        changed |= await self._bring_online(self._partitions_without_state())
        # New brokers learn every partition they hold, to lead or to follow; every broker,
        # the brokers now and what changed (a new one, everything).
        self._metadata_behind |= born
        await self._send_leader_and_isr(changed)
        hosted = {tp for tp in self.states if born & set(self._replicas(tp))}
        await self._send_leader_and_isr(hosted - changed, brokers=born, update_metadata=False)
        if not changed:
            self._update_metadata(set())
        # A deletion that waited for a broker goes on now that it is back.
        waiting = [topic for topic in self.deleting if topic in self.assignments]
        for topic in sorted(t for t in waiting if born & self.assignments[t].brokers):
            await self._delete_topic(topic)

    async def _on_topics(self, event: TopicsChanged) -> None:
        topics = event.topics
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
        for watch in self._topic_watches.pop(topic, ()):
            watch.cancel()
        self.deleting.discard(topic)
        self.assignments.pop(topic, None)
        self._assignment_versions.pop(topic, None)
        self.configs.pop(topic, None)
        self.raw_configs.pop(topic, None)
        for tp in [tp for tp in self.states if tp.topic == topic]:
            del self.states[tp]

    async def _on_assignment(self, event: AssignmentChanged) -> None:
        """A topic's assignment changed: partitions were added (Kafka never removes any)."""
        topic, versioned = event.topic, event.assignment
        if versioned is None or topic not in self.assignments:
            return
        if versioned.version < self._assignment_versions.get(topic, -1):
            return  # older than what a reassignment step wrote since: already applied
        if versioned.value.partitions == self.assignments[topic].partitions:
            return
        self.assignments[topic] = versioned.value
        added = {tp for tp in self._partitions_without_state() if tp.topic == topic}
        log.info("controller %d: %s grows to %d partitions", self.broker_id, topic,
                 versioned.value.partition_count)
        await self._send_leader_and_isr(await self._bring_online(added))

    async def _on_topic_config(self, event: TopicConfigChanged) -> None:
        """A topic's config changed (`Cluster.alter_topic_config`, `rafka topics alter`): the
        brokers holding its replicas apply it to their logs now, as Kafka's brokers do on a
        config change notification. A broker down meanwhile gets it with its next LeaderAndIsr,
        which carries the config."""
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
        brokers = self.assignments[topic].brokers & set(self.live)
        calls = {}
        for broker in sorted(brokers):
            handle = self.broker_handles.get(broker)
            if handle is not None:
                calls[broker] = handle.update_topic_config.remote(self.epoch, topic, raw)
        for reply in (await answers_of(calls, f"the config of {topic}")).values():
            if isinstance(reply, BaseException) or reply.get("error") or reply.get("failed"):
                log.warning("the config of %s not applied everywhere: %r", topic, reply)
        log.info("controller %d: %s config now %s", self.broker_id, topic, raw)

    async def _on_deletions(self, event: DeletionsRequested) -> None:
        topics = event.topics
        for topic in sorted(topics):
            await self._delete_topic(topic)

    async def _delete_topic(self, topic: str) -> None:
        """Delete the replicas of `topic` on the live brokers; once none is left anywhere (its
        brokers may have been down: Kafka's replicas ineligible for deletion), its znodes."""
        self.deleting.add(topic)
        assignment = self.assignments.get(topic)
        if assignment is not None:
            hosts: dict[int, list[tuple[str, int]]] = {}
            for partition, replicas in assignment.partitions.items():
                for replica in replicas:
                    hosts.setdefault(replica, []).append((topic, partition))
            calls = {}
            for broker, partitions in hosts.items():
                if broker not in self.live:
                    continue
                handle = self.broker_handles.get(broker)
                if handle is not None:
                    calls[broker] = handle.stop_replicas.remote(self.epoch, partitions, True)
            silent = {broker for broker, reply in
                      (await answers_of(calls, f"StopReplica of {topic}")).items()
                      if isinstance(reply, BrokerDidNotAnswer)}
            # A broker that did not answer may still hold its replicas: as one that is down,
            # the deletion waits for it (and goes on when it registers again).
            waiting_for = sorted((set(hosts) - set(self.live)) | silent)
            if waiting_for:
                log.warning("controller %d: deleting topic %s waits for brokers %s, which hold "
                            "replicas of it", self.broker_id, topic, waiting_for)
                return
        await self._zk(self.admin.delete_topic_znodes, topic, fence=self.fence)
        self._forget_topic(topic)
        self._update_metadata(set(), deleted=(topic,))
        log.info("controller %d deleted topic %s", self.broker_id, topic)

    async def _on_isr_changes(self, event: IsrChangesNotified) -> None:
        if not event.notifications:
            return
        partitions = await self._zk(self.partition_states.consume_isr_change_notifications)
        for tp in partitions:
            fresh = await self._zk(self.partition_states.read_partition_state, *tp)
            if fresh is not None and tp.topic in self.assignments:
                self.states[tp] = fresh
        self._update_metadata(set(partitions))
        # A new replica joining the ISR is what a reassignment waits for.
        if self.reassigning and set(partitions) & set(self.reassigning):
            await self._continue_reassignments()

    # ---------------------------------------------------------------- preferred leaders

    async def _check_preferred_leaders_forever(self) -> None:
        while True:
            await asyncio.sleep(self.preferred_leader_check_s)
            self.events.put_nowait(PreferredLeaderCheck())

    async def _on_preferred_leader_check(self, _event: PreferredLeaderCheck) -> None:
        await self.elect_preferred_leaders()

    async def elect_preferred_leaders(
        self, partitions: Iterable[TopicPartition] | None = None,
    ) -> dict[TopicPartition, int]:
        """Give leadership back to the first replica of each of `partitions` (None: every
        partition) where it is in sync; what happened to each, as Kafka's ElectLeaders answers
        it: NONE where it moved, else why not (`preferred_leader_election`, and
        UNKNOWN_TOPIC_OR_PARTITION)."""
        wanted = None if partitions is None else set(partitions)
        # Leaders change their ISR themselves and the notification may not have reached us:
        # decide on what ZooKeeper holds now (one pipelined read per topic).
        for topic, assignment in list(self.assignments.items()):
            if wanted is not None and all(tp.topic != topic for tp in wanted):
                continue
            fresh = await self._zk(self.partition_states.read_partition_states, topic,
                                   list(assignment.partitions))
            for partition, versioned in fresh.items():
                tp = TopicPartition(topic, partition)
                if versioned is not None and tp in self.states and (
                        versioned.version > self.states[tp].version):
                    self.states[tp] = versioned
        outcomes: dict[TopicPartition, int] = {}
        for tp in wanted if wanted is not None else list(self.states):
            outcomes[tp] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            # A stale write means the leader changed the ISR meanwhile (its notification may
            # not have reached us yet): decide again on what ZooKeeper holds now.
            for _attempt in range(3):
                if tp not in self.states or tp.topic in self.deleting:
                    break  # unknown, or its topic went meanwhile
                state = self.states[tp].value
                preferred, outcomes[tp] = preferred_leader_election(
                    self._replicas(tp), state.leader, state.isr, set(self.live)
                )
                if preferred is None:
                    break
                new_state = PartitionState(preferred, state.leader_epoch + 1, state.isr,
                                           self.epoch)
                if await self._write_state(tp, new_state):
                    break
                outcomes[tp] = ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE  # if no try succeeds
        await self._send_leader_and_isr({tp for tp, outcome in outcomes.items() if outcome == 0})
        return outcomes

    # ---------------------------------------------------------------------- reassignment
    #
    # The steps, and the decision of which comes next, are in `reassignment.py`; here they are
    # carried out. Waiting never blocks the event loop: steps are re-checked on ISR
    # change notifications and every `reassignment_check_s`.

    async def _on_reassignments(self, event: ReassignmentsRequested) -> None:
        versioned = event.request
        if versioned is None:
            self.reassigning = {}
            self._reassignment_announced.clear()
            return
        try:
            targets = parse_reassignment(versioned.value)
        except Exception as error:  # a malformed request must not wedge the controller
            log.error("controller %d: ignoring malformed reassignment request: %s",
                      self.broker_id, error)
            try:
                await self._zk(self.store.delete, REASSIGN_PARTITIONS, version=versioned.version)
            except CoordinationError as cleanup_error:  # the next request replaces it anyway
                log.warning("controller %d: could not delete the malformed request: %s",
                            self.broker_id, cleanup_error)
            return
        self.reassigning = targets
        self._reassignment_announced &= set(targets)
        log.info("controller %d: reassigning %s", self.broker_id,
                 {f"{tp.topic}-{tp.partition}": list(r) for tp, r in targets.items()})
        await self._continue_reassignments()

    async def _check_reassignments_forever(self) -> None:
        while True:
            await asyncio.sleep(self.reassignment_check_s)
            if self.reassigning and not self._reassignment_check_queued:
                self._reassignment_check_queued = True
                self.events.put_nowait(ReassignmentCheck())

    async def _on_reassignment_check(self, _event: ReassignmentCheck) -> None:
        self._reassignment_check_queued = False
        await self._continue_reassignments()

    async def _continue_reassignments(self) -> None:
        done = []
        for tp, target in sorted(self.reassigning.items()):
            try:
                if await self._reassign_partition(tp, target):
                    done.append(tp)
            except ControllerMovedError:
                raise
            except Exception:
                log.exception("controller %d: reassigning %s-%d failed; retrying", self.broker_id,
                              tp.topic, tp.partition)
        if done:
            left = await self._zk(self.admin.complete_reassignment, done, fence=self.fence)
            self.reassigning = dict(left)
            self._reassignment_announced -= set(done)
            log.info("controller %d: reassignment of %s done", self.broker_id,
                     [f"{tp.topic}-{tp.partition}" for tp in done])

    async def _reassign_partition(self, tp: TopicPartition, target: tuple[int, ...]) -> bool:
        """Take one partition one step further; True once it is done (or moot)."""
        assignment = self.assignments.get(tp.topic)
        if assignment is None or tp.partition not in assignment.partitions:
            return True  # topic deleted meanwhile: nothing left to move
        # The leader writes ISR changes itself: read what is there now, not our cached copy.
        fresh = await self._zk(self.partition_states.read_partition_state, *tp)
        if fresh is None:
            return False  # not online yet: its state comes first
        self.states[tp] = fresh
        current = self._replicas(tp)
        step = next_reassignment_step(current, target, fresh.value, set(self.live),
                                      announced=tp in self._reassignment_announced,
                                      controller_epoch=self.epoch)
        match step:
            case ReassignmentDone():
                return True
            case ReorderReplicas(replicas):
                await self._write_replicas(tp, replicas)
                await self._send_leader_and_isr({tp})
                return True
            case AddReplicas(replicas, state):
                if replicas != current:
                    await self._write_replicas(tp, replicas)
                if not await self._write_state(tp, state):
                    return False  # the leader changed the ISR meanwhile: again at the next check
                self._reassignment_announced.add(tp)
                log.info("%s-%d: replicas %s -> %s, waiting for %s to catch up", tp.topic,
                         tp.partition, list(current), list(replicas),
                         sorted(set(target) - set(state.isr)))
                await self._send_leader_and_isr({tp})
                return False
            case WaitForReplicas():
                return False
            case CompleteReassignment(state, leaving):
                if not await self._write_state(tp, state):
                    return False
                await self._write_replicas(tp, target)
                log.info("%s-%d: replicas %s, leader %d at epoch %d, ISR %s; %s leave", tp.topic,
                         tp.partition, list(target), state.leader, state.leader_epoch,
                         list(state.isr), list(leaving))
                await self._send_leader_and_isr({tp})
                await self._stop_replicas(tp, list(leaving), delete=True)
                return True
        raise AssertionError(f"unknown reassignment step {step!r}")

    async def _write_replicas(self, tp: TopicPartition, replicas: tuple[int, ...]) -> None:
        written = await self._zk(self.admin.write_partition_replicas, tp.topic, tp.partition,
                                 replicas, fence=self.fence)
        self.assignments[tp.topic] = written.value
        self._assignment_versions[tp.topic] = written.version

    async def _stop_replicas(self, tp: TopicPartition, brokers: list[int], *, delete: bool) -> None:
        """StopReplica to `brokers` for one partition. A broker that is down keeps its copy, as
        in Kafka, until it is told again (the log is no longer in the assignment)."""
        calls = {}
        for broker in brokers:
            if broker not in self.live:
                continue
            handle = self.broker_handles.get(broker)
            if handle is not None:
                calls[broker] = handle.stop_replicas.remote(self.epoch, [tuple(tp)], delete)
        for reply in (await answers_of(calls, f"StopReplica of {tp.topic}-{tp.partition}")
                      ).values():
            if isinstance(reply, BaseException) or reply.get("error"):
                log.warning("StopReplica %s-%d not applied everywhere: %r", tp.topic,
                            tp.partition, reply)
