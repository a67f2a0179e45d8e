"""The in-sync replicas of a partition's leader: what each follower fetched, which followers join
or leave the ISR, and the ISR writes to ZooKeeper (through the broker) that make it so.

Kafka's `Partition` keeps this apart from the log (`updateFollowerFetchState`,
`maybeExpandIsr`, `maybeShrinkIsr`); here `IsrManager` does, one per replica, and
`IsrChangeBatcher`, one per host, sends the ISR changes of all its leaders to the broker in one
request (over the broker's control endpoint, not through Ray). Both run on the host's event
loop, the replica's own. The arithmetic (who is caught up,
who lags) is `rafka.actors.server.replication.LeaderState`.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Protocol

from rafka.actors.config import BrokerConfig
from rafka.actors.errors import ErrorCode, error_reply
from rafka.actors.messages import ErrorReply, IsrChange, IsrWritten
from rafka.actors.metrics import ReplicaMetrics
from rafka.actors.path_trace import PathTrace
from rafka.actors.server.replication import FetchClock, LeaderState
from rafka.common.clock import wall_clock_ms
from rafka.logstore.log import Log

log = logging.getLogger(__name__)


class IsrPartition(Protocol):
    """What the ISR bookkeeping reads and moves of its replica (`PartitionReplica`)."""

    topic: str
    partition: int
    broker_config: BrokerConfig
    log: Log
    metrics: ReplicaMetrics
    path_trace: PathTrace | None
    leader_state: LeaderState | None
    leader_epoch: int
    controller_epoch: int
    zk_version: int
    isr: tuple[int, ...]

    def advance_high_watermark(self) -> None: ...

    def report_under_replicated(self) -> None: ...

    def go_offline(self, reason: str | None = None) -> None: ...

    def notify(self) -> None: ...


# Writes an ISR change to ZooKeeper through the broker: (replica, new ISR) -> reply.
IsrWriter = Callable[[IsrPartition, list[int]], Awaitable[IsrWritten | ErrorReply]]


class IsrManager:
    """One leader's follower fetches and ISR changes; idle while its replica follows."""

    def __init__(self, replica: IsrPartition, write_isr: IsrWriter) -> None:
        self.replica = replica
        self._write_isr_through_broker = write_isr
        # The ISR write in flight, if any: one at a time, each conditional on the znode
        # version the one before left.
        self.write_in_flight: asyncio.Task | None = None

    def record_follower_fetch(
        self, follower_id: int, offset: int, clock: FetchClock | None = None
    ) -> None:
        """A follower fetched at `offset`: it holds everything before it."""
        replica = self.replica
        state = replica.leader_state
        if state is None:
            return
        state.record_follower_fetch(follower_id, offset, replica.log.log_end_offset,
                                    wall_clock_ms(), clock)
        if replica.path_trace is not None:
            replica.path_trace.follower_at(follower_id, offset)
        replica.advance_high_watermark()
        self.maybe_expand_isr()

    def maybe_expand_isr(self) -> None:
        """Add the followers that caught up to the ISR. Called on their fetches and, since a
        caught-up follower's session stops listing the partition, on the host's timer too:
        an expansion that could not be written then (another ISR write in flight, a refused
        write) is tried again."""
        state = self.replica.leader_state
        if state is None:
            return
        joining = state.followers_to_add()
        if joining:
            self.change_isr(set(state.isr) | joining, "expand")

    def followers_to_remove(self, now: int) -> set[int]:
        state = self.replica.leader_state
        if state is None or self.write_in_flight is not None:
            return set()
        return state.followers_to_remove(self.replica.log.log_end_offset, now,
                                         self.replica.broker_config.replica_lag_time_max_ms)

    def change_isr(self, new_isr: set[int], change: str) -> None:
        """Write the new ISR to ZooKeeper (one write at a time), conditional on the version
        this leader last saw; then apply it."""
        state = self.replica.leader_state
        if self.write_in_flight is None and state is not None:
            state.propose_isr(new_isr)
            self.write_in_flight = asyncio.ensure_future(self._write_isr(new_isr, change))

    async def _write_isr(self, new_isr: set[int], change: str) -> None:
        replica = self.replica
        epoch = replica.leader_epoch
        try:
            reply = await self._write_isr_through_broker(replica, sorted(new_isr))
            if replica.leader_state is None or replica.leader_epoch != epoch:
                return
            if isinstance(reply, ErrorReply) and reply.code == ErrorCode.REQUEST_TIMED_OUT:
                # ZooKeeper did not answer, and may have written it all the same. The confirmed
                # ISR stays as it was (a smaller one is never applied unwritten), the followers
                # it would add still hold the high watermark back (`LeaderState.joining`), and
                # the host's timer asks for the change again.
                log.warning("%s-%d ISR %s to %s not written, trying again: %s", replica.topic,
                            replica.partition, change, sorted(new_isr), reply.message)
                return
            if isinstance(reply, ErrorReply):
                replica.go_offline(f"ISR {change} to {sorted(new_isr)} refused: {reply.message}")
                return
            replica.zk_version = reply.zk_version
            replica.isr = tuple(sorted(new_isr))
            replica.leader_state.apply_isr(new_isr)
            replica.metrics.isr_changed(change)
            replica.report_under_replicated()
            log.info("%s-%d ISR %s to %s", replica.topic, replica.partition, change,
                     replica.isr)
            replica.advance_high_watermark()
            replica.notify()
        finally:
            self.write_in_flight = None

    def cancel(self) -> None:
        """Drop the write in flight (the replica stops)."""
        if self.write_in_flight is not None:
            self.write_in_flight.cancel()


