"""ReplicaHostPool: the replica-host actors of one broker and the replicas they hold.

The nearest analogue is Kafka's ReplicaManager: it owns a broker's replicas and applies the
controller's LeaderAndIsr, StopReplica and topic config changes to them. Here the replicas live
in ReplicaHost actors on the broker's own Ray node (`num.replica.hosts`; which host holds a
partition is `rafka.actors.naming`'s), so the pool creates those hosts, hands each its share of
a request in one call (all hosts at once), watches each host's lifeline, and recreates a host
that died, giving it back the replicas it held as ZooKeeper has them now. Each host's data
port address is published in ZooKeeper once the host listens (`rafka.coordination.data_ports`),
for callers that cannot reach it through Ray.

It runs on the broker actor's event loop; the `Broker` keeps the life cycle, the ZooKeeper
session, the controller it may host and the metadata, and delegates the replicas here.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from rafka.actors.errors import ErrorCode, error_reply
from rafka.actors.messages import (
    ErrorReply,
    LeaderAndIsrRequest,
    PartitionErrors,
)
from rafka.actors.naming import partition_log_dir, pool_host_names, replica_host_name
from rafka.actors.server.replica_host import SLOW_APPLY_S, ReplicaHostActor
from rafka.common.topic_partition import TopicPartition
from rafka.coordination.data_ports import DataPortAddress, publish_data_port
from rafka.coordination.partition_state import PartitionStateStore
from rafka.coordination.registration import read_brokers
from rafka.coordination.store import ClusterStore

log = logging.getLogger(__name__)

# How long describe_replicas waits for each replica host.
HOST_ANSWER_TIMEOUT_S = 2.0
# How long a broker whose session outlived a cut waits before giving a host its replicas back
# again, when the first try failed (ZooKeeper still settling after it came back).
RESTORE_RETRY_S = 1.0
# How often a broker reads the registrations again for a leader it found none of.
LEADER_LOOKUP_RETRY_S = 1.0


@dataclasses.dataclass(eq=False)
class ReplicaHostPool:
    """The replica hosts of broker `broker_id`, created on Ray node `node_id` on demand.

    `_store` gives the broker's ZooKeeper store once it has one (None before it started).
    """

    broker_id: int
    namespace: str
    node_id: str
    data_dir: Path
    raw_config: dict[str, Any]
    num_replica_hosts: int
    _store: Callable[[], ClusterStore | None]
    # The broker's control endpoint (`host:port`, known once it listens, before any host is
    # made) and its token: where the hosts send their ISR changes.
    _control_link: Callable[[], tuple[str, bytes]]
    # The replica-host actors by name, and the last LeaderAndIsr applied to each replica
    # hosted on them: a host that dies is recreated, and its replicas from these.
    hosts: dict[str, Any] = dataclasses.field(default_factory=dict, init=False)
    replica_states: dict[TopicPartition, LeaderAndIsrRequest] = dataclasses.field(
        default_factory=dict, init=False)
    # Every broker's replica-host pool size, from its registration: it names the host of
    # a partition's leader, which followers fetch from.
    _pool_sizes: dict[int, int] = dataclasses.field(default_factory=dict, init=False)
    # One task per host, awaiting the host's lifeline call: it fails when the host dies.
    _host_watches: dict[str, asyncio.Task] = dataclasses.field(default_factory=dict, init=False)
    _closing: bool = dataclasses.field(default=False, init=False)
    # Followers told of a leader whose registration this broker has not read (yet): their
    # leader's host is looked up again until found (`_resolve_leader_hosts`).
    _unresolved: set[TopicPartition] = dataclasses.field(default_factory=set, init=False)
    _resolving: asyncio.Task | None = dataclasses.field(default=None, init=False)

    # ------------------------------------------------------------------------ finding hosts

    def host_name(self, topic: str, partition: int) -> str:
        """The name of the host that holds (or would hold) this broker's replica."""
        return replica_host_name(self.broker_id, topic, partition, self.num_replica_hosts)

    def host(self, name: str) -> Any:
        """The host called `name`, created (and watched) if it is not yet."""
        handle = self.hosts.get(name)
        if handle is None:
            handle = ReplicaHostActor.options(
                name=name,
                namespace=self.namespace,
                # The logs live on this node's disk: the host must run here.
                scheduling_strategy=NodeAffinitySchedulingStrategy(self.node_id, soft=False),
                get_if_exists=True,
            ).remote(name, self.broker_id, str(self.data_dir), self.raw_config, self.namespace,
                     *self._control_link())
            self.hosts[name] = handle
            self._host_watches[name] = asyncio.ensure_future(self._watch_host(name, handle))
        return handle

    def prestart(self) -> None:
        """Create every host of the pool now, before a LeaderAndIsr names them: a broker Ray
        restarted is sent its replicas once it registers, and a host's worker process takes
        seconds to start on a busy node, which would otherwise come after. (Without a pool,
        each replica's host is made when the controller names it, as before.)"""
        for name in pool_host_names(self.broker_id, self.num_replica_hosts):
            self.host(name)

    async def publish_data_ports(self) -> None:
        """Publish where each host listens, once the broker has its ZooKeeper session: for
        the hosts `prestart` made before it had."""
        await asyncio.gather(*(self._publish_data_port(name, handle)
                               for name, handle in list(self.hosts.items())))

    def replica_host_for(self, topic: str, partition: int) -> Any:
        """The host of this broker's replica of the partition, None if it holds none."""
        if TopicPartition(topic, partition) not in self.replica_states:
            return None
        return self.host(self.host_name(topic, partition))

    async def _leader_hosts(self, leaders: set[int]) -> dict[int, int]:
        """The pool size of every leader of `leaders` (NO_LEADER left out), reading ZooKeeper
        for new ones."""
        leaders = {leader for leader in leaders if leader >= 0}
        store = self._store()
        if not leaders <= set(self._pool_sizes) and store is not None:
            brokers = await asyncio.to_thread(read_brokers, store)
            self._pool_sizes.update({b: info.replica_hosts for b, info in brokers.items()})
        return self._pool_sizes

    def _with_leader_host(self, request: LeaderAndIsrRequest, pools: dict[int, int]
                          ) -> LeaderAndIsrRequest:
        """`request` naming its leader's host, which the leader's pool size gives. A leader
        whose registration was not found (it registered a moment after the controller saw
        it, or is registering again) has no host yet: the name a guess would give could be
        a host that does not exist, followed for good. It is looked up again until found."""
        tp = TopicPartition(request.topic, request.partition)
        leader = request.leader
        if leader < 0:
            self._unresolved.discard(tp)
            return dataclasses.replace(request, leader_host=None)
        if leader not in pools:
            self._unresolved.add(tp)
            if self._resolving is None or self._resolving.done():
                self._resolving = asyncio.ensure_future(self._resolve_leader_hosts())
            return dataclasses.replace(request, leader_host=None)
        self._unresolved.discard(tp)
        return dataclasses.replace(request, leader_host=replica_host_name(
            leader, request.topic, request.partition, pools[leader]))

    async def _resolve_leader_hosts(self) -> None:
        """Read the registrations again until every follower in `_unresolved` knows its
        leader's host, and give it to the follower's host."""
        while self._unresolved and not self._closing:
            await asyncio.sleep(LEADER_LOOKUP_RETRY_S)
            waiting = {tp: self.replica_states[tp] for tp in self._unresolved
                       if tp in self.replica_states}
            self._unresolved &= set(waiting)
            try:
                pools = await self._leader_hosts({r.leader for r in waiting.values()})
            except Exception as error:  # ZooKeeper unreachable for now: again later
                log.info("broker %d could not read the brokers' registrations: %r",
                         self.broker_id, error)
                continue
            by_host: dict[str, list[LeaderAndIsrRequest]] = {}
            for tp, request in waiting.items():
                if request.leader_host is not None or request.leader < 0:
                    self._unresolved.discard(tp)  # a newer LeaderAndIsr named it since
                elif request.leader in pools:
                    resolved = self._with_leader_host(request, pools)
                    self.replica_states[tp] = resolved
                    by_host.setdefault(self.host_name(*tp), []).append(resolved)
            if by_host:
                applied = await self._apply_on_hosts(by_host)
                if applied.errors:
                    log.warning("broker %d: followers did not take their leaders' hosts: %s",
                                self.broker_id, applied.errors)

    # --------------------------------------------------------------- the controller's requests

    async def leader_and_isr(self, controller_epoch: int,
                             partitions: list[LeaderAndIsrRequest]) -> PartitionErrors:
        """Apply the controller's LeaderAndIsr to this broker's replicas, creating them: one
        call per replica host, carrying all of its partitions."""
        started = time.monotonic()
        pools = await self._leader_hosts({entry.leader for entry in partitions})
        read_s = time.monotonic() - started
        by_host: dict[str, list[LeaderAndIsrRequest]] = {}
        for entry in partitions:
            request = self._with_leader_host(dataclasses.replace(
                entry, controller_epoch=controller_epoch, config=dict(entry.config)), pools)
            self.replica_states[TopicPartition(request.topic, request.partition)] = request
            by_host.setdefault(self.host_name(request.topic, request.partition),
                               []).append(request)
        new_hosts = [name for name in by_host if name not in self.hosts]
        applied = await self._apply_on_hosts(by_host)
        took_s = time.monotonic() - started
        if took_s > SLOW_APPLY_S:
            log.info("broker %d: LeaderAndIsr of %d partitions took %.1f s (%.1f s reading "
                     "the leaders' pool sizes; hosts created for it: %s)", self.broker_id,
                     len(partitions), took_s, read_s, new_hosts or "none")
        return applied

    async def _apply_on_hosts(
        self, by_host: dict[str, list[LeaderAndIsrRequest]]
    ) -> PartitionErrors:
        calls = {name: self.host(name).leader_and_isr.remote(requests)
                 for name, requests in by_host.items()}
        return await _failures(calls, {name: [(r.topic, r.partition) for r in requests]
                                       for name, requests in by_host.items()})

    async def update_topic_config(self, topic: str, config: dict[str, Any]) -> PartitionErrors:
        """`topic`'s config changed: the hosts of its replicas here apply it, and a host
        recreated later is given it with its LeaderAndIsr."""
        by_host: dict[str, list[tuple[str, int]]] = {}
        for tp, request in list(self.replica_states.items()):
            if tp.topic == topic:
                self.replica_states[tp] = dataclasses.replace(request, config=dict(config))
                name = self.host_name(tp.topic, tp.partition)
                if name in self.hosts:
                    by_host.setdefault(name, []).append((tp.topic, tp.partition))
        return await _failures(
            {name: self.hosts[name].update_topic_config.remote(topic, config)
             for name in by_host}, by_host)

    async def stop_replicas(self, partitions: list[tuple[str, int]], delete: bool) -> None:
        """Stop (and with `delete`, remove from disk) replicas: topic deletion, reassignment."""
        by_host: dict[str, list[tuple[str, int]]] = {}
        for topic, partition in partitions:
            self.replica_states.pop(TopicPartition(topic, partition), None)
            name = self.host_name(topic, partition)
            if name in self.hosts:
                by_host.setdefault(name, []).append((topic, partition))
        await asyncio.gather(
            *(self.hosts[name].stop_replicas.remote(tps, delete) for name, tps in by_host.items()),
            return_exceptions=True,
        )
        if delete:
            # Every directory goes, including those no host had open (this broker was down when
            # the topic was deleted, say): a topic of the same name must start empty.
            await asyncio.gather(*(
                asyncio.to_thread(shutil.rmtree, partition_log_dir(self.data_dir, *tp), True)
                for tp in partitions))
        # A host of one replica (num.replica.hosts=0) has nothing left to do.
        if self.num_replica_hosts <= 0:
            for name in by_host:
                ray.kill(self.hosts.pop(name), no_restart=True)
                self._host_watches.pop(name).cancel()

    # ------------------------------------------------------------------- fencing, life cycle

    def fence(self) -> None:
        """Have every host stop leading (the broker's session is gone, or must be)."""
        for host in self.hosts.values():
            host.fence.remote()

    def restore_all(self) -> asyncio.Task:
        """Give every host its replicas back as ZooKeeper has them (fenced while the session
        turned out to be alive), trying a host again until it took them: nothing else would,
        since the controller, seeing no broker come or go, sends nothing. Cancel the task if
        the broker is fenced again meanwhile."""
        return asyncio.ensure_future(self._restore_all())

    async def _restore_all(self) -> None:
        pending = list(self.hosts)
        while pending:
            results = await asyncio.gather(*(self._recreate_host(name) for name in pending),
                                           return_exceptions=True)
            failed = []
            for name, result in zip(pending, results, strict=True):
                if isinstance(result, asyncio.CancelledError):
                    raise result
                if isinstance(result, Exception):
                    log.warning("replica host %s of broker %d did not take its replicas back "
                                "(%r): trying again in %.0f s", name, self.broker_id, result,
                                RESTORE_RETRY_S)
                    failed.append(name)
            pending = failed
            if pending:
                await asyncio.sleep(RESTORE_RETRY_S)

    def stop_watching(self) -> None:
        """Recreate no host from now on (the broker is shutting down)."""
        self._closing = True
        for watch in self._host_watches.values():
            watch.cancel()
        if self._resolving is not None:
            self._resolving.cancel()

    async def close(self) -> None:
        """Close every host (its replicas flush and close their logs)."""
        await asyncio.gather(
            *(host.close.remote() for host in self.hosts.values()),
            return_exceptions=True,
        )

    async def _watch_host(self, name: str, handle: Any) -> None:
        """Recreate a replica host that dies while this broker lives.

        In Kafka a replica cannot die without its broker; here its host is a process of its
        own. The host answers its lifeline call only by dying, so this costs nothing while it
        lives and notices at once when it goes. The logs survive on disk, so a new host reopens
        them (recovering torn tails) and takes each partition's current state from ZooKeeper,
        the same leader epochs included.
        """
        try:
            await self._publish_data_port(name, handle)
            await handle.lifeline.remote()
        except asyncio.CancelledError:
            raise
        except Exception as error:
            if self.hosts.get(name) is handle and not self._closing:
                log.warning("replica host %s of broker %d died (%s): recreating it", name,
                            self.broker_id, type(error).__name__)
                self.hosts.pop(name, None)
                await self._recreate_host(name)

    async def _publish_data_port(self, name: str, handle: Any) -> None:
        """Publish where the host `name` listens (a host that dies meanwhile is recreated, and
        its successor published, by the watch)."""
        store = self._store()
        if store is None:
            return  # made before its broker reached ZooKeeper: `publish_data_ports` will
        try:
            address = DataPortAddress(*await handle.data_port_address.remote())
            await asyncio.to_thread(publish_data_port, store, name, address)
        except Exception as error:  # its clients still find it through Ray
            log.warning("replica host %s of broker %d: its data port address is not published "
                        "(%r)", name, self.broker_id, error)

    async def _recreate_host(self, name: str) -> None:
        """Give a host its replicas again, as ZooKeeper has them now (after the host was
        recreated, or fenced while the session turned out to be alive)."""
        hosted = [tp for tp in self.replica_states if self.host_name(*tp) == name]
        store = self._store()
        if not hosted or store is None:
            return
        states = PartitionStateStore(store)
        current = await asyncio.to_thread(
            lambda: {tp: states.read_partition_state(*tp) for tp in hosted})
        pools = await self._leader_hosts(
            {found.value.leader for found in current.values() if found is not None})
        requests = []
        for tp in hosted:
            request = self.replica_states[tp]
            found = current.get(tp)
            if found is not None:
                request = self._with_leader_host(dataclasses.replace(
                    request, leader=found.value.leader, leader_epoch=found.value.leader_epoch,
                    isr=tuple(found.value.isr), zk_version=found.version), pools)
                stored = self.replica_states[tp]
                # Kept unless a newer LeaderAndIsr came meanwhile: a follower whose leader's
                # host is still unknown is found from here (`_resolve_leader_hosts`).
                if (request.leader_epoch, request.zk_version) >= (stored.leader_epoch,
                                                                  stored.zk_version):
                    self.replica_states[tp] = request
            requests.append(request)
        applied = await self._apply_on_hosts({name: requests})
        if applied.errors:
            log.warning("replica host %s of broker %d did not take back %s", name,
                        self.broker_id, applied.errors)

    # ----------------------------------------------------------------------- what they hold

    async def describe_replicas(self, topic: str | None = None) -> list[dict[str, Any]]:
        """Every replica this broker hosts (of `topic` only, if given), as its host sees it."""
        calls = [asyncio.wait_for(asyncio.wrap_future(host.describe.remote(topic).future()),
                                  HOST_ANSWER_TIMEOUT_S)
                 for host in self.hosts.values()]
        # A host that does not answer (paused, dying) leaves its replicas out.
        found = await asyncio.gather(*calls, return_exceptions=True)
        return [replica for replicas in found if not isinstance(replicas, BaseException)
                for replica in replicas]

    async def replica_pid(self, topic: str, partition: int) -> int | None:
        """The process id of the host of one of this broker's replicas (None: no such host)."""
        handle = self.hosts.get(self.host_name(topic, partition))
        return None if handle is None else await handle.pid.remote()

    async def host_pids(self) -> dict[str, int]:
        """The process id of each of this broker's replica hosts."""
        names = list(self.hosts)
        pids = await asyncio.gather(*(self.hosts[name].pid.remote() for name in names),
                                    return_exceptions=True)
        return {name: pid for name, pid in zip(names, pids, strict=True)
                if isinstance(pid, int)}


async def _failures(calls: dict[str, Any], partitions: dict[str, list[tuple[str, int]]],
                    ) -> PartitionErrors:
    """Await each replica host's call and gather what failed, by partition: all of a host's
    `partitions` when its call raised, else what its reply lists."""
    names = list(calls)
    replies = await asyncio.gather(*(calls[name] for name in names), return_exceptions=True)
    errors: dict[TopicPartition, ErrorReply] = {}
    for name, reply in zip(names, replies, strict=True):
        if isinstance(reply, BaseException):
            failed = error_reply(ErrorCode.UNKNOWN_SERVER_ERROR, repr(reply))
            errors.update({TopicPartition(*tp): failed for tp in partitions[name]})
        else:
            errors.update(reply.errors)
    return PartitionErrors(errors)
