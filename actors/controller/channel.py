"""The controller's channel to the brokers, Kafka's ControllerChannelManager.

The controller decides what to send (which partitions, in which state); the channel carries it
to each broker: LeaderAndIsr, UpdateMetadata, StopReplica and topic config changes, stamped with
the controller epoch, waiting at most `BROKER_ANSWER_TIMEOUT_S` for the answers. It remembers
what each broker has not applied yet (the partitions of a LeaderAndIsr, an UpdateMetadata that
did not reach it) until the controller's resend timer sends it again, or the broker registers
anew or leaves.

How a request gets to one broker is a `BrokerSender`'s business: the controller's own
connection to the control endpoint the broker registered in ZooKeeper
(`broker_connections.py`), with its request timeout and reconnects, as Kafka's controller
reaches its brokers. No Ray actor call and no lookup in Ray's directory is on this path, so a
controller moves leaders while Ray's GCS is down or a broker's subscription to it has gone deaf.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Protocol

from rafka.actors.controller.broker_connections import (
    BrokerConnections,
    BrokerDidNotAnswer,
)
from rafka.actors.errors import ErrorCode, code_of
from rafka.actors.messages import (
    ErrorReply,
    LeaderAndIsrRequest,
    PartitionErrors,
    UpdateMetadataRequest,
)
from rafka.common.topic_partition import TopicPartition
from rafka.coordination.models import BrokerInfo

log = logging.getLogger(__name__)

# How long the controller waits for the brokers' answers to one of its requests (LeaderAndIsr,
# StopReplica, a config change), and how long a request waits on its connection before it
# fails. A broker cut off from the network would otherwise hold the controller's one event task,
# and no partition would be elected meanwhile. Past it the controller goes on; what the broker
# did not apply is sent again (`METADATA_RESYNC_S`), and a broker that registers anew is told
# everything again.
BROKER_ANSWER_TIMEOUT_S = 5.0
# How often brokers an UpdateMetadata did not reach are sent everything again, and brokers
# that did not apply a LeaderAndIsr are sent it again.
METADATA_RESYNC_S = 2.0

# What UpdateMetadata says, built by the controller: the partitions (None: all) and the
# topics deleted.
MetadataMessage = Callable[[set[TopicPartition] | None, tuple[str, ...]], UpdateMetadataRequest]


async def answers_of(calls: Mapping[int, Awaitable[Any]], what: str) -> dict[int, Any]:
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
            # Not cancelled: its own timeout ends it, and what it did not apply is sent again.
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


def not_applied(answer: object) -> bool:
    """Whether a broker's answer says it did not apply all of a request: the call failed, the
    request was refused (an `ErrorReply`), or some of its partitions were not applied."""
    return (isinstance(answer, (BaseException, ErrorReply))
            or (isinstance(answer, PartitionErrors) and bool(answer.errors)))


class BrokerSender(Protocol):
    """How the controller's requests reach one broker; each call returns its answer to await."""

    def leader_and_isr(self, controller_epoch: int,
                       partitions: list[LeaderAndIsrRequest]) -> Awaitable[Any]: ...

    def update_metadata(self, request: UpdateMetadataRequest) -> Awaitable[Any]: ...

    def stop_replicas(self, controller_epoch: int, partitions: list[tuple[str, int]],
                      delete: bool) -> Awaitable[Any]: ...

    def update_topic_config(self, controller_epoch: int, topic: str,
                            config: dict[str, str]) -> Awaitable[Any]: ...


