"""Broker: a named Ray actor per broker id. It holds the broker's ZooKeeper session, registers
`/brokers/ids/<id>`, competes for controller (and hosts the Controller when it wins), keeps the
metadata cache, and writes its leaders' ISR changes to ZooKeeper. Its replicas are its
ReplicaHostPool's (`actors/server/replica_host_pool.py`): the replica-host actors on its own Ray
node (`num.replica.hosts`), to which the controller's LeaderAndIsr requests are passed (one call
per host, carrying all its partitions).

Kazoo calls back on its own threads; everything the broker does with its state happens on its
asyncio loop, where those callbacks are handed with `call_soon_threadsafe`.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import os
import time
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any

import ray

from rafka.actors import metrics
from rafka.actors.config import BrokerConfig
from rafka.actors.controller import control_frames
from rafka.actors.controller.control_frames import ControlAnswer
from rafka.actors.controller.controller import Controller
from rafka.actors.controller.recovery import RecoveryPolicy
from rafka.actors.dataport.tls import client_context, data_port_tls, server_context
from rafka.actors.errors import ErrorCode, error_reply
from rafka.actors.logs import log_actor_lines
from rafka.actors.messages import (
    ErrorReply,
    IsrChange,
    IsrWritten,
    LeaderAndIsrRequest,
    PartitionErrors,
    ProducerIdAndEpoch,
    UpdateMetadataRequest,
)
from rafka.actors.metadata_cache import MetadataCache, read_metadata
from rafka.actors.naming import broker_name
from rafka.actors.runtime import run_at_server_priority
from rafka.actors.server.control_endpoint import ControlEndpoint
from rafka.actors.server.replica_host_pool import ReplicaHostPool
from rafka.actors.server.transaction_verifications import TransactionVerifications
from rafka.actors.stalls import watch_for_stalls
from rafka.actors.txn.coordinator import TransactionCoordinator
from rafka.actors.txn.transaction_state import TRANSACTION_STATE_TOPIC
from rafka.common.topic_partition import TopicPartition
from rafka.common.waiting import wait_until_async
from rafka.coordination.broker_config import read_broker_config
from rafka.coordination.data_ports import read_data_port
from rafka.coordination.election import ControllerElection
from rafka.coordination.errors import (
    BrokerIdInUseError,
    CoordinationError,
    StaleVersionError,
    ZNodeExistsError,
)
from rafka.coordination.models import BrokerInfo, PartitionState, Versioned
from rafka.coordination.partition_state import PartitionStateStore
from rafka.coordination.registration import BrokerRegistration
from rafka.coordination.security import ClusterCredentials, as_credentials
from rafka.coordination.store import ClusterStore, SessionEvent
from rafka.coordination.watches import ClusterWatches
from rafka.wire.listeners import Listener, parse_listeners

if TYPE_CHECKING:
    from rafka.actors.kafka.listener import KafkaListener

log = logging.getLogger(__name__)

# How long a broker Ray restarted waits before it dies again when it could not start.
RESTART_PAUSE_S = 5.0
# How long a LeaderAndIsr waits for this broker's registration to be marked ours: the moment
# between the znode's creation and the registering thread seeing it (see _registered_within).
REGISTRATION_GRACE_S = 5.0
# How long a metadata request waits for a starting broker to fill its metadata cache.
METADATA_WAIT_S = 30.0


class Broker:
    """One rafka broker. Start it with `start()` after creating the actor.

    Why this class is large: every call the cluster makes on a broker (the controller's
    requests, rafka's clients' metadata and transaction calls, fault injection) must be a
    method of the actor's class; most are short shells over the replica-host pool, the
    metadata cache and the transaction coordinator, which do the work.
    """

    def __init__(
        self,
        broker_id: int,
        cluster_name: str,
        zk_address: str,
        namespace: str,
        data_dir: str,
        config: dict[str, Any] | None = None,
        zk_credentials: ClusterCredentials | str | None = None,
    ) -> None:
        run_at_server_priority()
        log_actor_lines()
        self._stall_watch = watch_for_stalls(f"broker {broker_id}")
        self.broker_id = broker_id
        self.cluster_name = cluster_name
        self.namespace = namespace
        self.data_dir = Path(data_dir)
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.raw_config = dict(config or {})
        self.config = BrokerConfig.from_dict(self.raw_config)
        self.dynamic_config: dict[str, str] = {}
        # What clients are told without a dynamic advertised.listeners, by listener name: the
        # setting given (a listener it lacks is advertised as bound).
        self._static_advertised: dict[str, Listener] = {}
        self.zk_address = self.config.zookeeper_connect or zk_address
        # Not part of `config`, which is described and printed.
        self.zk_credentials = as_credentials(zk_credentials)
        self.node_id = ray.get_runtime_context().get_node_id()
        self.controller_epoch = -1
        self.store: ClusterStore | None = None
        # This broker's replicas, on its replica hosts (Kafka's ReplicaManager).
        self.replica_hosts = ReplicaHostPool(
            broker_id, namespace, self.node_id, self.data_dir, self.raw_config,
            self.config.num_replica_hosts, lambda: self.store,
            lambda: (self.control_endpoint.endpoint, self._control_token))
        # The last LeaderAndIsr applied to each replica here (the pool's, read by the
        # listener, the group and the transaction coordinators).
        self.replica_states: dict[TopicPartition, LeaderAndIsrRequest] = \
            self.replica_hosts.replica_states
        self.registration: BrokerRegistration | None = None
        self.election: ControllerElection | None = None
        self.controller: Controller | None = None
        self.loop: asyncio.AbstractEventLoop | None = None
        self._shutting_down = False
        # Cut off from ZooKeeper: the task that fences the replicas once the session must have
        # expired, and whether it did (see `_on_session`).
        self._granted_session_timeout_ms = self.config.zookeeper_session_timeout_ms
        self._cut_off: asyncio.Task | None = None
        self._fenced_while_cut_off = False
        self._unfencing: asyncio.Future | None = None
        self.kafka_listener: KafkaListener | None = None
        # The transactional ids of the `__transaction_state` partitions this broker leads, for
        # Kafka clients (through the listener) and rafka's producers (the methods below).
        self.transactions = TransactionCoordinator(self)
        # What metadata requests are answered from: the controller keeps it current. Until it
        # is filled (at start, from ZooKeeper), metadata requests wait.
        self.metadata_cache = MetadataCache()
        self._metadata_filled = asyncio.Event()
        # Where the controller's requests come in (`control_endpoint.py`), opened with the
        # token every broker derives from the cluster's ZooKeeper credentials, over mutual TLS
        # when the data ports speak it; the controller this broker may become connects to the
        # other brokers' the same way.
        self._control_token = control_frames.control_token(
            None if self.zk_credentials is None
            else f"{self.zk_credentials.user}:{self.zk_credentials.password}")
        self._links_tls = data_port_tls(
            self.config.security_inter_broker_protocol, self.config.ssl_keystore_location,
            self.config.ssl_truststore_location, self.config.ssl_key_password)
        self.control_endpoint = ControlEndpoint(
            ray.util.get_node_ip_address(), self._control_token,
            {control_frames.LEADER_AND_ISR: self.leader_and_isr,
             control_frames.UPDATE_METADATA: self.update_metadata,
             control_frames.STOP_REPLICAS: self.stop_replicas,
             control_frames.UPDATE_TOPIC_CONFIG: self.update_topic_config,
             control_frames.UPDATE_PARTITION_STATES: self.update_partition_states,
             control_frames.VERIFY_TRANSACTION: self.verify_transaction},
            None if self._links_tls is None else server_context(self._links_tls))
        # KIP-890: the leader hosts' questions to transaction coordinators, answered here or
        # put to the coordinator's broker.
        self.verifications = TransactionVerifications(
            broker_id, self.transactions, self.find_transaction_coordinator,
            lambda broker: self.metadata_cache.brokers.get(broker), self._control_token,
            None if self._links_tls is None else client_context(self._links_tls))
        # This broker's dynamic settings in ZooKeeper, and the registration update the last
        # change of its advertised listener made.
        self._config_watch: Any = None
        self._registration_update: asyncio.Future | None = None
        if _was_restarted():
            # Ray restarted this actor (its process or its node died): nobody will call
            # start(), so the broker starts itself, from the logs on this node's disk.
            asyncio.get_running_loop().create_task(self._start_after_restart())

    # ------------------------------------------------------------------------ life cycle

    async def _start_after_restart(self) -> None:
        """Start a broker Ray restarted; one that cannot start dies, for Ray to try again.

        A restarted broker registers, is sent its replicas by the controller and catches up,
        as a Kafka broker does when systemd restarts it. If it cannot (ZooKeeper unreachable,
        its old registration not yet expired past the wait), dying after a pause hands the retry
        to Ray's restart policy instead of a loop of our own that could leave half a start.
        """
        try:
            # Its hosts start beside its registration: the controller sends its replicas
            # back as soon as it is registered (the hosts need the control endpoint first).
            await self.control_endpoint.start()
            self.replica_hosts.prestart()
            await self.start()
            await self.replica_hosts.publish_data_ports()
            log.warning("broker %d restarted by Ray on node %s and registered again",
                        self.broker_id, self.node_id)
        except Exception:
            log.exception("broker %d, restarted by Ray, could not start: exiting for Ray to "
                          "restart it again in %.0f s", self.broker_id, RESTART_PAUSE_S)
            await asyncio.sleep(RESTART_PAUSE_S)
            os._exit(1)

    async def start(self, register_timeout_s: float | None = None) -> dict[str, Any]:
        """Connect to ZooKeeper, register, and compete for controller."""
        self.loop = asyncio.get_running_loop()
        store = ClusterStore(
            self.zk_address,
            self.cluster_name,
            session_timeout_ms=self.config.zookeeper_session_timeout_ms,
            credentials=self.zk_credentials,
        )
        await asyncio.to_thread(store.start)
        await asyncio.to_thread(store.ensure_layout)
        self.store = store
        self.transactions.start()
        self._granted_session_timeout_ms = store.session_timeout_ms
        store.add_session_listener(lambda event: self._call_soon(self._on_session, event))
        # Read before the listener starts, so the registration says the address to advertise
        # from the first; the watch below keeps it current.
        self.dynamic_config = (await asyncio.to_thread(
            read_broker_config, store, self.broker_id)).value
        endpoints = await self._start_kafka_listener()
        control_endpoint = await self.control_endpoint.start()
        info = BrokerInfo(
            node_id=self.broker_id,
            actor=broker_name(self.broker_id),
            # The Ray node's address, which tells nodes apart where hostnames may not.
            host=ray.util.get_node_ip_address(),
            rack=self.config.broker_rack,
            replica_hosts=self.config.num_replica_hosts,
            endpoints=endpoints,
            listener_security_protocol_map=self._security_protocols(),
            control_endpoint=control_endpoint,
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
        # Until the controller's first UpdateMetadata comes (it sends one to every broker that
        # registers), metadata is answered from what ZooKeeper says now, read once.
        self.metadata_cache.fill(await asyncio.to_thread(read_metadata, store))
        self._metadata_filled.set()
        self._config_watch = ClusterWatches(store).watch_broker_config(
            self.broker_id, lambda config: self._call_soon(self._on_dynamic_config, config))
        self.election = ControllerElection(
            store,
            self.broker_id,
            on_elected=lambda epoch: self._call_soon(self._on_elected, epoch),
            on_resigned=lambda: self._call_soon(self._on_resigned),
        )
        self.election.start()
        return {"broker_id": self.broker_id, "node_id": self.node_id, "host": info.host}

    async def _start_kafka_listener(self) -> tuple[str, ...]:
        """Serve Kafka's protocol if `listeners` says where; return the endpoints to register."""
        if not self.config.listeners:
            return ()
        listeners = parse_listeners(self.config.listeners)
        advertised = {endpoint.name: endpoint for endpoint in parse_listeners(
            self.config.advertised_listeners)} if self.config.advertised_listeners else {}
        for listener in listeners:
            if listener.name not in advertised and listener.host in ("0.0.0.0", "::"):
                # Bound to every interface: clients are told this node's address.
                advertised[listener.name] = listener._replace(
                    host=ray.util.get_node_ip_address())
        self._static_advertised = advertised
        # Imported here, not at the top: Kafka's protocol schemas (kafka-python) cost every
        # process that imports them about 8 MB, and the replica hosts and clients, which
        # import this module through the package, never serve Kafka's protocol.
        from rafka.actors.kafka.listener import KafkaListener

        self.kafka_listener = KafkaListener(self, listeners, self._advertised(),
                                            self.config.socket_request_max_bytes)
        return tuple(map(str, await self.kafka_listener.start()))

    def _security_protocols(self) -> tuple[tuple[str, str], ...]:
        """The registration's listener_security_protocol_map: each listener's protocol."""
        if self.kafka_listener is None:
            return ()
        return tuple((listener.name, self.kafka_listener.protocol_map[listener.name].value)
                     for listener in self.kafka_listener.listeners)

    def _advertised(self) -> dict[str, Listener]:
        """What Kafka clients are told, by listener name: the dynamic advertised.listeners if
        one is set (and valid), else the setting the broker started with; a listener named in
        neither is advertised as bound."""
        dynamic = self.dynamic_config.get("advertised.listeners")
        if dynamic:
            try:
                return {endpoint.name: endpoint for endpoint in parse_listeners(dynamic)}
            except ValueError as error:  # written to ZooKeeper by hand, past AlterConfigs
                log.warning("broker %d: ignoring the dynamic advertised.listeners %r: %s",
                            self.broker_id, dynamic, error)
        return self._static_advertised

    def _on_dynamic_config(self, versioned: Versioned[dict[str, str]] | None) -> None:
        """Apply this broker's dynamic settings (`DYNAMIC_BROKER_SETTINGS`). A new advertised
        listener goes into the registration; the controller sees it there and tells every
        broker (UpdateMetadata), and clients find it in their next Metadata."""
        self.dynamic_config = dict(versioned.value) if versioned is not None else {}
        if self.kafka_listener is None or self.registration is None:
            return
        before = self.kafka_listener.advertised
        self.kafka_listener.advertise(self._advertised())
        if self.kafka_listener.advertised == before:
            return
        log.info("broker %d advertises %s to Kafka clients (was %s)", self.broker_id,
                 ",".join(map(str, self.kafka_listener.advertised)),
                 ",".join(map(str, before)))
        info = dataclasses.replace(
            self.registration.info,
            endpoints=tuple(map(str, self.kafka_listener.advertised)))
        self._registration_update = asyncio.ensure_future(
            asyncio.to_thread(self.registration.update_info, info))

    def replica_host_for(self, topic: str, partition: int) -> Any:
        """The host of this broker's replica of the partition, None if it holds none."""
        return self.replica_hosts.replica_host_for(topic, partition)

    def _call_soon(self, function: Any, *args: Any) -> None:
        """From a kazoo thread onto this actor's loop."""
        assert self.loop is not None
        self.loop.call_soon_threadsafe(function, *args)

    def _on_registered(self) -> None:
        log.info("broker %d registered", self.broker_id)

    def _on_session(self, event: SessionEvent) -> None:
        """Fence the replicas once a lost connection has lasted a session timeout.

        ZooKeeper expires a session it has not heard from for that long, but the client learns
        of it only when it reconnects: a broker cut off from ZooKeeper (and not from Ray) would
        go on leading meanwhile, while the controller has moved its partitions elsewhere. Past
        the timeout the session is gone for certain, so the broker stops leading then, as it
        does on an expiry it is told of (`_on_unregistered`). Should the connection come back
        with the session alive after all (a server that granted a longer timeout than asked),
        the replicas take back what ZooKeeper says they are.
        """
        if event is SessionEvent.SUSPENDED:
            if self._cut_off is None and not self._shutting_down:
                self._cut_off = asyncio.ensure_future(
                    self._fence_when_expired(self._granted_session_timeout_ms / 1000))
            return
        if self._cut_off is not None:
            self._cut_off.cancel()
            self._cut_off = None
        if event in (SessionEvent.CONNECTED, SessionEvent.RECONNECTED) and self.store is not None:
            self._granted_session_timeout_ms = self.store.session_timeout_ms
        if event is SessionEvent.RECONNECTED and self._fenced_while_cut_off:
            log.warning("broker %d reconnected to ZooKeeper with its session alive: its "
                        "replicas take back their roles from ZooKeeper", self.broker_id)
            self._stop_unfencing()
            self._unfencing = self.replica_hosts.restore_all()
        self._fenced_while_cut_off = False

    async def _fence_when_expired(self, timeout_s: float) -> None:
        await asyncio.sleep(timeout_s)
        log.warning("broker %d has been cut off from ZooKeeper for its session timeout (%.1f s): "
                    "its session is gone, fencing its replicas", self.broker_id, timeout_s)
        self._fenced_while_cut_off = True
        self._cut_off = None
        self._stop_unfencing()
        self.replica_hosts.fence()

    def _stop_unfencing(self) -> None:
        """A restore still under way would lead again what a new fence stops."""
        if self._unfencing is not None:
            self._unfencing.cancel()
            self._unfencing = None

    def _on_unregistered(self) -> None:
        # Our session expired: another broker may already lead our partitions. Lead nothing
        # until the controller, seeing us registered again, says what to do.
        if not self._shutting_down:
            log.warning("broker %d lost its ZooKeeper session: fencing its replicas",
                        self.broker_id)
        self._stop_unfencing()
        self.replica_hosts.fence()

    def _on_elected(self, epoch: int) -> None:
        assert self.store is not None and self.election is not None
        if self.controller is not None:
            self.controller.stop()
        fence = self.election.fence
        if fence is None or fence.epoch != epoch:
            return
        log.info("broker %d is controller at epoch %d", self.broker_id, epoch)
        # A step it cannot finish is retried within the session timeout, else it resigns
        # through the election (actors/controller/recovery.py).
        self.controller = Controller(
            self.store, self.broker_id, fence, self.namespace, election=self.election,
            recovery=RecoveryPolicy.for_session(self._granted_session_timeout_ms),
            control_token=self._control_token,
            control_ssl=None if self._links_tls is None else client_context(self._links_tls))
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
        self.replica_hosts.stop_watching()
        if self.kafka_listener is not None:
            await self.kafka_listener.close()
        await self.control_endpoint.close()
        self.transactions.close()
        self.verifications.close()
        if self.controller is not None:
            self.controller.stop()
            self.controller = None
        if self.election is not None:
            await asyncio.to_thread(self.election.stop)
        if self.registration is not None:
            await asyncio.to_thread(self.registration.unregister)
        await self.replica_hosts.close()
        if self.store is not None:
            await asyncio.to_thread(self.store.close)

    # ----------------------------------------------------------- the controller's requests

    async def leader_and_isr(
        self, controller_epoch: int, partitions: list[LeaderAndIsrRequest]
    ) -> PartitionErrors | ErrorReply:
        """Apply the controller's LeaderAndIsr to this broker's replicas, creating them: one
        call per replica host, carrying all of its partitions."""
        if controller_epoch < self.controller_epoch:
            return error_reply(
                ErrorCode.STALE_CONTROLLER_EPOCH,
                f"controller epoch {controller_epoch} < {self.controller_epoch}",
            )
        if not await self._registered_within(REGISTRATION_GRACE_S):
            return error_reply(
                ErrorCode.KAFKA_STORAGE_ERROR,
                f"broker {self.broker_id} is not registered in ZooKeeper",
            )
        self.controller_epoch = controller_epoch
        return await self.replica_hosts.leader_and_isr(controller_epoch, partitions)

    async def _registered_within(self, timeout_s: float) -> bool:
        """Whether this broker is registered in its current session, waiting up to `timeout_s`.

        The controller learns of a registration from its watch on `/brokers/ids`, which can
        fire before the registering thread has seen its own znode and marked it ours; refusing
        its LeaderAndIsr then would leave the replicas fenced until the controller's next
        resend (`Controller._leader_and_isr_answered`).
        """
        try:
            return await wait_until_async(
                lambda: self.registration is not None and self.registration.registered,
                timeout_s, "this broker's own registration", interval_s=0.05)
        except TimeoutError:
            return False

    async def update_topic_config(
        self, controller_epoch: int, topic: str, config: dict[str, Any]
    ) -> PartitionErrors | ErrorReply:
        """The controller says `topic`'s config changed: the hosts of its replicas here apply
        it, and a host recreated later is given it with its LeaderAndIsr."""
        if controller_epoch < self.controller_epoch:
            return error_reply(ErrorCode.STALE_CONTROLLER_EPOCH, "stale controller epoch")
        self.controller_epoch = controller_epoch
        return await self.replica_hosts.update_topic_config(topic, config)

    async def stop_replicas(
        self, controller_epoch: int, partitions: list[tuple[str, int]], delete: bool
    ) -> ErrorReply | None:
        """Stop (and with `delete`, remove from disk) replicas: topic deletion, reassignment."""
        if controller_epoch < self.controller_epoch:
            return error_reply(ErrorCode.STALE_CONTROLLER_EPOCH, "stale controller epoch")
        self.controller_epoch = controller_epoch
        await self.replica_hosts.stop_replicas(partitions, delete)
        return None

    # ------------------------------------------------------------------- ZooKeeper writes

    async def update_partition_states(self, changes: list[IsrChange]
                                      ) -> list[IsrWritten | ErrorReply]:
        """Leaders' ISR changes: conditional writes with this broker's session, one reply each
        (the new znode version, or NOT_LEADER_OR_FOLLOWER if someone moved the partition)."""
        assert self.store is not None
        if self.registration is None or not self.registration.registered:
            refused = error_reply(ErrorCode.NOT_LEADER_OR_FOLLOWER,
                                  f"broker {self.broker_id} is not registered")
            return [refused] * len(changes)
        states = PartitionStateStore(self.store)
        return await asyncio.to_thread(_write_isr_changes, states, changes)

    async def elect_preferred_leaders(
        self, partitions: list[tuple[str, int]] | None = None,
    ) -> dict[str, Any] | ErrorReply:
        """Preferred-leader election of `partitions` (None: all), if this broker is the
        controller: those that `moved`, and each one's `outcome` (an error code)."""
        if self.controller is None:
            return error_reply(ErrorCode.NOT_CONTROLLER, f"broker {self.broker_id} is not "
                                                         "the controller")
        outcomes = await self.controller.elect_preferred_leaders(
            None if partitions is None else [TopicPartition(*tp) for tp in partitions])
        return {"moved": [list(tp) for tp, error in outcomes.items() if error == 0],
                "outcomes": [[*tp, error] for tp, error in outcomes.items()]}

    # ------------------------------------------------------------------------- metadata

    async def metadata(self, topics: list[str] | None = None) -> dict[str, Any]:
        """Brokers, controller and, per topic, each partition's leader, epoch, ISR, replicas:
        from the metadata cache, without asking ZooKeeper. A topic asked for by name that the
        cache does not know may have been created a moment ago, before the controller's update
        reached this broker: ZooKeeper says, for those names only. A broker still starting
        answers once its cache is filled (a client asking every broker takes the first
        answer, never an empty one)."""
        await asyncio.wait_for(self._metadata_filled.wait(), METADATA_WAIT_S)
        answer = self.metadata_cache.metadata(topics)
        unknown = [topic for topic in topics or () if topic not in answer["topics"]]
        if unknown and self.store is not None:
            recent = MetadataCache()
            recent.apply(await asyncio.to_thread(read_metadata, self.store, unknown))
            found = recent.metadata(unknown)
            answer["topics"].update(found["topics"])
            answer["topic_ids"].update(found["topic_ids"])
        return answer

    def topic_name_of(self, topic_id: str) -> str | None:
        return self.metadata_cache.topic_names.get(topic_id)

    def partition_counts(self) -> dict[str, int]:
        return {topic: len(partitions)
                for topic, partitions in self.metadata_cache.topics.items()}

    def topic_id_of(self, topic: str) -> str | None:
        return self.metadata_cache.topic_ids.get(topic)

    def cached_partitions(self, topic: str) -> dict[int, dict[str, Any]] | None:
        return self.metadata_cache.metadata([topic])["topics"].get(topic)

    async def update_metadata(self, update: UpdateMetadataRequest) -> ErrorReply | None:
        """The controller's UpdateMetadata, for the metadata cache."""
        if not self.metadata_cache.apply(update):
            return error_reply(ErrorCode.STALE_CONTROLLER_EPOCH,
                               f"controller epoch {update.controller_epoch} < "
                               f"{self.metadata_cache.controller_epoch}")
        if update.full:  # a partial update alone is not a picture of the cluster
            self._metadata_filled.set()
        return None

    async def zookeeper_reads(self) -> int:
        """How many znodes this broker's ZooKeeper client has read (the tests count them)."""
        assert self.store is not None
        return self.store.reads

    async def describe(self) -> dict[str, Any]:
        return {
            "broker_id": self.broker_id,
            "node_id": self.node_id,
            "registered": bool(self.registration and self.registration.registered),
            "controller": bool(self.election and self.election.is_controller),
            "controller_epoch": self.election.epoch if self.election else None,
            "replicas": sorted(f"{topic}-{partition}" for topic, partition in self.replica_states),
            "replica_hosts": sorted(self.replica_hosts.hosts),
        }

    async def describe_replicas(self, topic: str | None = None) -> list[dict[str, Any]]:
        """Every replica this broker hosts (of `topic` only, if given), as its host sees it."""
        return await self.replica_hosts.describe_replicas(topic)

    async def ping(self) -> int:
        return self.broker_id

    async def restart_control_endpoint(self) -> str:
        """Drop the controller's connections and listen again (fault injection)."""
        return await self.control_endpoint.restart()

    async def control_stats(self) -> dict[str, Any]:
        """This broker's control endpoint, and, if it is the controller, how many connections
        it made to each broker's."""
        return {**self.control_endpoint.stats(),
                "controller_connections": None if self.controller is None
                else self.controller.channel.connections.connections_made()}

    async def kafka_listener_stats(self) -> dict[str, Any] | None:
        """What the Kafka listener's clients hold (`KafkaListener.stats`); None without one."""
        return None if self.kafka_listener is None else self.kafka_listener.stats()

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

    # ------------------------------------------------------------------ transactions
    # The transaction coordinator's requests for rafka's producers; each is refused with an
    # `ErrorReply` of Kafka's error code.

    async def find_transaction_coordinator(self, transactional_id: str) -> int | ErrorReply:
        """The broker that leads the id's `__transaction_state` partition."""
        partition = await self.transactions.partition_of(transactional_id)
        if partition is None:
            return error_reply(ErrorCode.COORDINATOR_NOT_AVAILABLE,
                               "creating __transaction_state: ask again")
        found = self.metadata_cache.metadata([TRANSACTION_STATE_TOPIC])["topics"]
        leader = found.get(TRANSACTION_STATE_TOPIC, {}).get(partition, {}).get("leader", -1)
        if leader < 0:
            return error_reply(ErrorCode.COORDINATOR_NOT_AVAILABLE,
                               f"{TRANSACTION_STATE_TOPIC}-{partition} has no leader yet")
        return leader

    async def verify_transaction(
        self, transactional_id: str, producer_id: int, producer_epoch: int,
        partitions: list[tuple[str, int]], forwarded: bool,
    ) -> ControlAnswer:
        """Whether `partitions` are in the producer's ongoing transaction, from its
        coordinator (KIP-890: a leader host asks before a transaction's first batch)."""
        return await self.verifications.verify(transactional_id, producer_id, producer_epoch,
                                               partitions, forwarded)

    async def init_transactions(self, transactional_id: str, timeout_ms: int,
                                expected: tuple[int, int] | None = None
                                ) -> ProducerIdAndEpoch | ErrorReply:
        error, producer_id, epoch = await self.transactions.init_producer_id(
            transactional_id, timeout_ms, expected)
        return _refused(error) or ProducerIdAndEpoch(producer_id, epoch)

    async def add_partitions_to_transaction(
        self, transactional_id: str, producer_id: int, producer_epoch: int,
        partitions: list[tuple[str, int]],
    ) -> ErrorReply | None:
        return _refused(await self.transactions.add_partitions(
            transactional_id, producer_id, producer_epoch,
            [(topic, partition) for topic, partition in partitions]))

    async def add_offsets_to_transaction(self, transactional_id: str, producer_id: int,
                                         producer_epoch: int, group_id: str
                                         ) -> ErrorReply | None:
        return _refused(await self.transactions.add_offsets(
            transactional_id, producer_id, producer_epoch, group_id))

    async def end_transaction(self, transactional_id: str, producer_id: int,
                              producer_epoch: int, commit: bool) -> ErrorReply | None:
        return _refused(await self.transactions.end_transaction(
            transactional_id, producer_id, producer_epoch, commit))

    async def published_data_port(self, host: str) -> tuple[Any, ...] | None:
        """Where replica host `host` (of any broker) last said it listens, as its broker
        published it in ZooKeeper: for this broker's hosts, whose followers cannot always
        learn it from the leader host through Ray (`actors.dataport.async_client`)."""
        if self.store is None:
            return None
        found = await asyncio.to_thread(read_data_port, self.store, host)
        return None if found is None else found.as_tuple()

    async def replica_host_of(self, topic: str, partition: int) -> str:
        """The name of the replica host that holds (or would hold) this broker's replica."""
        return self.replica_hosts.host_name(topic, partition)

    async def replica_pid(self, topic: str, partition: int) -> int | None:
        """The process id of the host of one of this broker's replicas (fault injection)."""
        return await self.replica_hosts.replica_pid(topic, partition)

    async def replica_host_pids(self) -> dict[str, int]:
        """The process id of each of this broker's replica hosts."""
        return await self.replica_hosts.host_pids()


