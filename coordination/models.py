"""The values kept in znodes, as dataclasses, with their JSON in Kafka's field names.

`to_json()` gives the dict written to ZooKeeper and `from_json()` reads one back. Kafka writes
timestamps as strings of epoch milliseconds (`"timestamp": "1563294960412"`); so do we, and we
read either a string or a number. The `"version"` field inside a value is the format version of
that JSON (always 1 here, as in Kafka), not the znode version: the znode version comes with a
read as `Versioned.version` and is what conditional writes check.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from rafka.common.clock import wall_clock_ms
from rafka.common.topic_partition import TopicPartition

T = TypeVar("T")

FORMAT_VERSION = 1



@dataclass(frozen=True)
class Versioned(Generic[T]):
    """A value read from a znode with the znode version it had (pass it to a conditional write)."""

    value: T
    version: int


@dataclass(frozen=True)
class ControllerFence:
    """What a controller's writes are conditional on: the `/controller_epoch` it wrote on winning.

    A write fenced with it fails with `ControllerMovedError` once another controller has won,
    because winning bumps `/controller_epoch` (Kafka's `controllerEpochZkVersion` check).
    """

    epoch: int
    epoch_zk_version: int


@dataclass(frozen=True)
class BrokerInfo:
    """The registration `/brokers/ids/<node_id>`.

    `actor` is the name of the broker's Ray actor. `epoch` is not stored: it is Kafka's broker
    epoch, the czxid of the registration znode, filled in when read; it changes every time the
    broker registers again, so a bounce is visible even when the set of ids is not.
    """

    node_id: int
    actor: str
    host: str
    rack: str | None = None
    version: int = FORMAT_VERSION
    timestamp: int = field(default_factory=wall_clock_ms)
    epoch: int | None = field(default=None, compare=False)
    # How many replica-host actors hold the broker's replicas (0: one per replica): with the
    # topic and partition, it names the actor a client or follower sends to.
    replica_hosts: int = 0
    # Kafka's `endpoints`: where the broker serves Kafka's wire protocol, as
    # "NAME://host:port", one per listener (none when it does not).
    endpoints: tuple[str, ...] = ()
    # Kafka's `listener_security_protocol_map`: the security protocol of each endpoint's
    # listener name, as (name, protocol) pairs.
    listener_security_protocol_map: tuple[tuple[str, str], ...] = ()
    # Where the controller's requests reach the broker, "host:port" (None in the registration
    # of a broker that serves none, an older rafka's).
    control_endpoint: str | None = None

    def to_json(self) -> dict[str, Any]:
        written = {
            "node_id": self.node_id,
            "actor": self.actor,
            "host": self.host,
            "rack": self.rack,
            "replica_hosts": self.replica_hosts,
            "endpoints": list(self.endpoints),
            "listener_security_protocol_map": dict(self.listener_security_protocol_map),
            "version": self.version,
            "timestamp": str(self.timestamp),
        }
        if self.control_endpoint is not None:
            written["control_endpoint"] = self.control_endpoint
        return written

    @classmethod
    def from_json(cls, data: Mapping[str, Any], *, epoch: int | None = None) -> BrokerInfo:
        return cls(
            node_id=int(data["node_id"]),
            actor=str(data["actor"]),
            host=str(data["host"]),
            rack=data.get("rack"),
            replica_hosts=int(data.get("replica_hosts", 0)),
            endpoints=tuple(str(e) for e in data.get("endpoints") or ()),
            listener_security_protocol_map=tuple(
                (str(name), str(protocol))
                for name, protocol in (data.get("listener_security_protocol_map") or {}).items()),
            control_endpoint=(None if data.get("control_endpoint") is None
                              else str(data["control_endpoint"])),
            version=int(data.get("version", FORMAT_VERSION)),
            timestamp=int(data.get("timestamp", 0)),
            epoch=epoch,
        )


@dataclass(frozen=True)
class ControllerInfo:
    """The ephemeral `/controller`: who the controller is."""

    brokerid: int
    timestamp: int = field(default_factory=wall_clock_ms)
    version: int = FORMAT_VERSION

    def to_json(self) -> dict[str, Any]:
        return {
            "version": self.version,
            "brokerid": self.brokerid,
            "timestamp": str(self.timestamp),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ControllerInfo:
        return cls(
            brokerid=int(data["brokerid"]),
            timestamp=int(data.get("timestamp", 0)),
            version=int(data.get("version", FORMAT_VERSION)),
        )


@dataclass(frozen=True)
class TopicAssignment:
    """`/brokers/topics/<t>`: each partition's replicas, the first being its preferred leader,
    and the topic's id."""

    partitions: Mapping[int, tuple[int, ...]]
    version: int = FORMAT_VERSION
    # Kafka's topic id as text (`coordination.topic_ids`); None for a topic created before
    # topics had ids, until the controller gives it one.
    topic_id: str | None = None

    def __post_init__(self) -> None:
        # Normalise so that equality does not depend on lists versus tuples or key order.
        normal = {int(p): tuple(int(b) for b in r) for p, r in sorted(self.partitions.items())}
        object.__setattr__(self, "partitions", normal)

    @property
    def partition_count(self) -> int:
        return len(self.partitions)

    @property
    def replication_factor(self) -> int:
        return max((len(replicas) for replicas in self.partitions.values()), default=0)

    def replicas(self, partition: int) -> tuple[int, ...]:
        return self.partitions[partition]

    @property
    def brokers(self) -> set[int]:
        """Every broker holding a replica of the topic."""
        return {broker for replicas in self.partitions.values() for broker in replicas}

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "version": self.version,
            "partitions": {str(p): list(r) for p, r in self.partitions.items()},
        }
        if self.topic_id is not None:
            data["topic_id"] = self.topic_id
        return data

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> TopicAssignment:
        topic_id = data.get("topic_id")
        return cls(
            partitions={int(p): tuple(r) for p, r in data["partitions"].items()},
            version=int(data.get("version", FORMAT_VERSION)),
            topic_id=str(topic_id) if topic_id is not None else None,
        )