class ControllerChannel:
    """Requests from one controller (of `epoch`) to the live brokers, and what they missed.

    `live` gives the controller's picture of the live brokers now: answers that come late are
    judged against the broker's registration then."""

    def __init__(self, controller_id: int, epoch: int, connections: BrokerConnections,
                 live: Callable[[], Mapping[int, BrokerInfo]]) -> None:
        self.controller_id = controller_id
        self.epoch = epoch
        # One connection per broker, to the control endpoint of its registration.
        self.connections = connections
        self._live = live
        self.forget()

    def forget(self) -> None:
        """Drop what the brokers missed: before a rebuild, which tells every broker anew."""
        # Brokers an UpdateMetadata did not reach: they are sent everything next.
        self.metadata_behind: set[int] = set()
        # The partitions whose LeaderAndIsr each broker did not apply (its actor restarted
        # under the call, a host failed, it was not registered yet): sent again until applied,
        # as Kafka's controller channel retries a request until its broker answers or leaves.
        self.leader_and_isr_behind: dict[int, set[TopicPartition]] = {}

    def sender(self, broker: int) -> BrokerSender | None:
        """How to reach `broker` as it is registered now; None if it is not registered, or
        names no control endpoint."""
        return self.connections.sender(broker, self._live().get(broker))

    def close(self) -> None:
        """Close every connection (the controller resigned)."""
        self.connections.close()

    # ----------------------------------------------------------------- brokers come and go

    def broker_registered_anew(self, broker: int) -> None:
        """A broker left, or registered anew (it may be another actor, and is told everything
        it holds): what it missed before is moot."""
        self.connections.drop(broker)
        self.leader_and_isr_behind.pop(broker, None)

    def needs_everything(self, brokers: set[int]) -> None:
        """The next UpdateMetadata tells `brokers` everything (they are new)."""
        self.metadata_behind |= brokers

    # ------------------------------------------------------------------------ LeaderAndIsr

    def send_leader_and_isr(self, requests: Mapping[int, list[LeaderAndIsrRequest]]
                            ) -> dict[int, asyncio.Future]:
        """Start LeaderAndIsr to each broker; the calls, to `wait_for_leader_and_isr`. A
        broker that does not apply its part, even later, is sent it again at the next resend
        (`_leader_and_isr_answered`)."""
        calls: dict[int, asyncio.Future] = {}
        for broker, batch in requests.items():
            sent = {TopicPartition(r.topic, r.partition) for r in batch}
            sender = self.sender(broker)
            if sender is None:
                self._resend_later(broker, sent)
                continue
            calls[broker] = asyncio.ensure_future(sender.leader_and_isr(self.epoch, batch))
            calls[broker].add_done_callback(functools.partial(
                self._leader_and_isr_answered, broker, self._live()[broker].epoch, sent))
        return calls

    async def wait_for_leader_and_isr(self, calls: Mapping[int, asyncio.Future]) -> None:
        for reply in (await answers_of(calls, "LeaderAndIsr")).values():
            if not_applied(reply):
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
        if failure is None and not not_applied(reply):
            return
        if code_of(reply) == ErrorCode.STALE_CONTROLLER_EPOCH:
            return
        info = self._live().get(broker)
        if info is None or info.epoch != broker_epoch:
            return
        log.info("controller %d: broker %d did not apply LeaderAndIsr of %d partitions (%r): "
                 "sending it again", self.controller_id, broker, len(sent), failure or reply)
        self._resend_later(broker, sent)

    def _resend_later(self, broker: int, partitions: set[TopicPartition]) -> None:
        """`broker` is sent these partitions' LeaderAndIsr again at the next resend."""
        self.leader_and_isr_behind.setdefault(broker, set()).update(partitions)

    def take_leader_and_isr_behind(self) -> dict[int, set[TopicPartition]]:
        """What each broker did not apply, to send again now; forgotten here meanwhile."""
        behind, self.leader_and_isr_behind = self.leader_and_isr_behind, {}
        return behind

    # ---------------------------------------------------------------------- UpdateMetadata

    def update_metadata(self, message: MetadataMessage,
                        partitions: set[TopicPartition] | None = None,
                        deleted: tuple[str, ...] = ()) -> None:
        """UpdateMetadata to every live broker: `message(partitions, deleted)` (everything
        for None); a broker a previous one did not reach gets everything.

        Sent, not waited for: a broker that does not answer (cut off, not yet expired) must
        not hold the controller up. A connection carries its requests in order; a request
        that fails marks its broker for everything at the next resync."""
        senders = {broker: sender for broker in sorted(self._live())
                   if (sender := self.sender(broker)) is not None}
        if not senders:
            return
        behind = self.metadata_behind & set(senders) if partitions is not None else set(senders)
        full = message(None, ()) if behind else None
        changed = full if partitions is None else message(partitions, deleted)
        self.metadata_behind -= set(senders)
        for broker, sender in senders.items():
            call = asyncio.ensure_future(
                sender.update_metadata(full if broker in behind else changed))  # type: ignore[arg-type]
            call.add_done_callback(functools.partial(self._metadata_answered, broker))

    def _metadata_answered(self, broker: int, call: asyncio.Future) -> None:
        failure = None if call.cancelled() else call.exception()
        if failure is None and not call.cancelled() and not not_applied(call.result()):
            return
        log.warning("controller %d: UpdateMetadata not applied by broker %d: %r",
                    self.controller_id, broker, failure or call)
        self.metadata_behind.add(broker)

    def live_brokers_behind_on_metadata(self) -> bool:
        """Forget brokers that left; True if a live one still misses an UpdateMetadata."""
        self.metadata_behind &= set(self._live())
        return bool(self.metadata_behind)

    # ------------------------------------------------------- StopReplica, config changes

    async def stop_replicas(self, partitions_of: Mapping[int, list[tuple[str, int]]],
                            delete: bool, what: str) -> dict[int, Any]:
        """StopReplica of `partitions_of[broker]` to each live broker in it; their answers."""
        calls = {}
        for broker, partitions in partitions_of.items():
            if broker not in self._live():
                continue
            sender = self.sender(broker)
            if sender is not None:
                calls[broker] = sender.stop_replicas(self.epoch, partitions, delete)
        return await answers_of(calls, what)

    async def update_topic_config(self, partitions_of: Mapping[int, set[TopicPartition]],
                                  topic: str, config: dict[str, str]) -> None:
        """A topic's new config to the live brokers holding its replicas (`partitions_of`,
        the topic's partitions on each). A broker that does not apply it, or does not answer
        in time (its connection failed, or it was cut off), is sent its partitions'
        LeaderAndIsr again at the next resend: a LeaderAndIsr carries the topic's config."""
        calls = {}
        for broker in sorted(partitions_of):
            sender = self.sender(broker)
            if sender is None:
                self._resend_later(broker, partitions_of[broker])
            else:
                calls[broker] = sender.update_topic_config(self.epoch, topic, config)
        for broker, reply in (await answers_of(calls, f"the config of {topic}")).items():
            if not_applied(reply) and code_of(reply) != ErrorCode.STALE_CONTROLLER_EPOCH:
                log.warning("the config of %s not applied by broker %d (%r): sending its "
                            "LeaderAndIsr again", topic, broker, reply)
                self._resend_later(broker, partitions_of[broker])
