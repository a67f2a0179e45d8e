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
shrinks (`replica.lag.time.max.ms`), high-watermark checkpoints, retention and flushes
(`host_maintenance`); and it hands the broker the ISR changes of all its leaders in one request
over the broker's control endpoint (`isr_manager.IsrChangeBatcher`). The actor class is the
shell Ray and the data port call: its fetch sessions are a `FetchSessionCache`, its reads'
shared parts `host_reads`, the replicas' answers from their logs `leader_reads`, the
transaction markers `txn_markers`.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import os
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import ray

from rafka.actors import metrics
from rafka.actors.config import BrokerConfig
from rafka.actors.controller.broker_connections import (
    BrokerConnection,
    BrokerDidNotAnswer,
    BrokerUnreachable,
    parse_endpoint,
)
from rafka.actors.controller.control_frames import verification_error
from rafka.actors.dataport.async_client import DataPortAddress, PublishedAddress
from rafka.actors.dataport.server import DataPort
from rafka.actors.dataport.tls import DataPortTls, client_context, data_port_tls
from rafka.actors.errors import ErrorCode, error_reply
from rafka.actors.logs import log_actor_lines
from rafka.actors.messages import (
    Appended,
    CommittedOffsets,
    DeletedRecords,
    EpochEndOffset,
    EpochQuery,
    ErrorReply,
    FetchedRecords,
    LeaderAndIsrRequest,
    ListedOffset,
    OffsetQuery,
    PartitionErrors,
    PartitionFetch,
    PartitionProduce,
    ProducerDescription,
    ProducerQuery,
    RecordsDeletion,
    ReplicaFetchAnswer,
    ReplicaFetchPartition,
    ReplicaFetchResponse,
    TableRead,
    TxnMarker,
)
from rafka.actors.naming import broker_name, partition_log_dir
from rafka.actors.path_trace import PathTrace
from rafka.actors.runtime import run_at_server_priority
from rafka.actors.server import leader_reads
from rafka.actors.server.actor_handles import ActorHandles
from rafka.actors.server.fetch_session import FetchSession, FetchSessionCache
from rafka.actors.server.host_maintenance import HostMaintenance
from rafka.actors.server.host_reads import (
    answer_each,
    answer_replica_fetch,
    consumer_fetch,
    count_served,
    open_replica_fetch,
    read_table,
    unknown_partition,
)
from rafka.actors.server.isr_manager import IsrChangeBatcher
from rafka.actors.server.offset_manager import OffsetManagers
from rafka.actors.server.replica import PartitionReplica
from rafka.actors.server.replica_fetcher import ReplicaFetcherManager
from rafka.actors.server.txn_markers import write_marker
from rafka.actors.server.txn_verification import VerifyTransaction
from rafka.actors.stalls import watch_for_stalls
from rafka.common.topic_partition import TopicPartition
from rafka.wire.records import to_kafka

log = logging.getLogger(__name__)


class _WakeSessions:
    """Listens to every replica of the host: a change wakes the fetch sessions carrying it."""

    def __init__(self, watchers: dict[TopicPartition, set[FetchSession]]) -> None:
        self.watchers = watchers

    def changed(self, replica: PartitionReplica) -> None:
        for session in self.watchers.get(replica.tp, ()):
            session.mark(replica.tp)


async def _produce_one(replicas: dict[TopicPartition, PartitionReplica], broker_id: int,
                       request: PartitionProduce, acks: int, timeout_ms: int,
                       transactional_id: str | None) -> Appended | ErrorReply:
    """One partition's part of a produce request (a function, not a method of the actor
    class, whose every method Ray wraps)."""
    replica = replicas.get(TopicPartition(request.topic, request.partition))
    if replica is None:
        return unknown_partition(broker_id, request.topic, request.partition)
    return await replica.produce(request.records, acks, timeout_ms,
                                 record_ends=request.record_ends,
                                 transactional_id=transactional_id)