@dataclass(frozen=True)
class PartitionState:
    """`/brokers/topics/<t>/partitions/<p>/state`: Kafka's LeaderAndIsr plus the controller epoch.

    `version` is the JSON format version; the znode version comes with `Versioned`.
    """

    leader: int
    leader_epoch: int
    isr: tuple[int, ...]
    controller_epoch: int
    version: int = FORMAT_VERSION

    def __post_init__(self) -> None:
        object.__setattr__(self, "isr", tuple(int(b) for b in self.isr))

    def to_json(self) -> dict[str, Any]:
        return {
            "version": self.version,
            "leader": self.leader,
            "leader_epoch": self.leader_epoch,
            "isr": list(self.isr),
            "controller_epoch": self.controller_epoch,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> PartitionState:
        return cls(
            leader=int(data["leader"]),
            leader_epoch=int(data["leader_epoch"]),
            isr=tuple(data["isr"]),
            controller_epoch=int(data["controller_epoch"]),
            version=int(data.get("version", FORMAT_VERSION)),
        )


@dataclass(frozen=True)
class TopicDescription:
    """Everything ZooKeeper knows of a topic; `states[p]` is None until the controller writes it."""

    name: str
    assignment: Versioned[TopicAssignment]
    config: Mapping[str, str]
    states: Mapping[int, Versioned[PartitionState] | None]
    marked_for_deletion: bool = False


@dataclass(frozen=True)
class MemberSubscription:
    """`/consumers/<g>/ids/<member>`: what a consumer-group member subscribes to.

    `subscription` maps topic (or pattern) to the number of consumer streams, as in Kafka's old
    consumer; `pattern` is `"static"`, `"white_list"` or `"black_list"`.
    """

    subscription: Mapping[str, int]
    pattern: str = "static"
    timestamp: int = field(default_factory=wall_clock_ms)
    version: int = FORMAT_VERSION

    def to_json(self) -> dict[str, Any]:
        return {
            "version": self.version,
            "subscription": dict(self.subscription),
            "pattern": self.pattern,
            "timestamp": str(self.timestamp),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> MemberSubscription:
        return cls(
            subscription={str(t): int(n) for t, n in data.get("subscription", {}).items()},
            pattern=str(data.get("pattern", "static")),
            timestamp=int(data.get("timestamp", 0)),
            version=int(data.get("version", FORMAT_VERSION)),
        )


def topic_config_json(config: Mapping[str, str]) -> dict[str, Any]:
    """`/config/topics/<t>` as Kafka writes it: `{"version": 1, "config": {...}}`."""
    return {"version": FORMAT_VERSION, "config": dict(config)}


def isr_change_json(partitions: Iterable[TopicPartition]) -> dict[str, Any]:
    """An ISR change notification as Kafka writes it."""
    return {
        "version": FORMAT_VERSION,
        "partitions": [{"topic": t, "partition": p} for t, p in sorted(set(partitions))],
    }


def isr_change_from_json(data: Mapping[str, Any]) -> list[TopicPartition]:
    return [TopicPartition(str(e["topic"]), int(e["partition"])) for e in data["partitions"]]
