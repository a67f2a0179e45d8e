"""Producer and consumer settings: Kafka's names, Kafka's defaults, checked once at creation.

``ProducerConfig.from_kwargs(linger_ms=5)`` and ``ProducerConfig.from_kwargs({"linger.ms": 5})``
mean the same: Python names and Kafka's dotted names are both accepted (a Kafka user can paste
a properties dict), and values may be strings as in a properties file ("5", "true"). A wrong
value or an unknown name raises ``InvalidConfigError`` naming the key, the value and what is
allowed ("did you mean ...?" for a misspelt name), before any actor is started.

Where rafka's default differs from Kafka 3.x the field says why.
"""

from __future__ import annotations

import dataclasses
import difflib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from rafka.logstore.errors import InvalidConfigError as ConfigError

__all__ = ["ConsumerConfig", "InvalidConfigError", "ProducerConfig"]

_INT32_MAX = 2**31 - 1
_ACKS = {"all": -1, "-1": -1, "0": 0, "1": 1}
COMPRESSION_TYPES = ("none", "gzip", "lz4", "zstd")  # what rafka.logstore.compression can encode
ASSIGNMENT_STRATEGIES = ("range", "roundrobin", "sticky")
# Kafka's class names for the same strategies, so a Java configuration can be pasted as it is.
_KAFKA_ASSIGNOR_CLASSES = {
    "org.apache.kafka.clients.consumer.RangeAssignor": "range",
    "org.apache.kafka.clients.consumer.RoundRobinAssignor": "roundrobin",
    "org.apache.kafka.clients.consumer.StickyAssignor": "sticky",
}


class InvalidConfigError(ConfigError, ValueError):
    """A client setting is unknown, has a wrong value, or conflicts with another setting.

    A kind of the one `InvalidConfigError` users catch (`rafka.actors.errors.InvalidConfigError`),
    so a bad topic, broker or client setting is caught the same way.
    """

    def __init__(self, key: str, value: Any, allowed: str) -> None:
        self.key = key
        self.value = value
        self.allowed = allowed
        super().__init__(f"invalid {key}={value!r}: {allowed}")


class _UnknownKeyError(InvalidConfigError):
    def __init__(self, key: str, value: Any, kind: str, suggestion: str | None) -> None:
        hint = f"did you mean {suggestion!r}?" if suggestion else "see the names in client_config"
        super().__init__(key, value, f"not a {kind} setting; {hint}")


# -- value parsers: each takes (key, raw value) and returns the normalised value or raises --------


def _integer(minimum: int, maximum: int = _INT32_MAX) -> Callable[[str, Any], int]:
    def parse(key: str, value: Any) -> int:
        number: Any = value
        if isinstance(value, str):
            try:
                number = int(value.strip())
            except ValueError:
                number = value
        if type(number) is not int or not minimum <= number <= maximum:
            raise InvalidConfigError(key, value, f"expected an integer in [{minimum}, {maximum}]")
        return number

    return parse


def _boolean(key: str, value: Any) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in ("true", "false"):
        return value.strip().lower() == "true"
    raise InvalidConfigError(key, value, "expected true or false")


def _one_of(*choices: str) -> Callable[[str, Any], str]:
    def parse(key: str, value: Any) -> str:
        if isinstance(value, str) and value.strip().lower() in choices:
            return value.strip().lower()
        raise InvalidConfigError(key, value, f"expected one of {', '.join(choices)}")

    return parse


def _acks(key: str, value: Any) -> int:
    normalised = _ACKS.get(str(value).strip().lower()) if not isinstance(value, bool) else None
    if normalised is None:
        raise InvalidConfigError(key, value, 'expected 0, 1, "all" or -1 ("all" is -1)')
    return normalised


def _compression(key: str, value: Any) -> str:
    if isinstance(value, str) and value.strip().lower() == "snappy":
        choices = ", ".join(COMPRESSION_TYPES)
        raise InvalidConfigError(key, value, f"rafka has no snappy codec; use one of {choices}")
    return _one_of(*COMPRESSION_TYPES)(key, value)


def _unset_or(parse: Callable[[str, Any], Any]) -> Callable[[str, Any], Any]:
    """For a field whose default depends on other fields: None means "not set", resolved later."""

    def parse_unless_unset(key: str, value: Any) -> Any:
        return None if value is None else parse(key, value)

    return parse_unless_unset


