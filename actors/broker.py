"""Broker: a named Ray actor per broker id. It holds the broker's ZooKeeper session, registers
`/brokers/ids/<id>`, competes for controller (and hosts the Controller when it wins), creates and
owns its PartitionReplica actors on its own Ray node, and passes the controller's LeaderAndIsr
requests to them.

Kazoo calls back on its own threads; everything the broker does with its state happens on its
asyncio loop, where those callbacks are handed with `call_soon_threadsafe`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import time
from pathlib import Path
from typing import Any

import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from actors import metrics
from actors.config import BrokerConfig
from actors.controller import Controller
from actors.errors import ErrorCode, error_reply
from actors.naming import broker_name, replica_name
from actors.replica import PartitionReplicaActor
from coordination import layout
from coordination.election import ControllerElection
from coordination.errors import (
    BrokerIdInUseError,
    CoordinationError,
    StaleVersionError,
    ZNodeExistsError,
)
from coordination.models import BrokerInfo, PartitionState, TopicAssignment
from coordination.partition_state import PartitionStateStore
from coordination.registration import BrokerRegistration
from coordination.store import ClusterStore

log = logging.getLogger(__name__)


class Broker:
    """One rafka broker. Start it with `start()` after creating the actor."""

    def __init__(
        self,
        broker_id: int,
        cluster_name: str,
        zk_address: str,
        namespace: str,
        data_dir: str,
        config: dict[str, Any] | None = None,
    ) -> None:
        self.broker_id = broker_id
        self.cluster_name = cluster_name
        self.zk_address = zk_address
        self.namespace = namespace
        self.data_dir = Path(data_dir)
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.raw_config = dict(config or {})
        self.config = BrokerConfig.from_dict(self.raw_config)
        self.node_id = ray.get_runtime_context().get_node_id()
        self.replicas: dict[tuple[str, int], Any] = {}
        # The last LeaderAndIsr applied to each replica: a replica that dies is recreated from it.
        self.replica_states: dict[tuple[str, int], dict[str, Any]] = {}
        self._supervisor: asyncio.Task | None = None
        self.controller_epoch = -1
        self.store: ClusterStore | None = None
        self.registration: BrokerRegistration | None = None
        self.election: ControllerElection | None = None
        self.controller: Controller | None = None
        self.loop: asyncio.AbstractEventLoop | None = None
        self._shutting_down = False

    # ------------------------------------------------------------------------ life cycle

    async def start(self, register_timeout_s: float | None = None) -> dict[str, Any]:
        """Connect to ZooKeeper, register, and compete for controller."""
        self.loop = asyncio.get_running_loop()
        store = ClusterStore(
            self.zk_address,
            self.cluster_name,
            session_timeout_ms=self.config.zookeeper_session_timeout_ms,
        )
        await asyncio.to_thread(store.start)
        await asyncio.to_thread(store.ensure_layout)
        self.store = store
        info = BrokerInfo(
            node_id=self.broker_id,
            actor=broker_name(self.broker_id),
            host=socket.gethostname(),
            rack=self.config.broker_rack,
        )
        self.registration = BrokerRegistration(
            store,
            info,
            on_registered=lambda: self._call_soon(self._on_registered),
            on_unregistered=lambda: self._call_soon(self._on_unregistered),
        )
        # A broker that died a moment ago may still hold its znode until its session times
        # out; wait that long, as a restarted Kafka broker does.
        if register_timeout_s is None:
            register_timeout_s = self.config.zookeeper_session_timeout_ms / 1000 * 2 + 5
        deadline = time.monotonic() + register_timeout_s
        while True:
            try:
                await asyncio.to_thread(self.registration.register)
                break
            except (BrokerIdInUseError, ZNodeExistsError):
                if time.monotonic() > deadline:
                    raise
                await asyncio.sleep(0.25)
        self.election = ControllerElection(
            store,
            self.broker_id,
            on_elected=lambda epoch: self._call_soon(self._on_elected, epoch),
            on_resigned=lambda: self._call_soon(self._on_resigned),
        )
        self.election.start()
        self._supervisor = asyncio.ensure_future(self._supervise_replicas())
        return {"broker_id": self.broker_id, "node_id": self.node_id, "host": info.host}

    def _call_soon(self, function: Any, *args: Any) -> None:
        """From a kazoo thread onto this actor's loop."""
        assert self.loop is not None
        self.loop.call_soon_threadsafe(function, *args)

    def _on_registered(self) -> None:
        log.info("broker %d registered", self.broker_id)

    def _on_unregistered(self) -> None:
        # Our session expired: another broker may already lead our partitions. Lead nothing
        # until the controller, seeing us registered again, says what to do.
        if not self._shutting_down:
            log.warning("broker %d lost its ZooKeeper session: fencing its replicas",
                        self.broker_id)
        for replica in self.replicas.values():
            replica.fence.remote()

    def _on_elected(self, epoch: int) -> None:
        assert self.store is not None and self.election is not None
        if self.controller is not None:
            self.controller.stop()
        fence = self.election.fence
        if fence is None or fence.epoch != epoch:
            return
        log.info("broker %d is controller at epoch %d", self.broker_id, epoch)
        self.controller = Controller(self.store, self.broker_id, fence, self.namespace)
        self.controller.start()
        # Counted by the broker that takes over, once per election it wins (Kafka's
        # ControllerChangeRate is counted by every broker; summing here counts each change once).
        metrics.controller_changed(self.cluster_name, self.broker_id)

    def _on_resigned(self) -> None:
        if self.controller is not None and not self._shutting_down:
            log.info("broker %d is no longer controller", self.broker_id)
            self.controller.stop()
            self.controller = None

    async def shutdown(self) -> None:
        """Controlled shutdown: resign, unregister, close every replica, close the session."""
        self._shutting_down = True
        if self._supervisor is not None:
            self._supervisor.cancel()
        if self.controller is not None:
            self.controller.stop()
            self.controller = None
        if self.election is not None:
            await asyncio.to_thread(self.election.stop)
        if self.registration is not None:
            await asyncio.to_thread(self.registration.unregister)
        await asyncio.gather(
            *(replica.close.remote() for replica in self.replicas.values()),
            return_exceptions=True,
        )
        if self.store is not None:
            await asyncio.to_thread(self.store.close)

    # --------------------------------------------------------------------- replica actors

    def _replica(self, topic: str, partition: int, topic_config: dict[str, Any]) -> Any:
        key = (topic, partition)
        handle = self.replicas.get(key)
        if handle is None:
            handle = PartitionReplicaActor.options(
                name=replica_name(topic, partition, self.broker_id),
                namespace=self.namespace,
                # The log lives on this node's disk: the replica must run here.
                scheduling_strategy=NodeAffinitySchedulingStrategy(self.node_id, soft=False),
                get_if_exists=True,
            ).remote(
                topic,
                partition,
                self.broker_id,
                str(self.data_dir / f"{topic}-{partition}"),
                topic_config,
                self.raw_config,
                self.namespace,
            )
            self.replicas[key] = handle
        return handle

    async def leader_and_isr(
        self, controller_epoch: int, partitions: list[dict[str, Any]]
    ) -> dict[str, Any]:
        """Apply the controller's LeaderAndIsr to this broker's replicas, creating them."""
        if controller_epoch < self.controller_epoch:
            return error_reply(
                ErrorCode.STALE_CONTROLLER_EPOCH,
                f"controller epoch {controller_epoch} < {self.controller_epoch}",
            )
        if self.registration is None or not self.registration.registered:
            return error_reply(
                ErrorCode.KAFKA_STORAGE_ERROR,
                f"broker {self.broker_id} is not registered in ZooKeeper",
            )
        self.controller_epoch = controller_epoch
        for p in partitions:
            self.replica_states[(p["topic"], p["partition"])] = {
                **p, "controller_epoch": controller_epoch}
        replies = await asyncio.gather(
            *(
                self._replica(p["topic"], p["partition"], p.get("config", {}))
                .leader_and_isr.remote({**p, "controller_epoch": controller_epoch})
                for p in partitions
            ),
            return_exceptions=True,
        )
        errors = {
            f"{p['topic']}-{p['partition']}": repr(r) if isinstance(r, BaseException) else r
            for p, r in zip(partitions, replies, strict=True)
            if isinstance(r, BaseException) or r.get("error")
        }
        return {"error": 0, "failed": errors}

    async def stop_replicas(
        self, controller_epoch: int, partitions: list[tuple[str, int]], delete: bool
    ) -> dict[str, Any]:
        """Stop (and with `delete`, remove from disk) replicas: topic deletion, reassignment."""
        if controller_epoch < self.controller_epoch:
            return error_reply(ErrorCode.STALE_CONTROLLER_EPOCH, "stale controller epoch")
        self.controller_epoch = controller_epoch
        closing = []
        for topic, partition in partitions:
            self.replica_states.pop((topic, partition), None)
            handle = self.replicas.pop((topic, partition), None)
            if handle is not None:
                closing.append((handle, handle.close.remote(delete=delete)))
        for handle, done in closing:
            with contextlib.suppress(Exception):
                await done
            ray.kill(handle)
        return {"error": 0}

    async def _supervise_replicas(self, interval_s: float = 1.0) -> None:
        """Recreate replica actors that died while this broker lives.

        In Kafka a replica cannot die without its broker; here it is a process of its own. Its
        log survives on disk, so a new actor reopens it (recovering a torn tail) and takes the
        partition's current state from ZooKeeper, the same leader epoch included.
        """
        while True:
            await asyncio.sleep(interval_s)
            keys = list(self.replicas)
            pings = await asyncio.gather(
                *(self.replicas[key].pid.remote() for key in keys), return_exceptions=True
            )
            for key, ping in zip(keys, pings, strict=True):
                if isinstance(ping, ray.exceptions.RayActorError) and key in self.replicas:
                    await self._recreate_replica(key)

    async def _recreate_replica(self, key: tuple[str, int]) -> None:
        topic, partition = key
        log.warning("replica %s-%d on broker %d died: recreating it", topic, partition,
                    self.broker_id)
        self.replicas.pop(key, None)
        state = self.replica_states.get(key)
        if state is None or self.store is None:
            return
        current = await asyncio.to_thread(
            PartitionStateStore(self.store).read_partition_state, topic, partition)
        if current is not None:
            state = {**state, "leader": current.value.leader,
                     "leader_epoch": current.value.leader_epoch,
                     "isr": list(current.value.isr), "zk_version": current.version}
        handle = self._replica(topic, partition, state.get("config", {}))
        with contextlib.suppress(Exception):
            await handle.leader_and_isr.remote(state)

    # ------------------------------------------------------------------- ZooKeeper writes

    async def update_partition_state(
        self, topic: str, partition: int, state: dict[str, Any], expected_version: int
    ) -> dict[str, Any]:
        """A leader's ISR change: a conditional write with this broker's session."""
        assert self.store is not None
        if self.registration is None or not self.registration.registered:
            return error_reply(ErrorCode.NOT_LEADER_OR_FOLLOWER,
                               f"broker {self.broker_id} is not registered")
        new_state = PartitionState(
            leader=state["leader"],
            leader_epoch=state["leader_epoch"],
            isr=tuple(state["isr"]),
            controller_epoch=state["controller_epoch"],
        )
        states = PartitionStateStore(self.store)
        try:
            version = await asyncio.to_thread(
                states.update_partition_state, topic, partition, new_state, expected_version
            )
        except StaleVersionError as error:
            return error_reply(ErrorCode.NOT_LEADER_OR_FOLLOWER, str(error))
        except CoordinationError as error:
            return error_reply(ErrorCode.REQUEST_TIMED_OUT, str(error))
        # Tell the controller, which keeps every partition's state.
        with contextlib.suppress(CoordinationError):
            await asyncio.to_thread(states.write_isr_change_notification, [(topic, partition)])
        return {"error": 0, "version": version}

    async def elect_preferred_leaders(self) -> dict[str, Any]:
        """Preferred-leader election, if this broker is the controller."""
        if self.controller is None:
            return error_reply(ErrorCode.NOT_CONTROLLER, f"broker {self.broker_id} is not "
                                                         "the controller")
        moved = await self.controller.elect_preferred_leaders()
        return {"error": 0, "moved": [list(tp) for tp in moved]}

    # ------------------------------------------------------------------------- metadata

    async def metadata(self, topics: list[str] | None = None) -> dict[str, Any]:
        """Brokers, controller and, per topic, each partition's leader, epoch, ISR, replicas."""
        assert self.store is not None
        return await asyncio.to_thread(read_metadata, self.store, topics)

    async def describe(self) -> dict[str, Any]:
        return {
            "broker_id": self.broker_id,
            "node_id": self.node_id,
            "registered": bool(self.registration and self.registration.registered),
            "controller": bool(self.election and self.election.is_controller),
            "controller_epoch": self.election.epoch if self.election else None,
            "replicas": sorted(f"{topic}-{partition}" for topic, partition in self.replicas),
        }

    async def ping(self) -> int:
        return self.broker_id

    async def pid(self) -> int:
        return os.getpid()

    async def zookeeper_session(self) -> dict[str, Any]:
        """This broker's ZooKeeper session id and password, for fault injection: a client that
        joins the session with them and closes it expires the broker's session."""
        assert self.store is not None
        # None while the client is between connections (kazoo forgets the id until it is back).
        session_id, password = self.store.client.client_id or (None, None)
        return {"servers": self.store.base_address.servers, "session_id": session_id,
                "password": password}

    async def replica_pid(self, topic: str, partition: int) -> int | None:
        """The process id of one of this broker's replica actors (fault injection, tests)."""
        handle = self.replicas.get((topic, partition))
        return None if handle is None else await handle.pid.remote()


def read_metadata(store: ClusterStore, topics: list[str] | None) -> dict[str, Any]:
    """Cluster metadata straight from ZooKeeper, in one consistent-enough pass."""
    brokers = sorted(int(child) for child in store.children_or_empty(layout.BROKER_IDS))
    controller = store.read_optional(layout.CONTROLLER)
    names = topics if topics is not None else store.children_or_empty(layout.TOPICS)
    result: dict[str, Any] = {}
    for topic in names:
        assignment = store.read_optional(layout.topic_path(topic))
        if assignment is None:
            continue
        partitions = {}
        for partition, replicas in TopicAssignment.from_json(assignment.value).partitions.items():
            state = store.read_optional(layout.partition_state_path(topic, partition))
            value = state.value if state else {"leader": -1, "leader_epoch": -1, "isr": []}
            partitions[partition] = {
                "leader": value["leader"],
                "leader_epoch": value["leader_epoch"],
                "isr": list(value["isr"]),
                "replicas": list(replicas),
            }
        result[topic] = partitions
    return {
        "brokers": brokers,
        "controller": controller.value["brokerid"] if controller else None,
        "topics": result,
    }


BrokerActor = ray.remote(num_cpus=0, max_concurrency=1000)(Broker)
