"""Topic and broker configuration with Kafka's names.

A topic's config is its log's (`logstore.LogConfig`) plus the keys that replication reads.
Overrides are stored in ZooKeeper as strings, as Kafka does, so every parser takes strings too.
"""

from __future__ import annotations

import dataclasses
import difflib
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from rafka.logstore.config import LogConfig
from rafka.logstore.errors import InvalidConfigError
from rafka.wire.listeners import InvalidListenerError, parse_listener


def _checked_listener(key: str, raw: Any) -> str:
    try:
        return str(parse_listener(str(raw)))
    except InvalidListenerError as error:
        raise InvalidConfigError(f"{key}: {error}") from None


def _parse_bool(name: str, raw: Any) -> bool:
    if isinstance(raw, bool):
        return raw
    if isinstance(raw, str) and raw.strip().lower() in ("true", "false"):
        return raw.strip().lower() == "true"
    raise InvalidConfigError(f"{name} must be true or false, got {raw!r}")


def _parse_int(name: str, raw: Any, minimum: int | None = None) -> int:
    if isinstance(raw, str):
        try:
            raw = int(raw.strip(), 10)
        except ValueError:
            raise InvalidConfigError(f"{name}={raw!r} is not an integer") from None
    if type(raw) is not int:
        raise InvalidConfigError(f"{name} must be an integer, got {type(raw).__name__} {raw!r}")
    if minimum is not None and raw < minimum:
        raise InvalidConfigError(f"{name}={raw} is below its minimum of {minimum}")
    return raw


def _unknown(name: str, known: list[str], what: str) -> InvalidConfigError:
    close = difflib.get_close_matches(name, known, n=1)
    hint = f"; did you mean {close[0]!r}?" if close else f"; known keys: {', '.join(known)}"
    return InvalidConfigError(f"unknown {what} config {name!r}{hint}")


_REPLICATION_KEYS = ("min.insync.replicas", "unclean.leader.election.enable")


@dataclass(frozen=True)
class TopicConfig:
    """Everything a partition of one topic is configured with."""

    log: LogConfig = field(default_factory=LogConfig)
    min_insync_replicas: int = 1
    unclean_leader_election_enable: bool = False

    @classmethod
    def from_dict(cls, values: Mapping[str, Any] | None) -> TopicConfig:
        if values is None:
            return cls()
        if not isinstance(values, Mapping):
            raise InvalidConfigError(
                f"topic config must be a mapping of Kafka names, got {type(values).__name__}"
            )
        log_values = {}
        min_isr, unclean = 1, False
        known = sorted([*LogConfig().to_dict(), *_REPLICATION_KEYS])
        for key, raw in values.items():
            if key == "min.insync.replicas":
                min_isr = _parse_int(key, raw, minimum=1)
            elif key == "unclean.leader.election.enable":
                unclean = _parse_bool(key, raw)
            elif key in known:
                log_values[key] = raw
            else:
                raise _unknown(str(key), known, "topic")
        return cls(LogConfig.from_dict(log_values), min_isr, unclean)

    def to_dict(self) -> dict[str, Any]:
        """Every setting, by its Kafka name."""
        return {**self.log.to_dict(), "min.insync.replicas": self.min_insync_replicas,
                "unclean.leader.election.enable": self.unclean_leader_election_enable}

    def overrides(self) -> dict[str, str]:
        """The settings that differ from the defaults, as strings (what ZooKeeper stores)."""
        defaults = TopicConfig()
        values = {
            name: value
            for name, value in self.log.to_dict().items()
            if value != defaults.log.to_dict()[name]
        }
        if self.min_insync_replicas != defaults.min_insync_replicas:
            values["min.insync.replicas"] = self.min_insync_replicas
        if self.unclean_leader_election_enable:
            values["unclean.leader.election.enable"] = "true"
        return {name: str(value) for name, value in values.items() if value is not None}


def default_replica_hosts() -> int:
    """One replica host per two cores of the broker's node: the hosts do the data path's work,
    and Python runs one thread of it per process at a time."""
    return max(1, (os.cpu_count() or 2) // 2)


@dataclass(frozen=True)
class BrokerConfig:
    """A broker's settings. Defaults follow Kafka's, except where noted."""

    # Kafka's default is 30 s; a shorter one makes a dead follower leave the ISR sooner here.
    replica_lag_time_max_ms: int = 10_000
    replica_fetch_max_bytes: int = 1_048_576
    replica_fetch_response_max_bytes: int = 10_485_760
    # Kafka's default is 500 ms. An idle fetch costs a Ray call at each end (about 0.7 ms of
    # CPU here), so waiting longer keeps an idle cluster idle; records still go out as soon as
    # they are appended, and a partition that starts following cuts the wait short.
    replica_fetch_wait_max_ms: int = 2_000
    replica_fetch_backoff_ms: int = 200
    # Kafka's default is 18 s; brokers on one Ray cluster can afford a faster failure detector.
    zookeeper_session_timeout_ms: int = 6_000
    request_timeout_ms: int = 30_000
    auto_leader_rebalance_enable: bool = True
    leader_imbalance_check_interval_seconds: int = 300
    broker_rack: str | None = None
    # This broker's ZooKeeper connect string, chroot included (Kafka's zookeeper.connect); None:
    # the cluster's. Brokers of one cluster must reach the same ensemble and chroot; another
    # route to it (a proxy, in the fault tests) is what this is for.
    zookeeper_connect: str | None = None
    # Kafka's wire protocol (actors/kafka/listener.py): where to serve it, as
    # "PLAINTEXT://host:port" (port 0: any free one); None serves none. advertised.listeners is
    # what clients are told to connect to (default: the listener, with the port it bound).
    listeners: str | None = None
    advertised_listeners: str | None = None
    # The largest request a Kafka client may send; a larger frame closes its connection.
    socket_request_max_bytes: int = 104_857_600
    # How long a Kafka group starting from empty waits for more members before its first
    # generation (Kafka's default; Kafka clients' groups only, see actors/group/coordinator.py).
    group_initial_rebalance_delay_ms: int = 3000
    # Not Kafka's: how many replica-host actors (processes) hold this broker's partition
    # replicas. Each is a Ray worker process (about 65 MB, and about 0.6% of a core even idle);
    # 0 gives every replica an actor of its own, as rafka did before replicas shared hosts.
    num_replica_hosts: int = field(default_factory=lambda: default_replica_hosts())
    # The default config of new topics (Kafka's log.* broker settings, by their topic names).
    topic_defaults: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def from_dict(cls, values: Mapping[str, Any] | None) -> BrokerConfig:
        if not values:
            return cls()
        changes: dict[str, Any] = {}
        names = {f.name.replace("_", "."): f for f in dataclasses.fields(cls)}
        for key, raw in values.items():
            spec = names.get(key)
            if spec is None or key == "topic.defaults":
                raise _unknown(str(key), sorted(set(names) - {"topic.defaults"}), "broker")
            if spec.type in ("bool", bool):
                changes[spec.name] = _parse_bool(key, raw)
            elif key in ("broker.rack", "zookeeper.connect"):
                changes[spec.name] = None if raw is None else str(raw)
            elif key in ("listeners", "advertised.listeners"):
                changes[spec.name] = None if raw is None else _checked_listener(key, raw)
            else:
                changes[spec.name] = _parse_int(key, raw, minimum=0)
        return cls(**changes)

    def to_dict(self) -> dict[str, Any]:
        return {
            f.name.replace("_", "."): getattr(self, f.name)
            for f in dataclasses.fields(self)
            if f.name != "topic_defaults"
        }