def _text(key: str, value: Any) -> str:
    if not isinstance(value, str):
        raise InvalidConfigError(key, value, "expected a string")
    return value


def _group_id(key: str, value: Any) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or not value.strip():
        raise InvalidConfigError(key, value, "expected a non-empty string, or None for no group")
    return value


def _partitioner(key: str, value: Any) -> Any:
    if value is None or callable(value):
        return value
    raise InvalidConfigError(key, value, "expected a callable (key, num_partitions) -> partition")


def _assignment_strategy(key: str, value: Any) -> Any:
    if isinstance(value, str):
        name = _KAFKA_ASSIGNOR_CLASSES.get(value.strip(), value.strip().lower())
        if name in ASSIGNMENT_STRATEGIES:
            return name
    elif callable(getattr(value, "assign", None)) or callable(value):
        return value  # a user assignor (see rafka.actors.clients.assignors.PartitionAssignor)
    raise InvalidConfigError(
        key,
        value,
        f"expected one of {', '.join(ASSIGNMENT_STRATEGIES)}, or an assignor object with "
        "name and assign(members, partitions_per_topic, current_assignment)",
    )


# -- the settings ------------------------------------------------------------------------------


@dataclass(frozen=True)
class ProducerConfig:
    """How a producer batches, acknowledges and retries (Kafka's producer settings)."""

    client_id: str = ""
    # -1 is "all": the leader answers once every in-sync replica has the batch.
    acks: int = -1
    # Unset (None) means Kafka 3.2+'s default: on, unless acks, retries or in-flight settings rule
    # it out, in which case quietly off. Set to True, a conflicting setting is an error instead.
    enable_idempotence: bool | None = None
    max_in_flight_requests_per_connection: int = 5
    retries: int = _INT32_MAX
    retry_backoff_ms: int = 100
    # Unset (None) means Kafka's default: 120 s, or linger.ms + request.timeout.ms if that is
    # larger. Set explicitly, a value below that sum is an error, as in Kafka.
    delivery_timeout_ms: int | None = None
    request_timeout_ms: int = 30_000
    # How old cached metadata may get before it is fetched again, even without an error: how
    # soon a producer sees partitions added to a topic.
    metadata_max_age_ms: int = 300_000
    # Kafka 3.x waits 0 ms; Kafka 4.0 changed it to 5 (KIP-1030) and rafka follows 4.0 because an
    # actor call costs about 1 ms whatever it carries: 5 ms of waiting buys batches that make
    # each call pay.
    linger_ms: int = 5
    # Kafka's 16384 was sized for cheap network requests. An actor call costs about the same up
    # to hundreds of KB, and each batch costs the leader and every follower calls of their own,
    # so 256 KiB per partition moves sixteen times the records per call under load (measured:
    # RF 3 acks=all 175k -> 290k records/s against 64 KiB). A batch only fills under load, so
    # latency at low rates is linger.ms's as before. Set 16384 for Kafka's exact behaviour.
    batch_size: int = 262_144
    compression_type: str = "none"
    max_request_size: int = 1_048_576
    # Kafka's: bytes of records that may wait to be sent before send() blocks, and for how long.
    buffer_memory: int = 33_554_432
    max_block_ms: int = 60_000
    # rafka's own: a callable(key, num_partitions) -> partition, Kafka's partitioner.class.
    partitioner: Callable[[bytes | None, int], int] | None = None

    def __post_init__(self) -> None:
        _normalise_fields(self, _PRODUCER_PARSERS)
        conflict = _idempotence_conflict(self)
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
        return cls(**_collect(cls, "producer", config, kwargs))


