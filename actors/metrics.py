"""rafka's metrics, through `ray.util.metrics`: they reach the Ray dashboard and Prometheus.

Every metric is defined here, once, with Kafka-like names (issue 9, point 4):

| metric | kind | tags | recorded by |
|---|---|---|---|
| `rafka_records_in_total` | counter | topic, partition | leader, per appended produce request |
| `rafka_bytes_in_total` | counter | topic, partition | leader, per appended produce request |
| `rafka_records_out_total` | counter | topic, partition | leader, per consumer fetch |
| `rafka_bytes_out_total` | counter | topic, partition | leader, per consumer fetch |
| `rafka_replication_bytes_out_total` | counter | topic, partition | leader, per follower fetch |
| `rafka_produce_latency_ms` | histogram | topic | leader, per produce request |
| `rafka_fetch_latency_ms` | histogram | topic, fetcher | host, per fetch and topic (long polls) |
| `rafka_isr_shrinks_total` | counter | topic | leader, per ISR shrink (its or the controller's) |
| `rafka_isr_expands_total` | counter | topic | leader, per ISR expansion (its or controller's) |
| `rafka_under_replicated_partitions` | gauge | topic, partition, broker | every replica |
| `rafka_controller_changes_total` | counter | cluster, broker | broker, on winning an election |
| `rafka_consumer_lag` | gauge | group, topic, partition | group consumer, from fetch replies |

The objects are created without the `_total` (`rafka_records_in` and so on): Ray's Prometheus
exporter adds it to counters, and prefixes every name with `ray_` (so Prometheus and the dashboard
show `ray_rafka_records_in_total`). It also adds its own labels (`WorkerId`, `NodeAddress`,
`SessionName`...): each process exports its own series, which a query sums (`sum by (topic)`).

`ray.util.metrics` objects can only be created in a process connected to Ray, so nothing is
created at import: each process creates a metric the first time it records it and caches it.
Recording is meant for hot paths: one call per request (never per record), tag dicts built once
per replica, gauges set only when their value changes. A replica's counters go further: their
increments are summed in plain ints and handed to Ray once a second by the replica host's timer
(`flush_replica_counts`), since a Ray metric call costs about 10 us on the developers' machine
and a busy leader made six of them per produce request (what it appended, what it served each
follower and the consumer): Ray exports every 10 s, so a second's wait shows nowhere. A
metric that cannot be recorded (no Ray, an exporter problem) is dropped with one warning:
metrics never fail a produce or a fetch.
`RAFKA_METRICS=0` in the environment turns every metric off (to measure what they cost).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from typing import Any

import ray

from rafka.common.topic_partition import TopicPartition

log = logging.getLogger(__name__)

# Milliseconds. Produce with acks=all waits for followers (a few ms here); fetches are long polls
# that wait up to fetch.max.wait.ms / replica.fetch.wait.max.ms, hence the long tail.
LATENCY_BOUNDARIES_MS: list[float] = [
    0.5, 1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000, 30000,
]

CONSUMER, FOLLOWER = "consumer", "follower"

# name -> (kind, description, tag keys). Kinds are ray.util.metrics class names.
DEFINITIONS: dict[str, tuple[str, str, tuple[str, ...]]] = {
    "rafka_records_in": (
        "Counter", "Records appended by partition leaders (produce requests)",
        ("topic", "partition")),
    "rafka_bytes_in": (
        "Counter", "Record batch bytes appended by partition leaders (produce requests)",
        ("topic", "partition")),
    "rafka_records_out": (
        "Counter", "Records served to consumers by partition leaders",
        ("topic", "partition")),
    "rafka_bytes_out": (
        "Counter", "Record batch bytes served to consumers by partition leaders",
        ("topic", "partition")),
    "rafka_replication_bytes_out": (
        "Counter", "Record batch bytes served to followers by partition leaders",
        ("topic", "partition")),
    "rafka_produce_latency_ms": (
        "Histogram", "Produce request time at the leader, acks=all wait included (ms)",
        ("topic",)),
    "rafka_fetch_latency_ms": (
        "Histogram", "Fetch request time at the leader, long-poll wait included (ms)",
        ("topic", "fetcher")),
    "rafka_isr_shrinks": (
        "Counter", "ISR shrinks written by partition leaders", ("topic",)),
    "rafka_isr_expands": (
        "Counter", "ISR expansions written by partition leaders", ("topic",)),
    "rafka_under_replicated_partitions": (
        "Gauge", "1 where this broker leads the partition and its ISR is smaller than its "
        "replica set, else 0 (sum over broker: under-replicated partitions)",
        ("topic", "partition", "broker")),
    "rafka_controller_changes": (
        "Counter", "Times a broker became the controller", ("cluster", "broker")),
    "rafka_consumer_lag": (
        "Gauge", "High watermark minus the group consumer's position",
        ("group", "topic", "partition")),
}

_cache: dict[str, Any] = {}
_broken: set[str] = set()


def enabled() -> bool:
    return os.environ.get("RAFKA_METRICS", "1") not in ("0", "false", "no", "off")


def _create(name: str) -> Any:
    from ray.util import metrics  # imported late: it is only usable once Ray is connected

    kind, description, tag_keys = DEFINITIONS[name]
    if kind == "Histogram":
        return metrics.Histogram(name, description, boundaries=LATENCY_BOUNDARIES_MS,
                                 tag_keys=tag_keys)
    return getattr(metrics, kind)(name, description, tag_keys=tag_keys)


def metric(name: str) -> Any | None:
    """This process's metric `name`, created on first use; None if it cannot be recorded."""
    found = _cache.get(name)
    if found is not None:
        return found
    if name in _broken or not enabled() or not ray.is_initialized():
        return None
    try:
        found = _cache[name] = _create(name)
    except Exception as error:
        _broken.add(name)
        log.warning("metric %s is not recorded: %s", name, error)
        return None
    return found


