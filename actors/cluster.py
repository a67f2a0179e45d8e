"""The public topology API: start or join a cluster, shape its topics, get clients.

    from rafka.actors.cluster import Cluster
    cluster = Cluster.start(brokers=3)          # embedded ZooKeeper + local Ray
    cluster.create_topic("orders", partitions=6, replication_factor=3,
                         config={"min.insync.replicas": 2})
    producer = cluster.producer(acks="all")
"""

from __future__ import annotations

import contextlib
import functools
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import ray

from rafka.actors.broker_nodes import choose_node, node_resource
from rafka.actors.clients.consumer import Consumer
from rafka.actors.clients.group_consumer import (
    GroupConsumer,
    fetch_committed,
    store_committed,
)
from rafka.actors.clients.members import ConsumerGroupHandle, start_members
from rafka.actors.clients.producer import Producer
from rafka.actors.config import BrokerConfig
from rafka.actors.errors import BrokerUnavailableError, RequestTimedOutError, raise_for
from rafka.actors.naming import (
    broker_id_of,
    broker_name,
    cluster_namespace,
    is_replica_host_of,
    replica_host_name,
)
from rafka.actors.offsets_topic import OFFSETS_TOPIC, ensure_offsets_topic
from rafka.actors.runtime import init_ray, named_actors
from rafka.actors.server.broker import BrokerActor
from rafka.actors.stack import LocalStack
from rafka.actors.topics import alter_topic_config, create_topic
from rafka.common.topic_partition import TopicPartition
from rafka.common.waiting import wait_until
from rafka.coordination.admin import TopicAdmin
from rafka.coordination.election import read_controller
from rafka.coordination.errors import BrokerIdInUseError, UnknownTopicError
from rafka.coordination.groups import GroupStore
from rafka.coordination.registration import read_brokers
from rafka.coordination.security import ClusterCredentials, as_credentials
from rafka.coordination.store import ClusterStore
from rafka.coordination.validation import validate_topic_name
from rafka.wire.listeners import parse_listener, parse_listeners

# What Cluster's calls raise when a wait runs out is the clients' RequestTimedOutError.
_wait_for = functools.partial(wait_until, error=RequestTimedOutError, interval_s=0.05)
# How often a detached broker's creation looks for a node to live on while none fits.
NODE_WAIT_S = 1.0