# Sends ISR changes to the broker, which writes them: one outcome per change, in order.
IsrChangeSender = Callable[[list[IsrChange]], Awaitable[object]]


class IsrChangeBatcher:
    """A host's ISR writes: the changes of one turn of its loop go to the broker as one request
    (`Broker.update_partition_states`, by `send`), which writes them to ZooKeeper."""

    def __init__(self, broker_id: int, send: IsrChangeSender) -> None:
        self.broker_id = broker_id
        self._send = send
        self._pending: list[tuple[IsrChange, asyncio.Future]] = []
        self._flush: asyncio.Task | None = None

    async def write(self, replica: IsrPartition, isr: list[int]) -> IsrWritten | ErrorReply:
        """Queue an ISR change (an `IsrWriter`); answered with the broker's reply for it."""
        change = IsrChange(replica.topic, replica.partition, self.broker_id,
                           replica.leader_epoch, tuple(isr), replica.controller_epoch,
                           replica.zk_version)
        future = asyncio.get_running_loop().create_future()
        self._pending.append((change, future))
        if self._flush is None:
            self._flush = asyncio.ensure_future(self._flush_changes())
        return await future

    async def _flush_changes(self) -> None:
        await asyncio.sleep(0)  # let the other changes of this turn join
        batch, self._pending, self._flush = self._pending, [], None
        try:
            answer = await self._send([c for c, _ in batch])
            if isinstance(answer, ErrorReply):
                raise RuntimeError(answer.message)
            if not isinstance(answer, list) or len(answer) != len(batch):
                raise RuntimeError(f"an answer of {answer!r} to {len(batch)} changes")
            replies: list[IsrWritten | ErrorReply] = answer
        except Exception as error:
            log.warning("broker %d did not answer ISR changes of %d partitions: %r",
                        self.broker_id, len(batch), error)
            replies = [error_reply(ErrorCode.REQUEST_TIMED_OUT,
                                   f"broker {self.broker_id} did not write the ISR: {error!r}")
                       ] * len(batch)
        for (_change, future), reply in zip(batch, replies, strict=True):
            if not future.done():
                future.set_result(reply)