@dataclass(frozen=True)
class ConsumerConfig:
    """How a consumer fetches, commits and shares partitions (Kafka's consumer settings)."""

    group_id: str | None = None
    client_id: str = ""
    auto_offset_reset: str = "latest"
    # Unset (None) means Kafka 2.2+'s default: on with a group.id, off without one. Set to True
    # without a group.id it is an error, as in Kafka: there is nowhere to commit.
    enable_auto_commit: bool | None = None
    auto_commit_interval_ms: int = 5_000
    fetch_max_wait_ms: int = 500
    metadata_max_age_ms: int = 300_000
    fetch_min_bytes: int = 1
    fetch_max_bytes: int = 52_428_800
    max_partition_fetch_bytes: int = 1_048_576
    max_poll_records: int = 500
    session_timeout_ms: int = 45_000
    # How long offset lookups (end_offsets, position resets) retry before giving up.
    default_api_timeout_ms: int = 60_000
    # Kafka 3.x lists [range, cooperative-sticky]; the ZooKeeper-era consumer rafka follows (and
    # the rebalance walk-through of docs/consumer-groups.md) used range. A name, or a user
    # assignor object.
    partition_assignment_strategy: Any = "range"
    # Kafka 0.9+ keeps offsets in the __consumer_offsets topic; "zookeeper" is the 0.8 store.
    offsets_storage: str = "kafka"

    def __post_init__(self) -> None:
        _normalise_fields(self, _CONSUMER_PARSERS)
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
        return cls(**_collect(cls, "consumer", config, kwargs))


_PRODUCER_PARSERS: dict[str, Callable[[str, Any], Any]] = {
    "client_id": _text,
    "acks": _acks,
    "enable_idempotence": _unset_or(_boolean),
    "max_in_flight_requests_per_connection": _integer(1),
    "retries": _integer(0),
    "retry_backoff_ms": _integer(0),
    "delivery_timeout_ms": _unset_or(_integer(0)),
    "request_timeout_ms": _integer(0),
    "metadata_max_age_ms": _integer(0),
    "linger_ms": _integer(0),
    "batch_size": _integer(1),
    "compression_type": _compression,
    "max_request_size": _integer(1),
    "buffer_memory": _integer(1),
    "max_block_ms": _integer(0),
    "partitioner": _partitioner,
}

_CONSUMER_PARSERS: dict[str, Callable[[str, Any], Any]] = {
    "group_id": _group_id,
    "client_id": _text,
    "auto_offset_reset": _one_of("earliest", "latest", "none"),
    "enable_auto_commit": _unset_or(_boolean),
    "auto_commit_interval_ms": _integer(0),
    "fetch_max_wait_ms": _integer(0),
    "metadata_max_age_ms": _integer(0),
    "fetch_min_bytes": _integer(0),
    "fetch_max_bytes": _integer(1),
    "max_partition_fetch_bytes": _integer(1),
    "max_poll_records": _integer(1),
    "session_timeout_ms": _integer(1),
    "default_api_timeout_ms": _integer(0),
    "partition_assignment_strategy": _assignment_strategy,
    "offsets_storage": _one_of("kafka", "zookeeper"),
}

# Kafka's dotted name of every field, and the reverse map used to read either form.
_DOTTED_OVERRIDES = {"partitioner": "partitioner.class"}


def _dotted(name: str) -> str:
    return _DOTTED_OVERRIDES.get(name, name.replace("_", "."))


_ConfigT = TypeVar("_ConfigT", ProducerConfig, ConsumerConfig)


def _normalise_fields(config: Any, parsers: Mapping[str, Callable[[str, Any], Any]]) -> None:
    for name, parse in parsers.items():
        # frozen dataclass: __post_init__ writes the normalised value through object.__setattr__
        object.__setattr__(config, name, parse(_dotted(name), getattr(config, name)))


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


def _collect(
    cls: type[_ConfigT],
    kind: str,
    config: Mapping[str, Any] | None,
    kwargs: Mapping[str, Any],
) -> dict[str, Any]:
    """Map every given key, Python or dotted, to its field name; refuse unknown or doubled keys."""
    fields = [f.name for f in dataclasses.fields(cls)]
    by_any_name = {name: name for name in fields} | {_dotted(name): name for name in fields}
    values: dict[str, Any] = {}
    spelled: dict[str, str] = {}
    for source in (config or {}, kwargs):
        for key, value in source.items():
            name = by_any_name.get(key)
            if name is None:
                close = difflib.get_close_matches(key, list(by_any_name), n=1, cutoff=0.6)
                raise _UnknownKeyError(key, value, kind, close[0] if close else None)
            if name in values and values[name] != value:
                raise InvalidConfigError(
                    key, value, f"conflicts with {spelled[name]}={values[name]!r} given as well"
                )
            values[name] = value
            spelled[name] = key
    return values