class Cluster:
    """A rafka cluster: its ZooKeeper chroot, its Ray namespace and its broker actors.

    Why this class is large: it is the user's one facade, as Kafka's AdminClient is, and every
    operation a user has on a cluster (start or join it, stop and start brokers, create,
    describe, alter and delete topics, reassign partitions, make clients, read groups' offsets)
    is a method here. Each is a short shell over the part that does the work (`TopicAdmin`,
    the controller through ZooKeeper, the broker actors, the clients); much of its length is
    the waiting that makes each call return once the cluster has done it. Splitting the facade
    would give the user several objects to hold for one cluster.
    """

    def __init__(
        self,
        name: str,
        stack: LocalStack,
        *,
        broker_config: dict[str, Any] | None = None,
        broker_overrides: Mapping[int, Mapping[str, Any]] | None = None,
        detached: bool = False,
        broker_resources: dict[str, float] | None = None,
        zk_credentials: ClusterCredentials | str | None = None,
    ) -> None:
        self.name = name
        self.namespace = cluster_namespace(name)
        self.stack = stack
        self.data_dir = Path(stack.data_dir)
        self.broker_config = dict(broker_config or {})
        # Settings of single brokers, over `broker_config` (one server.properties per broker, in
        # Kafka): kept for the broker's restarts.
        self.broker_overrides = {broker: dict(config)
                                 for broker, config in (broker_overrides or {}).items()}
        for config in [self.broker_config, *self.broker_overrides.values()]:
            # Refuse a bad config before any broker starts.
            BrokerConfig.from_dict({**self.broker_config, **config})
        self.detached = detached
        # Custom Ray resources each broker asks for, e.g. {"rafka_broker": 1} offered once per
        # node, so that brokers (and so their replicas) spread one per node.
        self.broker_resources = dict(broker_resources or {})
        # Every ZooKeeper session of the cluster holds these (Kafka's zookeeper.set.acl=true):
        # this handle's, the brokers' and the group members'.
        self.zk_credentials = as_credentials(zk_credentials)
        self.store = ClusterStore(stack.zk_address, name,
                                  credentials=self.zk_credentials).start()
        self.store.ensure_layout()
        self.admin = TopicAdmin(self.store)
        self._brokers: dict[int, Any] = {}
        # The node each detached broker created here lives on (`actors/broker_nodes.py`).
        self._broker_nodes: dict[int, str] = {}

    # --------------------------------------------------------------------- start, join

    @classmethod
    def start(
        cls,
        brokers: int = 3,
        *,
        name: str = "rafka",
        zk: str | None = None,
        ray_address: str | None = None,
        data_dir: str | Path | None = None,
        broker_config: dict[str, Any] | None = None,
        broker_overrides: Mapping[int, Mapping[str, Any]] | None = None,
        detached: bool = False,
        broker_resources: dict[str, float] | None = None,
        kafka_listeners: str | None = None,
        zk_credentials: ClusterCredentials | str | None = None,
        timeout_s: float = 120.0,
    ) -> Cluster:
        """Start `brokers` brokers, on an embedded ZooKeeper and local Ray unless told otherwise.

        `broker_config` applies to every broker, `broker_overrides` to the brokers it names
        (e.g. `{2: {"broker.rack": "b"}}`). `broker_resources` are custom Ray resources each
        broker requires (see cluster.yaml). `kafka_listeners` ("PLAINTEXT://127.0.0.1:9092")
        makes every broker serve Kafka's wire protocol, broker `i` on the port plus `i` (port 0:
        each a free port); `bootstrap_servers()` says where. `zk_credentials`
        (`ClusterCredentials` or "user:password") protect the cluster's znodes with digest
        ACLs, as Kafka's `zookeeper.set.acl=true` does: without them nobody may change them.
        """
        validate_topic_name(name)  # it names a chroot and a namespace: the same rules apply
        if kafka_listeners is not None:
            broker_overrides = _with_listeners(kafka_listeners, brokers, broker_overrides)
        stack = LocalStack.start(zk=zk, ray_address=ray_address, data_dir=data_dir)
        cluster = None
        try:
            cluster = cls(name, stack, broker_config=broker_config,
                          broker_overrides=broker_overrides, detached=detached,
                          broker_resources=broker_resources, zk_credentials=zk_credentials)
            starts = [cluster._create_broker(broker_id, timeout_s)
                      for broker_id in range(brokers)]
            ray.get(starts, timeout=timeout_s)
            cluster.wait_for_controller(timeout_s)
        except BaseException:
            if cluster is not None:
                for handle in cluster._brokers.values():
                    ray.kill(handle, no_restart=True)
                cluster.store.close()
            stack.stop()
            raise
        return cluster

    @classmethod
    def connect(
        cls, zk: str, name: str = "rafka", *, ray_address: str | None = "auto",
        zk_credentials: ClusterCredentials | str | None = None,
    ) -> Cluster:
        """Join a running cluster: its brokers are found in the Ray namespace `rafka-<name>`.
        Without the cluster's `zk_credentials`, if it has some, the handle may only look."""
        init_ray(ray_address, namespace=cluster_namespace(name))
        stack = LocalStack.start(zk=zk, ray_address=ray_address)
        return cls(name, stack, zk_credentials=zk_credentials)

    def _create_broker(self, broker_id: int, timeout_s: float = 120.0) -> Any:
        options: dict[str, Any] = {
            "name": broker_name(broker_id),
            "namespace": self.namespace,
            "max_restarts": 0,
        }
        if self.detached:
            # A detached broker outlives the driver that started it, so Ray is what restarts
            # it when its process or its node dies (the broker then starts itself). With
            # `broker_resources`, it is pinned to the node chosen for it now, where its logs
            # will be: it waits for that node to come back.
            options["lifetime"] = "detached"
            options["max_restarts"] = -1
        if self.broker_resources:
            options["resources"] = dict(self.broker_resources)
            if self.detached:
                options["resources"].update(node_resource(self._node_for(broker_id, timeout_s)))
        handle = BrokerActor.options(**options).remote(
            broker_id,
            self.name,
            str(self.stack.zk_address),
            self.namespace,
            str(self.data_dir / f"broker-{broker_id}"),
            {**self.broker_config, **self.broker_overrides.get(broker_id, {})},
            # Beside the config, not in it: the config is described and printed.
            zk_credentials=self.zk_credentials,
        )
        self._brokers[broker_id] = handle
        return handle.start.remote()

    def _node_for(self, broker_id: int, timeout_s: float) -> str:
        """The address of the node broker `broker_id` lives on: chosen once, among the nodes
        with room for it (their `broker_resources`, less what the other brokers living there
        ask for), waiting up to `timeout_s` for one to join the cluster."""
        deadline = time.monotonic() + timeout_s
        while (address := self._broker_nodes.get(broker_id)) is None:
            homes = {**{other: info.host for other, info in read_brokers(self.store).items()},
                     **self._broker_nodes}
            homes.pop(broker_id, None)
            address = choose_node(ray.nodes(), self.broker_resources, Counter(homes.values()))
            if address is not None:
                self._broker_nodes[broker_id] = address
            elif time.monotonic() > deadline:
                raise BrokerUnavailableError(
                    f"no Ray node offers {self.broker_resources} for broker {broker_id} "
                    f"within {timeout_s:g} s: start a node with them (`ray start --resources`)")
            else:
                time.sleep(NODE_WAIT_S)
        return address

    def _broker(self, broker_id: int) -> Any:
        handle = self._brokers.get(broker_id)
        if handle is None:
            try:
                handle = ray.get_actor(broker_name(broker_id), namespace=self.namespace)
            except ValueError:
                raise BrokerUnavailableError(f"broker {broker_id} is not running") from None
            self._brokers[broker_id] = handle
        return handle

    # --------------------------------------------------------------------------- brokers

    def brokers(self) -> list[dict[str, Any]]:
        """The registered (live) brokers, as in `/brokers/ids`."""
        return [
            {"id": broker_id, "host": info.host, "rack": info.rack, "actor": info.actor,
             "endpoints": list(info.endpoints)}
            for broker_id, info in sorted(read_brokers(self.store).items())
        ]

    def bootstrap_servers(self) -> str:
        """Where Kafka clients connect (their `bootstrap.servers`): every live broker's
        Kafka listener as host:port, comma-separated; empty if none serves Kafka's protocol."""
        endpoints = [parse_listener(endpoint)
                     for _broker_id, info in sorted(read_brokers(self.store).items())
                     for endpoint in info.endpoints[:1]]
        return ",".join(f"{endpoint.host}:{endpoint.port}" for endpoint in endpoints)

    def controller(self) -> int | None:
        """The id of the broker that is controller now, None while there is none."""
        found = read_controller(self.store)
        return found.value.brokerid if found else None

    def wait_for_controller(self, timeout_s: float = 60.0) -> int:
        def controller_plus_one() -> int | None:  # truthy for controller 0 too
            controller = self.controller()
            return None if controller is None else controller + 1

        found = _wait_for(controller_plus_one, timeout_s, "a controller")
        assert found is not None  # wait_until answers only a truthy result
        return found - 1

    def stop_broker(self, broker_id: int, *, graceful: bool = True) -> None:
        """Stop a broker. Graceful: it resigns and unregisters first; else it is killed, and
        ZooKeeper notices when its session times out (as when a machine dies).

        Returns once Ray has forgotten its actors. Their processes may run a few milliseconds
        longer, and a follower's last fetch may still land: a caller that needs them silent
        waits for their PIDs to exit (as the fault tests do)."""
        handle = self._broker(broker_id)
        if graceful:
            with contextlib.suppress(Exception):  # dying anyway
                ray.get(handle.shutdown.remote(), timeout=30)
        # Its replica hosts die with it, at once: in Kafka replicas live in the broker's
        # process, and a host outliving its broker would go on fetching and answering.
        replicas = self._named_actors(lambda name: is_replica_host_of(name, broker_id))
        ray.kill(handle, no_restart=True)
        for name in replicas:
            with contextlib.suppress(ValueError):
                ray.kill(ray.get_actor(name, namespace=self.namespace), no_restart=True)
        self._brokers.pop(broker_id, None)
        _wait_for(lambda: not any(self._actor_exists(name)
                                  for name in [broker_name(broker_id), *replicas]),
                  30, f"broker {broker_id}'s actors to go")

    def kill_broker(self, broker_id: int) -> None:
        """Kill a broker's actor outright (its replicas die with it)."""
        self.stop_broker(broker_id, graceful=False)

    def start_broker(self, broker_id: int, timeout_s: float = 60.0,
                     config: Mapping[str, Any] | None = None) -> None:
        """Start (or restart) a broker; it rejoins as follower and catches up. `config`
        overrides the cluster's broker settings for this broker alone, from now on."""
        if config:
            overrides = {**self.broker_overrides.get(broker_id, {}), **config}
            BrokerConfig.from_dict({**self.broker_config, **overrides})
            self.broker_overrides[broker_id] = overrides
        try:
            ray.get(self._create_broker(broker_id, timeout_s), timeout=timeout_s)
        except BaseException:
            # A broker that could not register must not linger holding its name.
            handle = self._brokers.pop(broker_id, None)
            if handle is not None:
                ray.kill(handle, no_restart=True)
            raise

    def _actor_exists(self, name: str) -> bool:
        try:
            ray.get_actor(name, namespace=self.namespace)
        except ValueError:
            return False
        return True

    # ---------------------------------------------------------------------------- topics

    def create_topic(
        self,
        name: str,
        partitions: int = 1,
        replication_factor: int = 1,
        config: dict[str, Any] | None = None,
        *,
        wait: bool = True,
        timeout_s: float = 60.0,
    ) -> None:
        """Create a topic; with `wait`, return once every partition has a leader."""
        create_topic(self.store, name, partitions, replication_factor, config)
        if wait:
            _wait_for(lambda: self._all_online(name), timeout_s,
                      f"every partition of {name!r} to have a leader")

    def _all_online(self, topic: str) -> bool:
        """Every partition has a leader, and every live replica knows its role."""
        description = self.admin.describe_topic(topic)
        live = {broker["id"] for broker in self.brokers()}
        expected: dict[int, set[int]] = {}
        for partition, state in description.states.items():
            if state is None or state.value.leader < 0:
                return False
            for broker in description.assignment.value.partitions[partition]:
                if broker in live:
                    expected.setdefault(broker, set()).add(partition)
        replicas, complete = self._replicas_of(topic, set(expected))
        return complete and all(
            (broker, partition) in replicas
            and replicas[(broker, partition)]["role"] in ("leader", "follower")
            for broker, partitions in expected.items()
            for partition in partitions
        ) and self._known_everywhere(topic, len(description.states), live)

    def _known_everywhere(self, topic: str, partitions: int, brokers: set[int],
                          timeout_s: float = 10.0) -> bool:
        """Whether every broker's metadata cache (what clients are answered from, kept by the
        controller) names a leader for each of the topic's partitions."""
        calls = []
        for broker in sorted(brokers):
            with contextlib.suppress(BrokerUnavailableError):
                calls.append(self._broker(broker).metadata.remote([topic]))
        try:
            answers = ray.get(calls, timeout=timeout_s)
        except (ray.exceptions.GetTimeoutError, ray.exceptions.RayActorError):
            return False
        return len(answers) == len(brokers) and all(
            len(known := answer["topics"].get(topic, {})) == partitions
            and all(state["leader"] >= 0 for state in known.values()) for answer in answers)

    def _replicas_of(
        self, topic: str, brokers: set[int], timeout_s: float = 30.0
    ) -> tuple[dict[tuple[int, int], dict[str, Any]], bool]:
        """What each of `brokers` says of its replicas of `topic`, by (broker, partition); and
        whether every broker answered in time (one still starting on a busy machine may not)."""
        calls = {}
        for broker in sorted(brokers):
            with contextlib.suppress(BrokerUnavailableError):
                calls[broker] = self._broker(broker).describe_replicas.remote(topic)
        found: dict[tuple[int, int], dict[str, Any]] = {}
        complete = len(calls) == len(brokers)
        deadline = time.monotonic() + timeout_s
        for call in calls.values():
            try:
                replicas = ray.get(call, timeout=max(0.0, deadline - time.monotonic()))
            except (ray.exceptions.GetTimeoutError, ray.exceptions.RayActorError):
                complete = False
                continue
            for facts in replicas:
                found[(facts["broker"], facts["partition"])] = facts
        return found, complete

    def replica_hosts(self, topic: str, partition: int) -> dict[int, Any]:
        """The replica-host actor of each replica of `topic`-`partition`, by broker id (for
        tools and benchmarks that ask the replicas themselves, as `bench/latency.py` does)."""
        replicas = self.admin.describe_topic(topic).assignment.value.partitions.get(partition)
        if replicas is None:
            raise UnknownTopicError(f"{topic} has no partition {partition}")
        brokers = read_brokers(self.store)
        return {broker: ray.get_actor(replica_host_name(
                    broker, topic, partition, brokers[broker].replica_hosts),
                    namespace=self.namespace)
                for broker in replicas if broker in brokers}

    def add_partitions(self, name: str, total: int, *, wait: bool = True,
                       timeout_s: float = 60.0) -> None:
        """Grow a topic to `total` partitions (shrinking is refused, as in Kafka). Producers
        use the new partitions from their next metadata refresh; groups rebalance to them."""
        self.admin.add_partitions_auto(name, total)
        if wait:
            _wait_for(lambda: self._all_online(name), timeout_s,
                      f"the new partitions of {name!r} to have leaders")

    def list_topics(self) -> list[str]:
        return self.admin.list_topics()

    def describe_topic(self, name: str) -> dict[str, Any]:
        """The topic's id (KIP-516) and config, and each partition's leader, replicas, ISR,
        leader epoch and high watermark."""
        description = self.admin.describe_topic(name)
        leaders = {state.value.leader for state in description.states.values()
                   if state is not None and state.value.leader >= 0}
        # Where a leader is unreachable, the description says what ZooKeeper says.
        described, _complete = self._replicas_of(name, leaders, timeout_s=10)
        partitions = []
        for partition, replicas in description.assignment.value.partitions.items():
            state = description.states.get(partition)
            leader = state.value.leader if state else -1
            entry = {
                "partition": partition,
                "leader": leader,
                "replicas": list(replicas),
                "isr": list(state.value.isr) if state else [],
                "leader_epoch": state.value.leader_epoch if state else -1,
                "high_watermark": None,
                "log_end_offset": None,
            }
            facts = described.get((leader, partition))
            if facts is not None and facts["role"] == "leader":
                entry["high_watermark"] = facts["high_watermark"]
                entry["log_end_offset"] = facts["log_end_offset"]
            partitions.append(entry)
        return {"name": name, "topic_id": description.assignment.value.topic_id,
                "config": dict(description.config), "partitions": partitions,
                "marked_for_deletion": description.marked_for_deletion}

    def describe_replicas(self, name: str) -> list[dict[str, Any]]:
        """Every replica of topic `name` as its broker's host sees it (Kafka's
        kafka-log-dirs --describe, with more): role, leader epoch, log end and high watermark;
        a leader's view of its followers (where each fetched, when each was last caught up),
        and a follower's of its fetching (when its leader last answered, its last error). A
        broker that does not answer within 10 s is left out."""
        self.admin.describe_topic(name)  # UnknownTopicError for a topic that does not exist
        described, _complete = self._replicas_of(name, set(read_brokers(self.store)),
                                                 timeout_s=10)
        return [described[key] for key in sorted(described)]

    def alter_topic_config(self, name: str, updates: dict[str, Any]) -> dict[str, str]:
        """Set config overrides (a value of None removes one) and return the topic's overrides
        now. Every replica of the topic applies them within a second or so: retention,
        segment rolling, max.message.bytes, min.insync.replicas, cleanup.policy."""
        return alter_topic_config(self.store, name, updates)

    def delete_topic(self, name: str, *, wait: bool = True, timeout_s: float = 60.0) -> None:
        """Delete a topic, and with `wait` return once it is gone. A broker holding a replica
        of it that is down holds the deletion up until it is back, as in Kafka: the name stays
        taken meanwhile, and a timeout says which brokers it waits for (it goes on)."""
        self.admin.request_topic_deletion(name)
        if not wait:
            return
        try:
            _wait_for(lambda: not self.admin.topic_exists(name), timeout_s,
                      f"topic {name!r} to be deleted")
        except RequestTimedOutError as timed_out:
            try:
                holding = self.admin.read_assignment(name).value.brokers
            except UnknownTopicError:
                return  # gone just now
            down = sorted(holding - set(read_brokers(self.store)))
            if not down:
                raise
            raise RequestTimedOutError(
                f"{timed_out}: brokers {down} hold replicas of it and are down; the deletion "
                f"finishes when they are back (start them, or wait for them)") from None

    def elect_preferred_leaders(self) -> list[tuple[str, int]]:
        """Move leadership back to each partition's preferred replica where it is in sync."""
        controller = self.wait_for_controller()
        reply = raise_for(ray.get(self._broker(controller).elect_preferred_leaders.remote(),
                                  timeout=60))
        return [tuple(tp) for tp in reply["moved"]]

    # ---------------------------------------------------------------------- reassignment

    def add_broker(self, broker_id: int | None = None, *, timeout_s: float = 60.0) -> int:
        """Start one more broker (the next free id unless told) and return its id once it is
        registered. It holds nothing until topics are created or replicas reassigned to it."""
        if broker_id is None:
            taken = set(read_brokers(self.store)) | set(self._brokers)
            taken |= {broker_id for broker_id in map(broker_id_of, self._named_actors(
                lambda name: broker_id_of(name) is not None)) if broker_id is not None}
            broker_id = max(taken, default=-1) + 1
        elif broker_id in read_brokers(self.store):
            raise BrokerIdInUseError(f"broker {broker_id} is registered already: choose "
                                     f"another id, or leave it out for the next free one")
        self.start_broker(broker_id, timeout_s)
        _wait_for(lambda: broker_id in read_brokers(self.store), timeout_s,
                  f"broker {broker_id} to register")
        return broker_id

    def reassign_partitions(
        self,
        targets: Mapping[tuple[str, int], Sequence[int]],
        *,
        wait: bool = True,
        timeout_s: float = 300.0,
    ) -> None:
        """Move replicas: `{(topic, partition): [new replicas, the first preferred leader]}`.

        Written to `/admin/reassign_partitions` for the controller, as Kafka's tool does. New
        replicas catch up and join the ISR before the old ones leave; leadership moves last;
        clients keep running. With `wait`, return once every partition is on its new replicas.
        Refused with a typed error for an unknown topic, partition or broker, a broker named
        twice, or while another reassignment is in progress.
        """
        normal = {TopicPartition(topic, partition): tuple(replicas)
                  for (topic, partition), replicas in targets.items()}
        self.admin.request_reassignment(normal)
        if wait:
            self.wait_for_reassignment(targets, timeout_s)

    def wait_for_reassignment(
        self, targets: Mapping[tuple[str, int], Sequence[int]], timeout_s: float = 300.0
    ) -> None:
        """Return once these partitions are on their new replicas, led by one of them."""
        normal = {TopicPartition(topic, partition): tuple(replicas)
                  for (topic, partition), replicas in targets.items()}
        _wait_for(lambda: self._reassigned(normal), timeout_s,
                  f"the reassignment of {len(normal)} partition(s) to finish")

    def _reassigned(self, targets: Mapping[TopicPartition, tuple[int, ...]]) -> bool:
        if set(self.reassignment_in_progress()) & {tuple(tp) for tp in targets}:
            return False
        for tp, replicas in targets.items():
            description = self.admin.describe_topic(tp.topic)
            state = description.states.get(tp.partition)
            if (description.assignment.value.partitions.get(tp.partition) != replicas
                    or state is None or state.value.leader not in replicas):
                return False
        return True

    def reassignment_in_progress(self) -> dict[tuple[str, int], list[int]]:
        """What is left of the reassignment under way: `{(topic, partition): target replicas}`
        (empty when there is none)."""
        pending = self.admin.read_reassignment()
        if pending is None:
            return {}
        return {(tp.topic, tp.partition): list(r) for tp, r in pending.value.items()}

    # --------------------------------------------------------------------------- clients

    def producer(self, **config: Any) -> Producer:
        """A producer (Kafka's settings as keywords: acks="all", linger_ms=5, ...)."""
        return Producer(self.namespace, zookeeper=self.store, **config)

    def consumer(
        self,
        topics: Iterable[str] | None = None,
        *,
        group: str | None = None,
        on_partitions_revoked: Callable[[set], object] | None = None,
        on_partitions_assigned: Callable[[set], object] | None = None,
        **config: Any,
    ) -> Consumer:
        """A consumer. With a group it subscribes to `topics` and shares their partitions with
        the group's other members; without, it reads every partition of `topics`."""
        if group is not None:
            if topics is None:
                raise ValueError("a group consumer subscribes to topics: pass them")
            return GroupConsumer(
                self.namespace, str(self.stack.zk_address), self.name, topics,
                on_partitions_revoked=on_partitions_revoked,
                on_partitions_assigned=on_partitions_assigned,
                zk_credentials=self.zk_credentials, group_id=group, **config,
            )
        consumer = Consumer(self.namespace, zookeeper=self.store, **config)
        if topics is not None:
            consumer.assign_topics(topics)
        return consumer

    def consumer_group(
        self, topics: str | Iterable[str], group: str, members: int = 2, **config: Any
    ) -> ConsumerGroupHandle:
        """A group run by rafka: `members` Consumer actors, each reading in its own process."""
        topics = [topics] if isinstance(topics, str) else list(topics)
        return start_members(self, topics, group, members, config)

    def committed_offsets(
        self, group: str, partitions: Iterable[tuple[str, int]]
    ) -> dict[tuple[str, int], int | None]:
        """A group's committed offsets (None where nothing is committed)."""
        wanted = [TopicPartition(*tp) for tp in partitions]
        found: dict[tuple[str, int], int | None] = dict.fromkeys(wanted)
        if self.admin.topic_exists(OFFSETS_TOPIC):
            found.update(
                fetch_committed(Consumer(self.namespace).metadata, group, wanted, 30).items())
        groups = GroupStore(self.store)
        for tp in wanted:  # offsets.storage=zookeeper
            if found[tp] is None:
                versioned = groups.read_offset(group, tp.topic, tp.partition)
                found[tp] = None if versioned is None else versioned.value
        return found

    def commit_offsets(
        self, group: str, offsets: dict[tuple[str, int], int], timeout_s: float = 30.0
    ) -> None:
        """Commit offsets for a group through its offset manager (as a pipeline does once its
        batch is consumed); CommitFailedError if that does not complete in time."""
        ensure_offsets_topic(self.store)
        store_committed(Consumer(self.namespace).metadata, group, offsets, timeout_s)

    def partition_count(self, topic: str) -> int:
        """How many partitions `topic` has (UnknownTopicError if it does not exist)."""
        return Consumer(self.namespace).metadata.partition_count(topic)

    def offset_bounds(self, topic: str) -> dict[int, tuple[int, int]]:
        """Each partition's (log start offset, high watermark): what a consumer can read."""
        reader = Consumer(self.namespace)
        partitions = [(topic, p) for p in range(reader.metadata.partition_count(topic))]
        starts, ends = reader.beginning_offsets(partitions), reader.end_offsets(partitions)
        return {tp.partition: (starts[tp], ends[tp]) for tp in starts}

    def leader_nodes(self, topic: str) -> dict[int, str]:
        """Each partition of `topic` that has a leader, and the Ray node id its leader lives
        on: where a reader runs to take the records the leader's host puts in the object
        store without a copy (`stream_dataset`'s blocks; pipelines/examples/topic_training.py).
        A leader that moves makes this stale, as any metadata."""
        states = self.admin.describe_topic(topic).states
        leaders = {partition: state.value.leader for partition, state in states.items()
                   if state is not None and state.value.leader >= 0}
        nodes = {broker_id: ray.get(self._broker(broker_id).describe.remote())["node_id"]
                 for broker_id in set(leaders.values())}
        return {partition: nodes[broker_id] for partition, broker_id in sorted(leaders.items())}

    def list_groups(self) -> list[str]:
        return GroupStore(self.store).list_groups()

    def describe_group(self, group: str) -> dict[str, Any]:
        """Members, assignment, committed offset, log end offset and lag per partition."""
        groups = GroupStore(self.store)
        members = groups.members(group)
        topics = sorted({t for sub in members.values() for t in sub.subscription}
                        | set(groups.store.children_or_empty(f"/consumers/{group}/owners")))
        reader = Consumer(self.namespace)
        wanted = [(topic, p) for topic in topics if self.admin.topic_exists(topic)
                  for p in range(self.admin.read_assignment(topic).value.partition_count)]
        with_offsets: dict[TopicPartition, int | None] = {}
        if self.admin.topic_exists(OFFSETS_TOPIC):
            with_offsets = fetch_committed(reader.metadata, group, wanted, timeout_s=30)
        for topic in topics:  # offsets.storage=zookeeper
            for partition, offset in groups.read_offsets(group, topic).items():
                if with_offsets.get(TopicPartition(topic, partition)) is None:
                    with_offsets[TopicPartition(topic, partition)] = offset
        partitions = []
        for topic in topics:
            if not self.admin.topic_exists(topic):
                continue
            owners = groups.owners(group, topic)
            count = self.admin.read_assignment(topic).value.partition_count
            ends = reader.end_offsets([(topic, p) for p in range(count)])
            for partition in range(count):
                committed = with_offsets.get(TopicPartition(topic, partition))
                end = ends[TopicPartition(topic, partition)]
                partitions.append({
                    "topic": topic,
                    "partition": partition,
                    "member": owners.get(partition),
                    "committed_offset": committed,
                    "log_end_offset": end,
                    "lag": None if committed is None else max(0, end - committed),
                })
        reader.close()
        return {
            "group": group,
            "members": {member: sorted(sub.subscription) for member, sub in members.items()},
            "partitions": partitions,
        }

    # ------------------------------------------------------------------------- shutdown

    def topic_exists(self, name: str) -> bool:
        return self.admin.topic_exists(name)

    def close(self) -> None:
        """Let go of the cluster, leaving it running: close this handle's ZooKeeper session.
        (`shutdown` stops the brokers.)"""
        with contextlib.suppress(Exception):  # a session already gone is closed enough
            self.store.close()

    def shutdown(self) -> None:
        """Stop every broker of this cluster, then what `start()` started (ZooKeeper, Ray)."""
        ids = set(self._brokers)
        ids |= {broker_id for broker_id in map(broker_id_of, self._named_actors(
                lambda name: broker_id_of(name) is not None)) if broker_id is not None}
        for broker_id in sorted(ids):
            with contextlib.suppress(BrokerUnavailableError):
                self.stop_broker(broker_id)
        self.store.close()
        self.stack.stop()

    def _named_actors(self, predicate: Callable[[str], bool]) -> list[str]:
        return [name for name in named_actors(self.namespace) if predicate(name)]

    def __enter__(self) -> Cluster:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.shutdown()


def _with_listeners(
    listeners: str, brokers: int, overrides: Mapping[int, Mapping[str, Any]] | None
) -> dict[int, dict[str, Any]]:
    """`overrides` with broker `i` listening on each of `listeners`' ports plus `i` (0 stays
    0)."""
    bases = parse_listeners(listeners)
    merged = {broker: dict(config) for broker, config in (overrides or {}).items()}
    for broker in range(brokers):
        own = ",".join(str(base._replace(port=base.port + broker if base.port else 0))
                       for base in bases)
        merged.setdefault(broker, {}).setdefault("listeners", own)
    return merged
