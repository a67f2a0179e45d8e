"""Producer and consumer settings: Kafka's names, Kafka's defaults, checked once at creation.

``ProducerConfig.from_kwargs(linger_ms=5)`` and ``ProducerConfig.from_kwargs({"linger.ms": 5})``
mean the same: Python names and Kafka's dotted names are both accepted (a Kafka user can paste
a properties dict), and values may be strings as in a properties file ("5", "true"). A wrong
value or an unknown name raises ``InvalidConfigError`` naming the key, the value and what is
allowed ("did you mean ...?" for a misspelt name), before any actor is started. Each setting is
declared once, on its field (``rafka.common.config.setting``).

Where rafka's default differs from Kafka 3.x the field says why.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from rafka.common.config import INT32_MAX, ConfigDef, InvalidConfigError, Type, setting

__all__ = ["ConsumerConfig", "InvalidConfigError", "ProducerConfig"]

_ACKS = {"all": -1, "-1": -1, "0": 0, "1": 1}
# What rafka.logstore.compression can encode.
COMPRESSION_TYPES = ("none", "gzip", "snappy", "lz4", "zstd")
ASSIGNMENT_STRATEGIES = ("range", "roundrobin", "sticky")
# Kafka's class names for the same strategies, so a Java configuration can be pasted as it is.
_KAFKA_ASSIGNOR_CLASSES = {
    "org.apache.kafka.clients.consumer.RangeAssignor": "range",
    "org.apache.kafka.clients.consumer.RoundRobinAssignor": "roundrobin",
    "org.apache.kafka.clients.consumer.StickyAssignor": "sticky",
}


# -- validators of the settings no type or choice list describes: each takes the value and
# returns it normalised, or raises ValueError saying what is allowed -------------------------


def _acks(value: Any) -> int:
    normalised = None if isinstance(value, bool) else _ACKS.get(str(value).strip().lower())
    if normalised is None:
        raise ValueError('expected 0, 1, "all" or -1 ("all" is -1)')
    return normalised


def _not_blank(value: str) -> str:
    if not value.strip():
        raise ValueError("expected a non-empty string, or None for no group")
    return value


def _partitioner(value: Any) -> Any:
    if not callable(value):
        raise ValueError("expected a callable (key, num_partitions) -> partition")
    return value


def _assignment_strategy(value: Any) -> Any:
    if isinstance(value, str):
        name = _KAFKA_ASSIGNOR_CLASSES.get(value.strip(), value.strip().lower())
        if name in ASSIGNMENT_STRATEGIES:
            return name
    elif callable(getattr(value, "assign", None)) or callable(value):
        return value  # a user assignor (see rafka.actors.clients.assignors.PartitionAssignor)
    raise ValueError(
        f"expected one of {', '.join(ASSIGNMENT_STRATEGIES)}, or an assignor object with "
        "name and assign(members, partitions_per_topic, current_assignment)"
    )


# -- Kafka's CommonClientConfigs: the settings both clients have, declared once ----------------


def _transport() -> Any:
    # Not Kafka's: how a client's requests reach the replica hosts. "tcp", connections kept to
    # each host's data port (actors/dataport/blocking_client.py); "ray", an actor call each,
    # kept to measure against. docs/latency.md has the figures of both.
    return setting("transport", Type.STRING, "tcp", choices=("tcp", "ray"),
                   doc="How requests reach the replica hosts: tcp (kept connections) or ray "
                       "(an actor call each).")


def _client_id() -> Any:
    return setting("client.id", Type.STRING, "",
                   doc="A name for the client, in the brokers' logs and metrics.")


def _metadata_max_age_ms() -> Any:
    # How old cached metadata may get before it is fetched again, even without an error: how
    # soon a client sees partitions added to a topic.
    return setting("metadata.max.age.ms", Type.INT, 300_000, minimum=0,
                   doc="How old cached metadata may get before it is fetched again.")


# -- the settings ------------------------------------------------------------------------------


@dataclass(frozen=True)
class ProducerConfig:
    """How a producer batches, acknowledges and retries (Kafka's producer settings)."""

    CONFIG_DEF: ClassVar[ConfigDef]

    client_id: str = _client_id()
    # -1 is "all": the leader answers once every in-sync replica has the batch.
    acks: int = setting(
        "acks", Type.OBJECT, -1, validator=_acks,
        doc='How many replicas must have a batch before it is acknowledged: 0, 1 or "all".')
    # Unset (None) means Kafka 3.2+'s default: on, unless acks, retries or in-flight settings rule
    # it out, in which case quietly off. Set to True, a conflicting setting is an error instead.
    enable_idempotence: bool | None = setting(
        "enable.idempotence", Type.BOOLEAN, None, nullable=True,
        doc="Whether retries may not duplicate or reorder records; None: on if allowed.")
    max_in_flight_requests_per_connection: int = setting(
        "max.in.flight.requests.per.connection", Type.INT, 5, minimum=1,
        doc="How many produce requests to one partition may wait for an answer at once.")
    retries: int = setting(
        "retries", Type.INT, INT32_MAX, minimum=0,
        doc="How many times a failed batch is sent again, within delivery.timeout.ms.")
    retry_backoff_ms: int = setting(
        "retry.backoff.ms", Type.INT, 100, minimum=0,
        doc="How long to wait before sending a failed batch again.")
    # Unset (None) means Kafka's default: 120 s, or linger.ms + request.timeout.ms if that is
    # larger. Set explicitly, a value below that sum is an error, as in Kafka.
    delivery_timeout_ms: int | None = setting(
        "delivery.timeout.ms", Type.INT, None, minimum=0, nullable=True,
        doc="How long send() may take in all, retries included, before the batch fails.")
    request_timeout_ms: int = setting(
        "request.timeout.ms", Type.INT, 30_000, minimum=0,
        doc="How long to wait for the answer to one request.")
    metadata_max_age_ms: int = _metadata_max_age_ms()
    transport: str = _transport()
    # Kafka 3.x waits 0 ms; Kafka 4.0 changed it to 5 (KIP-1030) and rafka follows 4.0 because an
    # actor call costs about 1 ms whatever it carries: 5 ms of waiting buys batches that make
    # each call pay.
    linger_ms: int = setting(
        "linger.ms", Type.INT, 5, minimum=0,
        doc="How long a batch waits for more records before it is sent.")
    # Kafka's 16384 was sized for cheap network requests. An actor call costs about the same up
    # to hundreds of KB, and each batch costs the leader and every follower calls of their own,
    # so 256 KiB per partition moves sixteen times the records per call under load (RF 3
    # acks=all about 1.7 times the records/s of 64 KiB). A batch only fills under load, so
    # latency at low rates is linger.ms's as before. Set 16384 for Kafka's exact behaviour.
    batch_size: int = setting(
        "batch.size", Type.INT, 262_144, minimum=1,
        doc="The bytes of records one partition's batch holds at most.")
    compression_type: str = setting(
        "compression.type", Type.STRING, "none", choices=COMPRESSION_TYPES,
        doc="The codec batches are compressed with.")
    max_request_size: int = setting(
        "max.request.size", Type.INT, 1_048_576, minimum=1,
        doc="The largest produce request, and so the largest record.")
    # Kafka's: bytes of records that may wait to be sent before send() blocks, and for how long.
    buffer_memory: int = setting(
        "buffer.memory", Type.INT, 33_554_432, minimum=1,
        doc="The bytes of records that may wait to be sent before send() blocks.")
    max_block_ms: int = setting(
        "max.block.ms", Type.INT, 60_000, minimum=0,
        doc="How long send() blocks for buffer space or metadata before it fails.")
    # rafka's own: a callable(key, num_partitions) -> partition, Kafka's partitioner.class.
    partitioner: Callable[[bytes | None, int], int] | None = setting(
        "partitioner.class", Type.OBJECT, None, nullable=True, validator=_partitioner,
        doc="A callable(key, num_partitions) -> partition; None: Kafka's default partitioner.")
    transactional_id: str | None = setting(
        "transactional.id", Type.STRING, None, nullable=True,
        doc="The id a transactional producer keeps across restarts (fencing older instances); "
            "None: not transactional.")
    transaction_timeout_ms: int = setting(
        "transaction.timeout.ms", Type.INT, 60_000, minimum=1,
        doc="How long a transaction may stay open before the coordinator aborts it.")

    def __post_init__(self) -> None:
        self.CONFIG_DEF.normalise(self)
        if self.transactional_id == "":
            raise InvalidConfigError("transactional.id", "", "a non-empty string, or None")
        conflict = _idempotence_conflict(self)
        if self.transactional_id is not None and (
                self.enable_idempotence is False or conflict is not None):
            key, value, allowed = conflict or ("enable.idempotence", False, "true (or unset)")
            raise InvalidConfigError(key, value, f"{allowed} when transactional.id is set: a "
                                                 "transactional producer is idempotent")
        if self.enable_idempotence is None:
            object.__setattr__(self, "enable_idempotence", conflict is None)
        elif self.enable_idempotence and conflict:
            key, value, allowed = conflict
            raise InvalidConfigError(
                key, value, f"{allowed} when enable.idempotence=true (or set that to false)"
            )
        if self.delivery_timeout_ms is None:
            object.__setattr__(
                self, "delivery_timeout_ms", max(120_000, self.linger_ms + self.request_timeout_ms)
            )
        elif self.delivery_timeout_ms < self.linger_ms + self.request_timeout_ms:
            raise InvalidConfigError(
                "delivery.timeout.ms",
                self.delivery_timeout_ms,
                "must be >= linger.ms + request.timeout.ms "
                f"({self.linger_ms} + {self.request_timeout_ms})",
            )

    @classmethod
    def from_kwargs(
        cls, config: Mapping[str, Any] | None = None, /, **kwargs: Any
    ) -> ProducerConfig:
        """Settings from Python names and/or Kafka's dotted names (see the module docstring)."""
        return cls(**cls.CONFIG_DEF.parse(config, kwargs))


@dataclass(frozen=True)
class ConsumerConfig:
    """How a consumer fetches, commits and shares partitions (Kafka's consumer settings)."""

    CONFIG_DEF: ClassVar[ConfigDef]

    group_id: str | None = setting(
        "group.id", Type.STRING, None, nullable=True, validator=_not_blank,
        doc="The consumer group to join; None: no group (assign partitions yourself).")
    client_id: str = _client_id()
    auto_offset_reset: str = setting(
        "auto.offset.reset", Type.STRING, "latest", choices=("earliest", "latest", "none"),
        doc="Where to start without a committed offset, or past the log's ends.")
    # Unset (None) means Kafka 2.2+'s default: on with a group.id, off without one. Set to True
    # without a group.id it is an error, as in Kafka: there is nowhere to commit.
    enable_auto_commit: bool | None = setting(
        "enable.auto.commit", Type.BOOLEAN, None, nullable=True,
        doc="Whether positions are committed every auto.commit.interval.ms.")
    auto_commit_interval_ms: int = setting(
        "auto.commit.interval.ms", Type.INT, 5_000, minimum=0,
        doc="How often positions are committed when enable.auto.commit is on.")
    fetch_max_wait_ms: int = setting(
        "fetch.max.wait.ms", Type.INT, 500, minimum=0,
        doc="How long a fetch waits at the leader for fetch.min.bytes.")
    metadata_max_age_ms: int = _metadata_max_age_ms()
    fetch_min_bytes: int = setting(
        "fetch.min.bytes", Type.INT, 1, minimum=0,
        doc="The bytes a fetch waits for before the leader answers.")
    fetch_max_bytes: int = setting(
        "fetch.max.bytes", Type.INT, 52_428_800, minimum=1,
        doc="The bytes one fetch returns at most, all partitions together.")
    max_partition_fetch_bytes: int = setting(
        "max.partition.fetch.bytes", Type.INT, 1_048_576, minimum=1,
        doc="The bytes one fetch returns at most per partition.")
    max_poll_records: int = setting(
        "max.poll.records", Type.INT, 500, minimum=1,
        doc="The records one poll() returns at most.")
    session_timeout_ms: int = setting(
        "session.timeout.ms", Type.INT, 45_000, minimum=1,
        doc="How long the group waits for a silent member before it rebalances without it.")
    # How long offset lookups (end_offsets, position resets) retry before giving up.
    default_api_timeout_ms: int = setting(
        "default.api.timeout.ms", Type.INT, 60_000, minimum=0,
        doc="How long a blocking call without a timeout of its own may take.")
    # Kafka 3.x lists [range, cooperative-sticky]; the ZooKeeper-era consumer rafka follows (and
    # the rebalance walk-through of docs/consumer-groups.md) used range. A name, or a user
    # assignor object.
    partition_assignment_strategy: Any = setting(
        "partition.assignment.strategy", Type.OBJECT, "range", validator=_assignment_strategy,
        doc="How the group leader shares partitions: a strategy's name or an assignor.")
    # Kafka 0.9+ keeps offsets in the __consumer_offsets topic; "zookeeper" is the 0.8 store.
    isolation_level: str = setting(
        "isolation.level", Type.STRING, "read_uncommitted",
        choices=("read_uncommitted", "read_committed"),
        doc="read_committed: only records of committed transactions (and of no transaction), "
            "up to the last stable offset.")
    offsets_storage: str = setting(
        "offsets.storage", Type.STRING, "kafka", choices=("kafka", "zookeeper"),
        doc="Where committed offsets are kept.")
    request_timeout_ms: int = setting(
        "request.timeout.ms", Type.INT, 30_000, minimum=0,
        doc="How long a fetch's answer may take beyond fetch.max.wait.ms before the consumer "
            "drops the connection and asks for the leaders again.")
    transport: str = _transport()

    def __post_init__(self) -> None:
        self.CONFIG_DEF.normalise(self)
        if self.enable_auto_commit is None:
            object.__setattr__(self, "enable_auto_commit", self.group_id is not None)
        elif self.enable_auto_commit and self.group_id is None:
            raise InvalidConfigError(
                "enable.auto.commit",
                True,
                "needs a group.id: without a group there is nowhere to commit offsets",
            )

    @classmethod
    def from_kwargs(
        cls, config: Mapping[str, Any] | None = None, /, **kwargs: Any
    ) -> ConsumerConfig:
        """Settings from Python names and/or Kafka's dotted names (see the module docstring)."""
        return cls(**cls.CONFIG_DEF.parse(config, kwargs))


ProducerConfig.CONFIG_DEF = ConfigDef.of(ProducerConfig, "producer", attribute_names=True)
ConsumerConfig.CONFIG_DEF = ConfigDef.of(ConsumerConfig, "consumer", attribute_names=True)


def _idempotence_conflict(config: ProducerConfig) -> tuple[str, Any, str] | None:
    """The first setting that rules idempotence out, as (key, value, what is needed)."""
    if config.acks != -1:
        return "acks", config.acks, 'must be "all" (-1)'
    if config.max_in_flight_requests_per_connection > 5:
        return (
            "max.in.flight.requests.per.connection",
            config.max_in_flight_requests_per_connection,
            "must be at most 5",
        )
    if config.retries == 0:
        return "retries", config.retries, "must be greater than 0"
    return None