async def _produce_one_kafka(replicas: dict[TopicPartition, PartitionReplica], broker_id: int,
                             request: PartitionProduce, acks: int, timeout_ms: int,
                             transactional_id: str | None) -> Appended | ErrorReply:
    """`_produce_one` for a Kafka client's batches."""
    replica = replicas.get(TopicPartition(request.topic, request.partition))
    if replica is None:
        return unknown_partition(broker_id, request.topic, request.partition)
    return await replica.produce_kafka(request.records, acks, timeout_ms, transactional_id)


async def _produce_each(
    produce_one: Callable[..., Awaitable[Appended | ErrorReply]],
    replicas: dict[TopicPartition, PartitionReplica], broker_id: int,
    requests: list[PartitionProduce], acks: int, timeout_ms: int,
    transactional_id: str | None,
) -> list[Appended | ErrorReply]:
    """`produce_one` for each partition of a request, at once; replies in the request's order
    (a lone partition awaited directly: no gather's tasks for the common case)."""
    if len(requests) == 1:
        return [await produce_one(replicas, broker_id, requests[0], acks, timeout_ms,
                                  transactional_id)]
    return list(await asyncio.gather(*(
        produce_one(replicas, broker_id, request, acks, timeout_ms, transactional_id)
        for request in requests)))


def _asking_the_coordinator(broker_link: BrokerConnection, config: BrokerConfig
                            ) -> VerifyTransaction | None:
    """KIP-890's question to a transaction's coordinator, put through this host's broker
    (which finds the coordinator); None where the broker's config turns verification off."""
    if not config.transaction_partition_verification_enable:
        return None

    async def verify(transactional_id: str, producer_id: int, producer_epoch: int, topic: str,
                     partition: int) -> ErrorCode:
        try:
            answer = await broker_link.verify_transaction(
                transactional_id, producer_id, producer_epoch, [(topic, partition)])
        except (BrokerDidNotAnswer, BrokerUnreachable):
            return ErrorCode.NETWORK_EXCEPTION
        return verification_error(answer, topic, partition)
    return verify


# A LeaderAndIsr that takes a host, or its broker, longer than this is logged (info), with
# where the time went: a controller that gives up on the answer leaves no other trace.
SLOW_APPLY_S = 2.0