def _refused(code: int) -> ErrorReply | None:
    """The reply to a transaction request the coordinator answered with `code` (None: done)."""
    return error_reply(ErrorCode(code), ErrorCode(code).name) if code else None


def _was_restarted() -> bool:
    """Whether Ray restarted this actor (after its process or its node died)."""
    with warnings.catch_warnings():
        # Ray's own property reads its deprecated `actor_id` inside.
        warnings.simplefilter("ignore", DeprecationWarning)
        return bool(ray.get_runtime_context().was_current_actor_reconstructed)


def _write_isr_changes(
    states: PartitionStateStore, changes: list[IsrChange]
) -> list[IsrWritten | ErrorReply]:
    replies: list[IsrWritten | ErrorReply] = []
    written = []
    for change in changes:
        new_state = PartitionState(change.leader, change.leader_epoch, tuple(change.isr),
                                   change.controller_epoch)
        try:
            version = states.update_leader_and_isr(change.topic, change.partition,
                                                   new_state, change.zk_version)
        except StaleVersionError as error:
            replies.append(error_reply(ErrorCode.NOT_LEADER_OR_FOLLOWER, str(error)))
            continue
        except CoordinationError as error:
            replies.append(error_reply(ErrorCode.REQUEST_TIMED_OUT, str(error)))
            continue
        replies.append(IsrWritten(version))
        written.append((change.topic, change.partition))
    if written:
        # Tell the controller, which keeps every partition's state.
        with contextlib.suppress(CoordinationError):
            states.write_isr_change_notification(written)
    return replies


# Ray's typed overloads of `remote` leave out actor options such as max_concurrency.
BrokerActor = ray.remote(num_cpus=0, max_concurrency=1000)(Broker)  # type: ignore[call-overload]

