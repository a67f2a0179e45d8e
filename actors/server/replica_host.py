"""ReplicaHost: a Ray actor that hosts many partition replicas of one broker.

A Ray actor is a process (about 65 MB and seconds to start), so one per replica caps a machine
near a hundred partitions. A broker therefore keeps a small pool of hosts on its own node
(`num.replica.hosts`), and each replica is an object on one of them (`rafka.actors.naming` says
which); the replica is the unit of data, the host the unit of isolation, as a partition and a
broker are in Kafka.

Every request carries many partitions: a producer sends one request per host with the batches
of every partition led there, a consumer fetches all its partitions on a host at once, and a
follower host pulls every partition it shares with a leader host in one fetch
(`rafka.actors.server.replica_fetcher`). The host runs them all on one asyncio loop, so replicas
need no locks; a fetch that waits, waits on all its partitions at once (`ChangeListener`).

The host also does, for all its replicas at once, what each did on its own timers before: ISR
shrinks (`replica.lag.time.max.ms`), high-watermark checkpoints, retention and flushes; and it
hands the broker the ISR changes of all its leaders in one call.
"""

from __future__ import annotations

import asyncio
import gc
import heapq
import logging
import os
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import ray
from ray.exceptions import ActorDiedError

from rafka.actors import metrics
from rafka.actors.config import BrokerConfig
from rafka.actors.dataport.server import DataPort
from rafka.actors.errors import ErrorCode, error_reply
from rafka.actors.logs import log_actor_lines
from rafka.actors.messages import (
    Appended,
    EpochQuery,
    FetchedRecords,
    IsrChange,
    LeaderAndIsrRequest,
    OffsetQuery,
    PartitionFetch,
    PartitionProduce,
    ProducerQuery,
    RecordsDeletion,
    ReplicaFetchAnswer,
    ReplicaFetchPartition,
    TableRead,
    TxnMarker,
)
from rafka.actors.naming import broker_name, partition_log_dir
from rafka.actors.offsets_topic import OFFSETS_TOPIC
from rafka.actors.path_trace import CONSUMER, PathTrace
from rafka.actors.runtime import run_at_server_priority
from rafka.actors.server.fetch_session import FetchSession
from rafka.actors.server.offset_manager import OffsetManager
from rafka.actors.server.replica import FOLLOWER, LEADER, PartitionReplica
from rafka.actors.server.replica_fetcher import ReplicaFetcher
from rafka.common.clock import wall_clock_ms
from rafka.common.topic_partition import TopicPartition
from rafka.common.waiting import wait_for_event
from rafka.logstore.batch import decode_columns
from rafka.wire.records import to_kafka

log = logging.getLogger(__name__)

# Kafka's replica.high.watermark.checkpoint.interval.ms.
HIGH_WATERMARK_CHECKPOINT_INTERVAL_S = 5.0
# A fetch session nobody used for this long is dropped (Kafka evicts idle sessions too).
SESSION_IDLE_TIMEOUT_S = 120.0


class _Listening:
    """Registered with many replicas for the length of a `with` block: a consumer's fetch
    waiting on many partitions wakes when any of them changes."""

    def __init__(self, replicas: list[PartitionReplica]) -> None:
        self.replicas = replicas
        self.event = asyncio.Event()

    def changed(self, replica: PartitionReplica) -> None:
        self.event.set()

    def __enter__(self) -> asyncio.Event:
        for replica in self.replicas:
            replica.listeners.add(self)
        return self.event

    def __exit__(self, *exc_info: object) -> None:
        for replica in self.replicas:
            replica.listeners.discard(self)


class _WakeSessions:
    """Listens to every replica of the host: a change wakes the fetch sessions carrying it."""

    def __init__(self, watchers: dict[TopicPartition, set[FetchSession]]) -> None:
        self.watchers = watchers

    def changed(self, replica: PartitionReplica) -> None:
        for session in self.watchers.get(replica.tp, ()):
            session.mark(replica.tp)


async def _produce_one(replicas: dict[TopicPartition, PartitionReplica], broker_id: int,
                       request: PartitionProduce, acks: int, timeout_ms: int
                       ) -> Appended | dict[str, Any]:
    """One partition's part of a produce request (a function, not a method of the actor
    class, whose every method Ray wraps)."""
    replica = replicas.get(TopicPartition(request.topic, request.partition))
    if replica is None:
        return _unknown_partition(broker_id, request.topic, request.partition)
    return await replica.produce(request.records, acks, timeout_ms,
                                 record_ends=request.record_ends)


async def _produce_one_kafka(replicas: dict[TopicPartition, PartitionReplica], broker_id: int,
                             request: PartitionProduce, acks: int, timeout_ms: int
                             ) -> Appended | dict[str, Any]:
    """`_produce_one` for a Kafka client's batches."""
    replica = replicas.get(TopicPartition(request.topic, request.partition))
    if replica is None:
        return _unknown_partition(broker_id, request.topic, request.partition)
    return await replica.produce_kafka(request.records, acks, timeout_ms)