class ReplicaHost:
    """Hosts replicas of broker `broker_id`; created by that broker on its node."""

    def __init__(
        self, name: str, broker_id: int, data_dir: str, broker_config: dict[str, Any],
        namespace: str, broker_endpoint: str, control_token: bytes,
    ) -> None:
        run_at_server_priority()
        log_actor_lines()
        self._stall_watch = watch_for_stalls(f"replica host {name}")
        self.name = name
        self.broker_id = broker_id
        self.data_dir = Path(data_dir)
        self.config = BrokerConfig.from_dict(broker_config)
        self.namespace = namespace
        self.replicas: dict[TopicPartition, PartitionReplica] = {}
        self.offset_managers = OffsetManagers(broker_id)
        # The fetch sessions of follower hosts with this host, and which of them carry each
        # partition (a partition's change wakes those).
        self.sessions = FetchSessionCache()
        self._wake_sessions = _WakeSessions(self.sessions.watchers)
        # Where producers, follower hosts and consumers send their requests over connections
        # they keep (actors/dataport/server.py): this node's address, as other nodes reach it.
        # The port calls this class's own methods, not the actor's: Ray's actor class wraps
        # every method for tracing (a frame more on each call and each resumption of a waiting
        # one), which a request over the port, never traced, need not pay.
        own = ReplicaHost
        tls = data_port_tls(
            self.config.security_inter_broker_protocol, self.config.ssl_keystore_location,
            self.config.ssl_truststore_location, self.config.ssl_key_password)
        self._data_port = DataPort(
            ray.util.get_node_ip_address(), self.config.socket_request_max_bytes,
            produce=own.produce.__get__(self), produce_kafka=own.produce_kafka.__get__(self),
            replica_fetch=own.replica_fetch.__get__(self), fetch=own.fetch.__get__(self),
            fetch_kafka=own.fetch_kafka.__get__(self),
            list_offsets=own.list_offsets.__get__(self),
            fetch_offsets=own.fetch_offsets.__get__(self),
            commit_offsets=own.commit_offsets.__get__(self),
            commit_transactional_offsets=own.commit_transactional_offsets.__get__(self),
            offsets_for_leader_epoch=own.offsets_for_leader_epoch.__get__(self),
            wake_session=own.wake_session.__get__(self), tls=tls)
        self._handles = ActorHandles(namespace)
        self.fetchers = ReplicaFetcherManager(broker_id, self.config, self._handles.get,
                                              self._handles.forget_if_dead,
                                              _published_data_port(self._handles, broker_id))
        # This host's broker, asked where a leader host published its port: looked up and
        # called once now, while Ray's GCS answers.
        own_broker = broker_name(broker_id)
        broker = ray.get_actor(own_broker, namespace=namespace)
        broker.ping.remote()
        self._handles.put(own_broker, broker)
        # The leaders' ISR changes go to the broker's control endpoint (on this node), beside
        # the controller's requests, so that an ISR changes while Ray's directory of actors
        # does not answer. Each waits for the broker's ZooKeeper write at most a session
        # timeout: by then the write was made or the session is gone.
        self._broker_link = BrokerConnection(
            broker_id, parse_endpoint(broker_endpoint), control_token,
            None if tls is None else client_context(tls),
            self.config.zookeeper_session_timeout_ms / 1000)
        self._isr_changes = IsrChangeBatcher(broker_id, self._broker_link.update_partition_states)
        self._maintenance = HostMaintenance(self.replicas, self.config, self.sessions)
        # Everything allocated so far (Ray, the modules) lives as long as the process: out of
        # the collector's sight, a full collection no longer walks it, which otherwise stalls
        # every request behind it for tens of milliseconds every few seconds.
        gc.freeze()

    # --------------------------------------------------------------------- control plane

    async def leader_and_isr(self, requests: list[LeaderAndIsrRequest]) -> PartitionErrors:
        """Apply the controller's LeaderAndIsr to these partitions, creating their replicas."""
        self._maintenance.ensure_running()
        failed: dict[TopicPartition, ErrorReply] = {}
        started = time.monotonic()
        for request in requests:
            tp = TopicPartition(request.topic, request.partition)
            try:
                replica = self.replicas.get(tp)
                if replica is None:
                    replica = PartitionReplica(
                        request.topic, request.partition, self.broker_id,
                        partition_log_dir(self.data_dir, request.topic, request.partition),
                        request.config, self.config, self._isr_changes.write,
                        _asking_the_coordinator(self._broker_link, self.config),
                    )
                    replica.listeners.add(self._wake_sessions)
                    self.replicas[tp] = replica
                    self._maintenance.schedule(replica)
                else:
                    # Every LeaderAndIsr carries the topic's config: a replica that missed a
                    # change (its host was busy or restarting) hears of it here.
                    self._maintenance.update_config(replica, request.config)
                reply = replica.leader_and_isr(request)
            except Exception as error:  # one bad partition must not stop the others
                log.exception("LeaderAndIsr for %s-%d failed", request.topic, request.partition)
                failed[tp] = error_reply(ErrorCode.UNKNOWN_SERVER_ERROR, repr(error))
                continue
            if reply is not None:
                failed[tp] = reply
                continue
            self.fetchers.role_changed(replica)
            self.offset_managers.role_changed(replica)
        took_s = time.monotonic() - started
        if took_s > SLOW_APPLY_S:  # the replicas' logs loading, most likely
            log.info("replica host of broker %d: LeaderAndIsr of %d partitions took %.1f s",
                     self.broker_id, len(requests), took_s)
        return PartitionErrors(failed)

    async def update_topic_config(self, topic: str, config: dict[str, Any]) -> PartitionErrors:
        """The topic's config changed: its replicas here take it now."""
        failed: dict[TopicPartition, ErrorReply] = {}
        for tp, replica in list(self.replicas.items()):
            if tp.topic != topic:
                continue
            try:
                self._maintenance.update_config(replica, config)
            except Exception as error:  # the controller checked it; the others go on
                log.exception("the new config of %s-%d failed", tp.topic, tp.partition)
                failed[tp] = error_reply(ErrorCode.UNKNOWN_SERVER_ERROR, repr(error))
        return PartitionErrors(failed)

    async def fence(self) -> None:
        """The broker lost its ZooKeeper session: lead nothing until the controller says so."""
        self.fetchers.stop()
        for replica in self.replicas.values():
            replica.go_offline()

    async def stop_replicas(self, partitions: list[tuple[str, int]], delete: bool) -> None:
        """Stop (and with `delete`, remove from disk) replicas: topic deletion, reassignment."""
        for topic, partition in partitions:
            tp = TopicPartition(topic, partition)
            self.fetchers.remove(tp)
            self.offset_managers.stopped(topic, partition)
            replica = self.replicas.pop(tp, None)
            if replica is not None:
                replica.stop()
                await asyncio.to_thread(replica.release, delete)

    async def close(self) -> None:
        """Stop serving every replica and close their logs (controlled shutdown)."""
        self._maintenance.cancel()
        await self._data_port.close()
        self._broker_link.close()
        self.fetchers.stop()
        # Emptied in place: the maintenance holds the same dict.
        replicas = list(self.replicas.values())
        self.replicas.clear()
        self.offset_managers.by_partition.clear()
        for replica in replicas:
            replica.stop()
        metrics.flush_replica_counts()
        for replica in replicas:
            try:
                await asyncio.to_thread(replica.release)
            except Exception:  # closing the others matters more
                log.exception("closing %s-%d failed", replica.topic, replica.partition)

    async def produce(
        self, requests: list[PartitionProduce], acks: int = -1, timeout_ms: int = 30_000,
        transactional_id: str | None = None,
    ) -> list[Appended | ErrorReply]:
        """Append each partition's batches as its leader; one reply per partition, in order.
        With acks=all the request is answered once every partition's records are in its ISR."""
        return await _produce_each(_produce_one, self.replicas, self.broker_id, requests, acks,
                                   timeout_ms, transactional_id)

    async def produce_kafka(
        self, requests: list[PartitionProduce], acks: int = -1, timeout_ms: int = 30_000,
        transactional_id: str | None = None,
    ) -> list[Appended | ErrorReply]:
        """`produce` for a broker's Kafka listener: the batches are in Kafka's record format
        (a Kafka client's), checked and converted here."""
        return await _produce_each(_produce_one_kafka, self.replicas, self.broker_id, requests,
                                   acks, timeout_ms, transactional_id)

    # -------------------------------------------------------------------------- fetch

    async def fetch(
        self,
        requests: list[PartitionFetch],
        max_wait_ms: int = 0,
        min_bytes: int = 1,
        max_bytes: int = 52_428_800,
        read_committed: bool = False,
        followers_answer: bool = False,
    ) -> list[FetchedRecords | ErrorReply]:
        """A consumer's fetch: whole batches of each partition from its offset, up to the high
        watermark (the last stable offset when `read_committed`, Kafka's
        isolation.level=read_committed, with the aborted transactions among the batches);
        waits up to `max_wait_ms` until `min_bytes` are there in all, waking when a
        partition's high watermark, role or leader epoch changes. Leaders answer (followers
        too for a Kafka client, `fetch_kafka`)."""
        return await consumer_fetch(self.replicas, self.broker_id, requests, max_wait_ms,
                                    min_bytes, max_bytes, read_committed, followers_answer)

    async def fetch_kafka(
        self,
        requests: list[PartitionFetch],
        max_wait_ms: int = 0,
        min_bytes: int = 1,
        max_bytes: int = 52_428_800,
        read_committed: bool = False,
    ) -> list[FetchedRecords | ErrorReply]:
        """`fetch` for a broker's Kafka listener: the batches converted to Kafka's record
        format (for a Kafka client), here, in parallel across the hosts rather than on the
        broker's event loop. A follower answers too (the listener lets through only the
        fetches it may answer, KIP-392's: `actors/kafka/read_replicas.py`)."""
        replies = await consumer_fetch(self.replicas, self.broker_id, requests, max_wait_ms,
                                       min_bytes, max_bytes, read_committed, True)
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
        return read_table(self.replicas.get(TopicPartition(topic, partition)), self.broker_id,
                          topic, partition, start, until, max_bytes, include_headers)

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
    ) -> ReplicaFetchResponse | ErrorReply:
        """A follower host's fetch in its session (`rafka.actors.server.fetch_session`):
        `partitions` lists what changed since its last fetch (everything, when `full`), `removed`
        what left.

        Each listed fetch offset is what that follower holds: the leader counts it towards the
        high watermark and the ISR first. The answer, as soon as a partition has records or an
        error (or after `max_wait_ms`), covers the partitions with news, high watermarks
        included, each a `ReplicaFetchAnswer`.
        """
        started = time.perf_counter()
        session = open_replica_fetch(self.sessions, self.replicas, follower_id, session_id, full,
                                     partitions, removed)
        if isinstance(session, ErrorReply):
            return session
        answers = await answer_replica_fetch(session, self.replicas, self.broker_id,
                                             max_wait_ms, partition_max_bytes, max_bytes)
        count_served(self.replicas,
                     ((tp, offset, reply) for tp, (offset, reply) in answers.items()),
                     started, replica_id=follower_id)
        return ReplicaFetchResponse([ReplicaFetchAnswer(tp.topic, tp.partition, offset, reply)
                                     for tp, (offset, reply) in answers.items()])

    async def data_port_address(self) -> tuple[str, int, bytes, DataPortTls | None]:
        """Where this host answers produce and fetch requests over TCP (its data port), the
        token a connection must open with (only callers of this actor learn it), and the TLS
        it speaks (None: none)."""
        return await self._data_port.start()

    async def wake_session(self, follower_id: int, session_id: int) -> None:
        """The follower has a new partition to list: answer its waiting fetch now (or, if
        that fetch has not arrived yet, as soon as it does)."""
        self.sessions.wake(follower_id, session_id)

    async def offsets_for_leader_epoch(self, queries: list[EpochQuery]
                                       ) -> list[EpochEndOffset | ErrorReply]:
        """Where each epoch ends in each leader's log (Kafka's OffsetsForLeaderEpoch)."""
        return answer_each(self.replicas, self.broker_id, queries, lambda replica, query: (
            leader_reads.offsets_for_leader_epoch(replica, query.epoch,
                                                  query.current_leader_epoch)))

    async def list_offsets(self, queries: list[OffsetQuery]) -> list[ListedOffset | ErrorReply]:
        """Kafka's ListOffsets for several partitions led here."""
        return answer_each(self.replicas, self.broker_id, queries, lambda replica, query: (
            leader_reads.list_offsets(replica, query.timestamp_ms, query.read_committed)))

    async def delete_records(self, deletions: list[RecordsDeletion]
                             ) -> list[DeletedRecords | ErrorReply]:
        """Kafka's DeleteRecords for several partitions led here."""
        return answer_each(self.replicas, self.broker_id, deletions, lambda replica, deletion: (
            leader_reads.delete_records(replica, deletion.offset)))

    async def describe_producers(self, queries: list[ProducerQuery]
                                 ) -> list[ProducerDescription | ErrorReply]:
        """Kafka's DescribeProducers for several partitions led here, one producer id each."""
        return answer_each(self.replicas, self.broker_id, queries, lambda replica, query: (
            leader_reads.describe_producer(replica, query.producer_id)))

    async def active_producers(self, partitions: list[TopicPartition]
                               ) -> list[dict[str, Any] | ErrorReply]:
        """Kafka's DescribeProducers for several partitions led here: each one's producers."""
        return answer_each(self.replicas, self.broker_id, partitions,
                           lambda replica, _tp: leader_reads.active_producers(replica))

    # ------------------------------------------------------------------- transactions

    async def write_txn_markers(
        self, markers: list[TxnMarker], timeout_ms: int = 30_000
    ) -> list[ErrorReply | None]:
        """The transaction coordinator's markers for partitions this host leads, each answered
        (None) once its ISR holds it (Kafka's WriteTxnMarkers). A `__consumer_offsets` partition's
        offset manager then applies or drops the transaction's offsets."""

        async def write(marker: TxnMarker) -> ErrorReply | None:
            tp = TopicPartition(marker.topic, marker.partition)
            replica = self.replicas.get(tp)
            if replica is None:
                return unknown_partition(self.broker_id, marker.topic, marker.partition)
            reply = await write_marker(replica, marker, timeout_ms)
            self.offset_managers.marker_written(marker, reply)
            return reply

        return list(await asyncio.gather(*map(write, markers)))

    # ------------------------------------------------------------------ offset manager

    async def commit_offsets(
        self, partition: int, group: str, offsets: list[list[Any]], timeout_ms: int = 5000
    ) -> ErrorReply | None:
        manager = self.offset_managers.get(partition)
        if isinstance(manager, ErrorReply):
            return manager
        return await manager.commit(group, offsets, timeout_ms)

    async def commit_transactional_offsets(
        self, partition: int, group: str, producer_id: int, producer_epoch: int,
        offsets: list[list[Any]], timeout_ms: int = 5000, transactional_id: str | None = None,
    ) -> ErrorReply | None:
        """Kafka's TxnOffsetCommit: the offsets count once the producer's transaction commits."""
        manager = self.offset_managers.get(partition)
        if isinstance(manager, ErrorReply):
            return manager
        return await manager.commit_transactional(group, producer_id, producer_epoch, offsets,
                                                  timeout_ms, transactional_id)

    async def fetch_offsets(
        self, partition: int, group: str, partitions: list[list[Any]] | None = None
    ) -> CommittedOffsets | ErrorReply:
        manager = self.offset_managers.get(partition)
        return manager if isinstance(manager, ErrorReply) else manager.fetch(group, partitions)

    async def forget_group(self, partition: int, group: str) -> int | ErrorReply:
        """Forget every offset the group committed; how many there were."""
        manager = self.offset_managers.get(partition)
        return manager if isinstance(manager, ErrorReply) else await manager.forget(group)

    async def delete_group_offsets(self, partition: int, group: str,
                                   partitions: list[list[Any]]) -> int | ErrorReply:
        """Forget the group's offsets of `partitions` (Kafka's OffsetDelete); how many offsets
        the group had committed before."""
        manager = self.offset_managers.get(partition)
        return manager if isinstance(manager, ErrorReply) else await manager.delete(
            group, partitions)

    async def offset_groups(self, partition: int) -> list[str] | ErrorReply:
        manager = self.offset_managers.get(partition)
        return manager if isinstance(manager, ErrorReply) else manager.groups()

    # ----------------------------------------------------------------------- describe

    async def describe(self, topic: str | None = None) -> list[dict[str, Any]]:
        """Each replica hosted here (of `topic` only, if given): role, epochs, offsets; a
        leader's view of its followers, and a follower's of its fetching."""
        described = []
        for tp, replica in sorted(self.replicas.items()):
            if topic is None or tp.topic == topic:
                facts = leader_reads.describe(replica)
                fetching = self.fetchers.describe_fetching(tp)
                if fetching is not None:
                    facts["fetching"] = fetching
                described.append(facts)
        return described

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


def _published_data_port(handles: ActorHandles, broker_id: int
                         ) -> Callable[[str], PublishedAddress]:
    """Where a leader host's broker published its data port, asked of this host's own broker
    (on this node, with the ZooKeeper session): for a follower whose Ray cannot reach a
    restarted leader host."""

    def published(leader_host: str) -> PublishedAddress:
        async def read() -> DataPortAddress | None:
            broker = await handles.get(broker_name(broker_id))
            found = await broker.published_data_port.remote(leader_host)
            return None if found is None else tuple(found)  # type: ignore[return-value]

        return read

    return published


# Ray's stubs for ray.remote omit the actor option max_concurrency, which Ray accepts.
ReplicaHostActor = ray.remote(  # type: ignore[call-overload]
    num_cpus=0, max_concurrency=1000)(ReplicaHost)