def _record(name: str, method: str, value: float, tags: dict[str, str]) -> None:
    found = _cache.get(name) or metric(name)
    if found is None:
        return
    try:
        getattr(found, method)(value, tags=tags)
    except Exception as error:  # never let a metric fail the request that records it
        _cache.pop(name, None)
        _broken.add(name)
        log.warning("metric %s is no longer recorded: %s", name, error)


def inc(name: str, value: float, tags: dict[str, str]) -> None:
    if value > 0:  # Ray's counters refuse 0
        _record(name, "inc", value, tags)


def observe(name: str, value: float, tags: dict[str, str]) -> None:
    _record(name, "observe", value, tags)


def set_gauge(name: str, value: float, tags: dict[str, str]) -> None:
    _record(name, "set", value, tags)


class PendingCounts:
    """Counter increments summed until `flush` hands each sum to Ray as one `inc`. Keyed by
    the tag dict's identity: callers pass dicts built once (and the entry keeps its dict alive,
    so the identity cannot be reused while it waits)."""

    def __init__(self) -> None:
        self._counts: dict[tuple[str, int], list[Any]] = {}

    def add(self, name: str, value: float, tags: dict[str, str]) -> None:
        pending = self._counts.get((name, id(tags)))
        if pending is None:
            self._counts[(name, id(tags))] = [value, tags]
        else:
            pending[0] += value

    def flush(self) -> None:
        counts, self._counts = self._counts, {}
        for (name, _tags_id), (value, tags) in counts.items():
            inc(name, value, tags)


_replica_counts = PendingCounts()


def flush_replica_counts() -> None:
    """Hand what the replicas of this process counted since the last call to Ray."""
    _replica_counts.flush()


class ReplicaMetrics:
    """What one partition replica records, with its tag dicts built once."""

    def __init__(self, topic: str, partition: int, broker_id: int) -> None:
        self.partition_tags = {"topic": topic, "partition": str(partition)}
        self.topic_tags = {"topic": topic}
        self.fetch_tags = {
            CONSUMER: {"topic": topic, "fetcher": CONSUMER},
            FOLLOWER: {"topic": topic, "fetcher": FOLLOWER},
        }
        self.replica_tags = {**self.partition_tags, "broker": str(broker_id)}
        self._under_replicated: int | None = None
        self.on = enabled()

    def produced(self, records: int, nbytes: int) -> None:
        if self.on:
            _replica_counts.add("rafka_records_in", records, self.partition_tags)
            _replica_counts.add("rafka_bytes_in", nbytes, self.partition_tags)

    def produce_latency(self, ms: float) -> None:
        if self.on:
            observe("rafka_produce_latency_ms", ms, self.topic_tags)

    def fetched(self, follower: bool, records: int, nbytes: int) -> None:
        """What one fetch served of this partition (called only when it served something)."""
        if not self.on:
            return
        if follower:
            _replica_counts.add("rafka_replication_bytes_out", nbytes, self.partition_tags)
        else:
            _replica_counts.add("rafka_records_out", records, self.partition_tags)
            _replica_counts.add("rafka_bytes_out", nbytes, self.partition_tags)

    def fetch_latency(self, follower: bool, ms: float) -> None:
        """How long a fetch that carried this partition's topic took (once per topic)."""
        if self.on:
            observe("rafka_fetch_latency_ms", ms,
                    self.fetch_tags[FOLLOWER if follower else CONSUMER])

    def isr_changed(self, change: str) -> None:
        if self.on:
            inc("rafka_isr_shrinks" if change == "shrink" else "rafka_isr_expands", 1,
                self.topic_tags)

    def under_replicated(self, value: bool) -> None:
        """Set on every role or ISR change; only a leader reports 1 (Kafka counts it there)."""
        flag = int(value)
        if self.on and flag != self._under_replicated:
            self._under_replicated = flag
            set_gauge("rafka_under_replicated_partitions", flag, self.replica_tags)


def controller_changed(cluster: str, broker_id: int) -> None:
    # Tagged with the cluster too: broker ids repeat across the clusters one Ray may hold.
    if enabled():
        inc("rafka_controller_changes", 1, {"cluster": cluster, "broker": str(broker_id)})


class ConsumerLag:
    """A group member's lag per partition: the high watermark from the last fetch reply that
    carried one minus the member's position. Set only when it changes (a gauge keeps its value).
    """

    def __init__(self, group: str) -> None:
        self.group = group
        self.on = enabled()
        self.high_watermarks: dict[tuple[str, int], int] = {}
        self._reported: dict[tuple[str, int], int] = {}
        self._tags: dict[tuple[str, int], dict[str, str]] = {}

    def update(self, positions: Mapping[TopicPartition, int | None]) -> None:
        if not self.on:
            return
        for tp, position in positions.items():
            high_watermark = self.high_watermarks.get(tp)
            if position is None or high_watermark is None:
                continue
            lag = max(0, high_watermark - position)
            if self._reported.get(tp) != lag:
                self._set(tp, lag)
        # A partition that moved to another member is that member's to report: ours goes to 0,
        # so that summing the group's series (one per process) does not count it twice.
        for moved in [tp for tp in self._reported if tp not in positions]:
            self._set(moved, 0)
            del self._reported[moved]
            self.high_watermarks.pop(moved, None)

    def _set(self, tp: tuple[str, int], lag: int) -> None:
        self._reported[tp] = lag
        tags = self._tags.get(tp)
        if tags is None:
            topic, partition = tp
            tags = self._tags[tp] = {"group": self.group, "topic": topic,
                                     "partition": str(partition)}
        set_gauge("rafka_consumer_lag", lag, tags)