async def _produce_each(
    produce_one: Callable[..., Awaitable[Appended | dict[str, Any]]],
    replicas: dict[TopicPartition, PartitionReplica], broker_id: int,
    requests: list[PartitionProduce], acks: int, timeout_ms: int,
) -> list[Appended | dict[str, Any]]:
    """`produce_one` for each partition of a request, at once; replies in the request's order
    (a lone partition awaited directly: no gather's tasks for the common case)."""
    if len(requests) == 1:
        return [await produce_one(replicas, broker_id, requests[0], acks, timeout_ms)]
    return list(await asyncio.gather(
        *(produce_one(replicas, broker_id, request, acks, timeout_ms) for request in requests)))


def _unknown_partition(broker_id: int, topic: str, partition: int) -> dict[str, Any]:
    return error_reply(
        ErrorCode.NOT_LEADER_OR_FOLLOWER,
        f"broker {broker_id} hosts no replica of {topic}-{partition} here: refresh metadata",
    )


class ReplicaHost:
    """Hosts replicas of broker `broker_id`; created by that broker on its node."""

    def __init__(
        self, name: str, broker_id: int, data_dir: str, broker_config: dict[str, Any],
        namespace: str,
    ) -> None:
        run_at_server_priority()
        log_actor_lines()
        self.name = name
        self.broker_id = broker_id
        self.data_dir = Path(data_dir)
        self.config = BrokerConfig.from_dict(broker_config)
        self.namespace = namespace
        self.replicas: dict[TopicPartition, PartitionReplica] = {}
        self.offset_managers: dict[int, OffsetManager] = {}
        self.fetchers: dict[str, ReplicaFetcher] = {}
        # The fetch sessions of follower hosts with this host, and which of them carry each
        # partition (a partition's change wakes those).
        self.sessions: dict[tuple[int, int], FetchSession] = {}
        self.session_watchers: dict[TopicPartition, set[FetchSession]] = {}
        self._wake_sessions = _WakeSessions(self.session_watchers)
        # Wakes of sessions whose full fetch has not arrived yet (monotonic s when woken): the
        # session starts woken. The wake is an actor call, the fetch may come over the data
        # port, and either may come first.
        self._early_wakes: dict[tuple[int, int], float] = {}
        # Where producers, follower hosts and consumers send their requests over connections
        # they keep (actors/dataport/server.py): this node's address, as other nodes reach it.
        # The port calls this class's own methods, not the actor's: Ray's actor class wraps
        # every method for tracing (a frame more on each call and each resumption of a waiting
        # one), which a request over the port, never traced, need not pay.
        own = ReplicaHost
        self._data_port = DataPort(
            ray.util.get_node_ip_address(), self.config.socket_request_max_bytes,
            produce=own.produce.__get__(self), produce_kafka=own.produce_kafka.__get__(self),
            replica_fetch=own.replica_fetch.__get__(self), fetch=own.fetch.__get__(self),
            fetch_kafka=own.fetch_kafka.__get__(self),
            list_offsets=own.list_offsets.__get__(self),
            fetch_offsets=own.fetch_offsets.__get__(self))
        self._handles: dict[str, Any] = {}
        # This host's broker, reached when an ISR changes: looked up and called once now,
        # while Ray's GCS answers, so that an ISR shrinks while it does not (its head
        # restarting) as well.
        broker = ray.get_actor(broker_name(broker_id), namespace=namespace)
        broker.ping.remote()
        self._handles[broker_name(broker_id)] = broker
        self._pending_isr: list[tuple[IsrChange, asyncio.Future]] = []
        self._isr_flush: asyncio.Task | None = None
        self._maintenance: asyncio.Task | None = None
        # When each replica's log maintenance is next due: (ms, order, partition), a heap.
        self._log_maintenance: list[tuple[int, int, TopicPartition]] = []
        self._maintenance_order = 0
        # Everything allocated so far (Ray, the modules) lives as long as the process: out of
        # the collector's sight, a full collection no longer walks it, which otherwise stalls
        # every request behind it for tens of milliseconds every few seconds.
        gc.freeze()

    # ----------------------------------------------------------------------- plumbing

    async def _handle(self, name: str) -> Any:
        """The actor called `name`, looked up once. The lookup asks Ray's GCS, which may be
        down (its head restarting) and answer late: it runs off the event loop, so that only
        what needs this actor waits, not every replica of the host."""
        handle = self._handles.get(name)
        if handle is None:
            handle = await asyncio.to_thread(ray.get_actor, name, namespace=self.namespace)
            self._handles[name] = handle
        return handle

    def _forget_if_dead(self, name: str, error: BaseException) -> None:
        """Drop a handle whose actor died for good (one of that name made since is another).
        Other failures keep it: a lookup asks Ray's GCS, which may be down while the actor
        is fine, and a handle stays good across Ray's restarts of its actor."""
        if isinstance(error, ActorDiedError):
            self._handles.pop(name, None)

    def _ensure_maintenance(self) -> None:
        if self._maintenance is None or self._maintenance.done():
            self._maintenance = asyncio.ensure_future(self._maintain())

    # --------------------------------------------------------------------- control plane

    async def leader_and_isr(self, requests: list[LeaderAndIsrRequest]) -> dict[str, Any]:
        """Apply the controller's LeaderAndIsr to these partitions, creating their replicas."""
        self._ensure_maintenance()
        failed: dict[str, Any] = {}
        for request in requests:
            tp = TopicPartition(request.topic, request.partition)
            try:
                replica = self.replicas.get(tp)
                if replica is None:
                    replica = PartitionReplica(
                        request.topic, request.partition, self.broker_id,
                        partition_log_dir(self.data_dir, request.topic, request.partition),
                        request.config, self.config, self._write_isr,
                    )
                    replica.listeners.add(self._wake_sessions)
                    self.replicas[tp] = replica
                    self._schedule_log_maintenance(replica)
                else:
                    # Every LeaderAndIsr carries the topic's config: a replica that missed a
                    # change (its host was busy or restarting) hears of it here.
                    self._apply_config(replica, request.config)
                reply = replica.leader_and_isr(request)
            except Exception as error:  # one bad partition must not stop the others
                log.exception("LeaderAndIsr for %s-%d failed", request.topic, request.partition)
                failed[f"{request.topic}-{request.partition}"] = repr(error)
                continue
            if reply.get("error"):
                failed[f"{request.topic}-{request.partition}"] = reply
                continue
            self._after_role_change(tp, replica)
        return {"error": 0, "failed": failed}

    def _after_role_change(self, tp: TopicPartition, replica: PartitionReplica) -> None:
        for any_fetcher in self.fetchers.values():
            any_fetcher.remove(tp)
        if replica.role == FOLLOWER and replica.leader_host is not None:
            fetcher = self.fetchers.get(replica.leader_host)
            if fetcher is None:
                fetcher = self.fetchers[replica.leader_host] = ReplicaFetcher(
                    replica.leader_host, self.broker_id, self.config, self._handle,
                    self._forget_if_dead)
            fetcher.add(replica)
        if tp.topic == OFFSETS_TOPIC:
            if replica.role == LEADER:
                # Rebuilt from the whole log on every new leadership: it may have missed commits.
                self.offset_managers[tp.partition] = OffsetManager(replica)
            else:
                self.offset_managers.pop(tp.partition, None)

    async def update_topic_config(self, topic: str, config: dict[str, Any]) -> dict[str, Any]:
        """The topic's config changed: its replicas here take it now."""
        failed: dict[str, Any] = {}
        for tp, replica in list(self.replicas.items()):
            if tp.topic != topic:
                continue
            try:
                self._apply_config(replica, config)
            except Exception as error:  # the controller checked it; the others go on
                log.exception("the new config of %s-%d failed", tp.topic, tp.partition)
                failed[f"{tp.topic}-{tp.partition}"] = repr(error)
        return {"error": 0, "failed": failed}

    def _apply_config(self, replica: PartitionReplica, config: dict[str, Any]) -> None:
        if replica.update_config(config):
            # Its next maintenance may now be due sooner than the turn already queued.
            self._schedule_log_maintenance(replica)

    async def fence(self) -> None:
        """The broker lost its ZooKeeper session: lead nothing until the controller says so."""
        for fetcher in self.fetchers.values():
            fetcher.stop()
        self.fetchers.clear()
        for replica in self.replicas.values():
            replica.go_offline()

    async def stop_replicas(self, partitions: list[tuple[str, int]], delete: bool) -> None:
        """Stop (and with `delete`, remove from disk) replicas: topic deletion, reassignment."""
        for topic, partition in partitions:
            tp = TopicPartition(topic, partition)
            for fetcher in self.fetchers.values():
                fetcher.remove(tp)
            if topic == OFFSETS_TOPIC:
                self.offset_managers.pop(partition, None)
            replica = self.replicas.pop(tp, None)
            if replica is not None:
                replica.stop()
                await asyncio.to_thread(replica.release, delete)

    async def close(self) -> None:
        """Stop serving every replica and close their logs (controlled shutdown)."""
        if self._maintenance is not None:
            self._maintenance.cancel()
        await self._data_port.close()
        for fetcher in self.fetchers.values():
            fetcher.stop()
        self.fetchers.clear()
        replicas, self.replicas = list(self.replicas.values()), {}
        self.offset_managers.clear()
        for replica in replicas:
            replica.stop()
        metrics.flush_replica_counts()
        for replica in replicas:
            try:
                await asyncio.to_thread(replica.release)
            except Exception:  # closing the others matters more
                log.exception("closing %s-%d failed", replica.topic, replica.partition)

    # ------------------------------------------------------------------- ISR changes

    async def _write_isr(self, replica: PartitionReplica, isr: list[int]) -> dict[str, Any]:
        """Queue an ISR change; the changes of one turn of the loop go to the broker as one."""
        change = IsrChange(replica.topic, replica.partition, self.broker_id,
                           replica.leader_epoch, tuple(isr), replica.controller_epoch,
                           replica.zk_version)
        future = asyncio.get_running_loop().create_future()
        self._pending_isr.append((change, future))
        if self._isr_flush is None:
            self._isr_flush = asyncio.ensure_future(self._flush_isr_changes())
        return await future

    async def _flush_isr_changes(self) -> None:
        await asyncio.sleep(0)  # let the other changes of this turn join
        batch, self._pending_isr, self._isr_flush = self._pending_isr, [], None
        try:
            broker = await self._handle(broker_name(self.broker_id))
            replies = await broker.update_partition_states.remote([c for c, _ in batch])
        except Exception as error:
            log.warning("broker %d did not answer ISR changes of %d partitions: %r",
                        self.broker_id, len(batch), error)
            self._forget_if_dead(broker_name(self.broker_id), error)
            replies = [error_reply(ErrorCode.REQUEST_TIMED_OUT,
                                   f"broker {self.broker_id} did not write the ISR: {error!r}")
                       ] * len(batch)
        for (_change, future), reply in zip(batch, replies, strict=True):
            if not future.done():
                future.set_result(reply)

    # ------------------------------------------------------------------------ timers

    async def _maintain(self) -> None:
        """ISR shrinks, checkpoints, retention and flushes for every replica here.

        Each turn looks at the leaders (followers to drop from or add to the ISR) and at the
        replicas whose log maintenance is due, not at every replica: an idle host of a thousand
        replicas should cost next to nothing.
        """
        lag_ms = self.config.replica_lag_time_max_ms
        interval_s = max(min(lag_ms / 2000, 1.0), 0.05)
        next_checkpoint = time.monotonic() + HIGH_WATERMARK_CHECKPOINT_INTERVAL_S
        while True:
            await asyncio.sleep(interval_s)
            now = wall_clock_ms()
            for replica in [r for r in self.replicas.values() if r.role == LEADER]:
                try:
                    lagging = replica.followers_to_remove(now)
                    if lagging:
                        replica.change_isr(set(replica.isr) - lagging, "shrink")
                    else:
                        replica.maybe_expand_isr()
                except Exception:
                    log.exception("ISR check of %s-%d failed", replica.topic, replica.partition)
            self._maintain_due_logs(now)
            self._drop_idle_sessions()
            metrics.flush_replica_counts()
            if time.monotonic() >= next_checkpoint:
                next_checkpoint = time.monotonic() + HIGH_WATERMARK_CHECKPOINT_INTERVAL_S
                # fsyncs: on a thread, so that requests do not wait behind them.
                await asyncio.to_thread(_checkpoint_high_watermarks,
                                        [r.log for r in self.replicas.values()])

    def _maintain_due_logs(self, now: int) -> None:
        """Retention, compaction and flushes of the replicas whose turn has come."""
        due = self._log_maintenance
        while due and due[0][0] <= now:
            when, _order, tp = heapq.heappop(due)
            replica = self.replicas.get(tp)
            if replica is None or replica.next_maintenance_ms != when:
                continue  # stopped since, or recreated with a turn of its own
            try:
                replica.maintain_log(now)
            except Exception:
                log.exception("log maintenance of %s-%d failed", tp.topic, tp.partition)
            self._schedule_log_maintenance(replica)

    def _schedule_log_maintenance(self, replica: PartitionReplica) -> None:
        self._maintenance_order += 1
        heapq.heappush(self._log_maintenance,
                       (replica.next_maintenance_ms, self._maintenance_order, replica.tp))

    def _drop_idle_sessions(self) -> None:
        """Sessions of followers that stopped fetching (a host that died, a broker that went):
        their follower starts a new one if it comes back."""
        limit = time.monotonic() - SESSION_IDLE_TIMEOUT_S
        for session in [s for s in self.sessions.values() if s.last_used < limit]:
            self._close_session(session)
        for key in [key for key, woken_at in self._early_wakes.items() if woken_at < limit]:
            del self._early_wakes[key]

    # ------------------------------------------------------------------------ produce

    async def produce(
        self, requests: list[PartitionProduce], acks: int = -1, timeout_ms: int = 30_000,
    ) -> list[Appended | dict[str, Any]]:
        """Append each partition's batches as its leader; one reply per partition, in order.
        With acks=all the request is answered once every partition's records are in its ISR."""
        return await _produce_each(_produce_one, self.replicas, self.broker_id, requests, acks,
                                   timeout_ms)

    async def produce_kafka(
        self, requests: list[PartitionProduce], acks: int = -1, timeout_ms: int = 30_000,
    ) -> list[Appended | dict[str, Any]]:
        """`produce` for a broker's Kafka listener: the batches are in Kafka's record format
        (a Kafka client's), checked and converted here."""
        return await _produce_each(_produce_one_kafka, self.replicas, self.broker_id, requests,
                                   acks, timeout_ms)

    # -------------------------------------------------------------------------- fetch

    async def fetch(
        self,
        requests: list[PartitionFetch],
        max_wait_ms: int = 0,
        min_bytes: int = 1,
        max_bytes: int = 52_428_800,
        read_committed: bool = False,
    ) -> list[FetchedRecords | dict[str, Any]]:
        """A consumer's fetch: whole batches of each partition from its offset, up to the high
        watermark (the last stable offset when `read_committed`, Kafka's
        isolation.level=read_committed, with the aborted transactions among the batches);
        waits up to `max_wait_ms` until `min_bytes` are there in all, waking when a
        partition's high watermark, role or leader epoch changes."""
        started = time.perf_counter()
        replicas = [self.replicas.get(TopicPartition(r.topic, r.partition)) for r in requests]
        replies: list[FetchedRecords | dict[str, Any]] = []
        budget = max_bytes
        for request, replica in zip(requests, replicas, strict=True):
            if replica is None:
                replies.append(_unknown_partition(self.broker_id, request.topic,
                                                  request.partition))
            elif budget <= 0:  # the rest waits for the next fetch
                replies.append(replica.nothing_at(request.offset))
            else:
                replies.append(replica.read(request.offset, request.max_bytes, follower=False,
                                            read_committed=read_committed))
                budget -= _size(replies[-1])
        total = max_bytes - budget
        live = [(index, replica) for index, replica in enumerate(replicas) if replica is not None]
        if total < min_bytes and live and max_wait_ms > 0:
            await self._wait_for_consumer_records(requests, live, replies, max_wait_ms,
                                                  min_bytes - total, read_committed)
        self._count_served(((TopicPartition(r.topic, r.partition), r.offset, reply)
                            for r, reply in zip(requests, replies, strict=True)),
                           started, replica_id=CONSUMER)
        return replies

    async def fetch_kafka(
        self,
        requests: list[PartitionFetch],
        max_wait_ms: int = 0,
        min_bytes: int = 1,
        max_bytes: int = 52_428_800,
        read_committed: bool = False,
    ) -> list[FetchedRecords | dict[str, Any]]:
        """`fetch` for a broker's Kafka listener: the batches converted to Kafka's record
        format (for a Kafka client), here, in parallel across the hosts rather than on the
        broker's event loop."""
        replies = await ReplicaHost.fetch(self, requests, max_wait_ms, min_bytes, max_bytes,
                                          read_committed)
        return [reply._replace(records=to_kafka(reply.records))
                if isinstance(reply, FetchedRecords) and reply.records else reply
                for reply in replies]

    @ray.method(num_returns=2)
    async def read_table(
        self, topic: str, partition: int, start: int, until: int, max_bytes: int,
        include_headers: bool,
    ) -> tuple[Any, TableRead]:
        """A pipeline's read: the leader's records in `[start, until)`, at most about
        `max_bytes` of batches (always at least one batch), as an Arrow table with the columns
        of Spark's Kafka source (`rafka.actors.record_tables`), built here from the batches
        where they lie. Two results, so the caller learns where the read stopped without
        fetching the table: `(table, TableRead)`. Never waits for records."""
        from rafka.actors.record_tables import records_table  # pyarrow only where it is used

        def failed(error: dict[str, Any]) -> tuple[Any, TableRead]:
            return (records_table([], topic, partition, include_headers),
                    TableRead(0, start, -1, -1, error))

        replica = self.replicas.get(TopicPartition(topic, partition))
        if replica is None:
            return failed(_unknown_partition(self.broker_id, topic, partition))
        batches = []
        offset, budget = start, max_bytes
        while offset < until and budget > 0:
            reply = replica.read(offset, budget, follower=False)
            if not isinstance(reply, FetchedRecords):
                if offset == start:
                    return failed(reply)
                break  # what was read stands; the caller asks again from `offset`
            if not reply.records:
                break
            batches += decode_columns(reply.records, offset, until)
            budget -= len(reply.records)
            offset = min(reply.next_offset, until)
        table = records_table(batches, topic, partition, include_headers)
        log_ = replica.log
        return table, TableRead(table.num_rows, offset, log_.high_watermark,
                                log_.log_start_offset, size_bytes=table.nbytes)

    async def _wait_for_consumer_records(
        self, requests: list[PartitionFetch], live: list[tuple[int, PartitionReplica]],
        replies: list[FetchedRecords | dict[str, Any]], max_wait_ms: int, missing_bytes: int,
        read_committed: bool,
    ) -> None:
        """Wait until `missing_bytes` more can be read (or an error is news), reading again
        only the partitions that changed."""

        def seen(replica: PartitionReplica) -> tuple[int, Any, int]:
            return replica.log.high_watermark, replica.role, replica.leader_epoch

        deadline = time.monotonic() + max_wait_ms / 1000
        states = {index: seen(replica) for index, replica in live}
        with _Listening([replica for _index, replica in live]) as event:
            while missing_bytes > 0:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return
                event.clear()
                if all(seen(replica) == states[index] for index, replica in live):
                    await wait_for_event(event, remaining)
                for index, replica in live:
                    if seen(replica) == states[index]:
                        continue
                    states[index] = seen(replica)
                    request = requests[index]
                    replies[index] = replica.read(request.offset, request.max_bytes,
                                                  follower=False, read_committed=read_committed)
                    if not isinstance(replies[index], FetchedRecords):
                        return  # an error is news: answer now
                    missing_bytes -= _size(replies[index])

    def _count_served(self, served, started: float, *, replica_id: int) -> None:
        """Metrics of a fetch, from `(partition, fetch offset, reply)` of each partition;
        `replica_id` is the follower's broker id, or `CONSUMER`.

        Records served are those from the fetch offset on, read off the reply's offsets, not by
        decoding the batches (exact except across compaction gaps, where it counts the gap).
        Latency once per topic: an idle fetch of many partitions must not cost a metric call
        for each.
        """
        elapsed_ms = (time.perf_counter() - started) * 1000
        follower = replica_id != CONSUMER
        timed: set[str] = set()
        for tp, fetch_offset, reply in served:
            replica = self.replicas.get(tp)
            if replica is None or not isinstance(reply, FetchedRecords):
                continue
            if tp.topic not in timed:
                timed.add(tp.topic)
                replica.metrics.fetch_latency(follower, elapsed_ms)
            if reply.records:
                replica.metrics.fetched(follower, reply.next_offset - fetch_offset,
                                        len(reply.records))
                if replica.path_trace is not None:
                    replica.path_trace.answered_read(replica_id, reply.next_offset)

    async def replica_fetch(
        self,
        follower_id: int,
        session_id: int,
        full: bool,
        partitions: list[ReplicaFetchPartition],
        removed: list[tuple[str, int]],
        max_wait_ms: int,
        partition_max_bytes: int,
        max_bytes: int,
    ) -> dict[str, Any]:
        """A follower host's fetch in its session (`rafka.actors.server.fetch_session`):
        `partitions` lists what changed since its last fetch (everything, when `full`), `removed`
        what left.

        Each listed fetch offset is what that follower holds: the leader counts it towards the
        high watermark and the ISR first. The answer, as soon as a partition has records or an
        error (or after `max_wait_ms`), covers the partitions with news, high watermarks
        included, as `{"partitions": [(topic, partition, reply), ...]}`.
        """
        started = time.perf_counter()
        key = (follower_id, session_id)
        session = self.sessions.get(key)
        if full:
            # A wake meant for this fetch may have come before it, to the session it replaces
            # or to none yet: it still answers this fetch at once.
            woken = self._early_wakes.pop(key, None) is not None
            if session is not None:
                woken = woken or session.woken
                self._close_session(session)
            session = self.sessions[key] = FetchSession(follower_id, session_id)
            session.woken = woken
        elif session is None:
            return error_reply(ErrorCode.FETCH_SESSION_ID_NOT_FOUND,
                               f"no fetch session {session_id} of broker {follower_id} here: "
                               "start a new one with a full fetch")
        session.touch(wall_clock_ms())
        for topic, partition in removed:
            tp = TopicPartition(topic, partition)
            session.remove(tp)
            self._unwatch(session, tp)
        for request in partitions:
            tp = session.list(request)
            self.session_watchers.setdefault(tp, set()).add(session)
            replica = self.replicas.get(tp)
            if replica is not None and replica.check_leader_epoch(request.leader_epoch) is None:
                replica.record_follower_fetch(follower_id, request.offset, session.clock)

        # Each partition's answer, with the fetch offset it was read for.
        answers: dict[TopicPartition, tuple[int, FetchedRecords | dict[str, Any]]] = {}
        watermark_news: set[TopicPartition] = set()
        budget = max_bytes
        deadline = time.monotonic() + max_wait_ms / 1000
        while True:
            for tp, request in session.take_dirty():
                replica = self.replicas.get(tp)
                if replica is None:
                    answers[tp] = (request.offset, _unknown_partition(
                        self.broker_id, tp.topic, tp.partition))
                elif (refused := replica.check_leader_epoch(request.leader_epoch)) is not None:
                    answers[tp] = (request.offset, refused)
                elif request.offset != replica.log.log_end_offset:
                    if budget <= 0:
                        session.dirty.add(tp)  # the next fetch brings it
                        continue
                    answers[tp] = (request.offset, replica.read(
                        request.offset, partition_max_bytes, follower=True))
                    budget -= _size(answers[tp][1])
                elif replica.log.high_watermark != request.high_watermark:
                    # News, but not worth an answer of its own: a follower learns the high
                    # watermark with its next records, as in Kafka, or when the wait is over.
                    watermark_news.add(tp)
                    continue
                else:
                    continue
                session.answered(tp)
            remaining = deadline - time.monotonic()
            if answers or remaining <= 0 or session.woken:
                break
            session.event.clear()
            if not session.dirty:
                await wait_for_event(session.event, remaining)
        for tp in watermark_news - set(answers):
            listed, replica = session.listed.get(tp), self.replicas.get(tp)
            if listed is None or replica is None:
                continue
            answers[tp] = (listed.offset, replica.nothing_at(listed.offset))
            session.answered(tp)
        session.woken = False
        self._count_served(((tp, offset, reply) for tp, (offset, reply) in answers.items()),
                           started, replica_id=follower_id)
        return {"error": 0, "partitions": [
            ReplicaFetchAnswer(tp.topic, tp.partition, offset, reply)
            for tp, (offset, reply) in answers.items()]}

    async def data_port_address(self) -> tuple[str, int, bytes]:
        """Where this host answers produce and fetch requests over TCP (its data port), and
        the token a connection must open with (only callers of this actor learn it)."""
        return await self._data_port.start()

    async def wake_session(self, follower_id: int, session_id: int) -> None:
        """The follower has a new partition to list: answer its waiting fetch now (or, if
        that fetch has not arrived yet, as soon as it does)."""
        session = self.sessions.get((follower_id, session_id))
        if session is not None:
            session.wake()
        else:
            self._early_wakes[(follower_id, session_id)] = time.monotonic()

    def _unwatch(self, session: FetchSession, tp: TopicPartition) -> None:
        watchers = self.session_watchers.get(tp)
        if watchers is not None:
            watchers.discard(session)
            if not watchers:
                del self.session_watchers[tp]

    def _close_session(self, session: FetchSession) -> None:
        for tp in list(session.members):
            self._unwatch(session, tp)
        self.sessions.pop((session.follower_id, session.session_id), None)
        session.event.set()

    async def offsets_for_leader_epoch(self, queries: list[EpochQuery]) -> list[dict[str, Any]]:
        """Where each epoch ends in each leader's log (Kafka's OffsetsForLeaderEpoch)."""
        return self._answer_each(queries, lambda replica, query: replica.offsets_for_leader_epoch(
            query.epoch, query.current_leader_epoch))

    async def list_offsets(self, queries: list[OffsetQuery]) -> list[dict[str, Any]]:
        """Kafka's ListOffsets for several partitions led here."""
        return self._answer_each(queries,
                                 lambda replica, query: replica.list_offsets(
                                     query.timestamp_ms, query.read_committed))

    async def delete_records(self, deletions: list[RecordsDeletion]) -> list[dict[str, Any]]:
        """Kafka's DeleteRecords for several partitions led here."""
        return self._answer_each(deletions,
                                 lambda replica, deletion: replica.delete_records(deletion.offset))

    async def describe_producers(self, queries: list[ProducerQuery]) -> list[dict[str, Any]]:
        """Kafka's DescribeProducers for several partitions led here, one producer id each."""
        return self._answer_each(queries, lambda replica, query: replica.describe_producer(
            query.producer_id))

    async def active_producers(self, partitions: list[TopicPartition]) -> list[dict[str, Any]]:
        """Kafka's DescribeProducers for several partitions led here: each one's producers."""
        return self._answer_each(partitions, lambda replica, _tp: replica.active_producers())

    def _answer_each(self, queries: list[Any], answer: Any) -> list[dict[str, Any]]:
        """`answer(replica, query)` for each query's partition, or why it is not here."""
        answers = []
        for query in queries:
            replica = self.replicas.get(TopicPartition(query.topic, query.partition))
            answers.append(answer(replica, query) if replica is not None
                           else _unknown_partition(self.broker_id, query.topic, query.partition))
        return answers

    # ------------------------------------------------------------------- transactions

    async def write_txn_markers(
        self, markers: list[TxnMarker], timeout_ms: int = 30_000
    ) -> list[dict[str, Any]]:
        """The transaction coordinator's markers for partitions this host leads, each answered
        once its ISR holds it (Kafka's WriteTxnMarkers). A `__consumer_offsets` partition's
        offset manager then applies or drops the transaction's offsets."""

        async def write(marker: TxnMarker) -> dict[str, Any]:
            tp = TopicPartition(marker.topic, marker.partition)
            replica = self.replicas.get(tp)
            if replica is None:
                return _unknown_partition(self.broker_id, marker.topic, marker.partition)
            reply = await replica.write_marker(marker, timeout_ms)
            manager = self.offset_managers.get(marker.partition)
            if reply["error"] == 0 and tp.topic == OFFSETS_TOPIC and manager is not None:
                manager.end_transaction(marker.producer_id, marker.committed)
            return reply

        return list(await asyncio.gather(*map(write, markers)))

    # ------------------------------------------------------------------ offset manager

    def _offset_manager(self, partition: int) -> OffsetManager | dict[str, Any]:
        manager = self.offset_managers.get(partition)
        if manager is None:
            return _unknown_partition(self.broker_id, OFFSETS_TOPIC, partition)
        return manager

    async def commit_offsets(
        self, partition: int, group: str, offsets: list[list[Any]], timeout_ms: int = 5000
    ) -> dict[str, Any]:
        manager = self._offset_manager(partition)
        if isinstance(manager, dict):
            return manager
        return await manager.commit(group, offsets, timeout_ms)

    async def commit_transactional_offsets(
        self, partition: int, group: str, producer_id: int, producer_epoch: int,
        offsets: list[list[Any]], timeout_ms: int = 5000,
    ) -> dict[str, Any]:
        """Kafka's TxnOffsetCommit: the offsets count once the producer's transaction commits."""
        manager = self._offset_manager(partition)
        if isinstance(manager, dict):
            return manager
        return await manager.commit_transactional(group, producer_id, producer_epoch, offsets,
                                                  timeout_ms)

    async def fetch_offsets(
        self, partition: int, group: str, partitions: list[list[Any]] | None = None
    ) -> dict[str, Any]:
        manager = self._offset_manager(partition)
        return manager if isinstance(manager, dict) else manager.fetch(group, partitions)

    async def forget_group(self, partition: int, group: str) -> dict[str, Any]:
        manager = self._offset_manager(partition)
        return manager if isinstance(manager, dict) else await manager.forget(group)

    async def offset_groups(self, partition: int) -> dict[str, Any]:
        manager = self._offset_manager(partition)
        return manager if isinstance(manager, dict) else manager.groups()

    # ----------------------------------------------------------------------- describe

    async def describe(self, topic: str | None = None) -> list[dict[str, Any]]:
        """Each replica hosted here (of `topic` only, if given): role, epochs, offsets."""
        return [replica.describe() for tp, replica in sorted(self.replicas.items())
                if topic is None or tp.topic == topic]

    async def start_tracing_path(self, topic: str, partition: int) -> bool:
        """Trace the replica's path events (`rafka.actors.path_trace`, for benchmarks), afresh;
        False if this host holds no such replica."""
        replica = self.replicas.get(TopicPartition(topic, partition))
        if replica is None:
            return False
        replica.path_trace = PathTrace()
        return True

    async def stop_tracing_path(self, topic: str, partition: int) -> dict[str, Any] | None:
        """Stop tracing the replica's path; the events traced since `start_tracing_path`."""
        replica = self.replicas.get(TopicPartition(topic, partition))
        if replica is None or replica.path_trace is None:
            return None
        traced, replica.path_trace = replica.path_trace, None
        return traced.events()

    async def pid(self) -> int:
        return os.getpid()

    async def lifeline(self) -> None:
        """Never answers: the broker's call fails when this host dies, which is how it
        learns, without polling."""
        await asyncio.Event().wait()


def _checkpoint_high_watermarks(logs: list[Any]) -> None:
    for log_ in logs:
        if log_.closed:
            continue
        try:
            log_.checkpoint_high_watermark()
        except OSError as error:  # closed and deleted meanwhile (topic deletion)
            log.debug("high-watermark checkpoint skipped: %r", error)


# Ray's stubs for ray.remote omit the actor option max_concurrency, which Ray accepts.
ReplicaHostActor = ray.remote(  # type: ignore[call-overload]
    num_cpus=0, max_concurrency=1000)(ReplicaHost)


def _size(reply: FetchedRecords | dict[str, Any]) -> int:
    """The bytes of records a partition's fetch reply carries (an error carries none)."""
    return len(reply.records) if isinstance(reply, FetchedRecords) else 0
