"""Kafka's client quotas without I/O (KIP-13, KIP-55, KIP-124, KIP-219), as its
`ClientQuotaManager` keeps them: which quota holds a (user, client id) pair, the rate it is held
to, measured over sampled windows, and how long a client over it waits.

A quota is set on an entity: a user, a client id, or a user's client id, each by name or as the
`<default>` of its kind, under Kafka's keys `producer_byte_rate`, `consumer_byte_rate` (bytes a
second) and `request_percentage` (the share of the broker's request handling, in percent of one
thread). Of the eight entities that may match a pair, the most specific one that sets a key
holds the pair to it (KIP-55's order, `MATCHING_ORDER`), and the pair's usage is counted where
that entity says: a user's own quota is shared by all of the user's client ids, a quota of a
user's client id is that pair's alone. Time is passed in (seconds on a monotonic clock), so
everything here is tested with a fake clock.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import NamedTuple

from rafka.common.errors import ErrorCode, RafkaError

PRODUCER_BYTE_RATE = "producer_byte_rate"
CONSUMER_BYTE_RATE = "consumer_byte_rate"
REQUEST_PERCENTAGE = "request_percentage"
QUOTA_KEYS = (PRODUCER_BYTE_RATE, CONSUMER_BYTE_RATE, REQUEST_PERCENTAGE)

# The entity types as DescribeClientQuotas and AlterClientQuotas name them.
USER, CLIENT_ID = "user", "client-id"
# Kafka's name of the default entity of a kind, in ZooKeeper and in memory alike (a real name
# is sanitized in ZooKeeper, so none clashes with it there).
DEFAULT = "<default>"

# Kafka's quota.window.num and quota.window.size.seconds.
QUOTA_WINDOW_NUM = 11
QUOTA_WINDOW_SIZE_SECONDS = 1.0


class QuotaEntity(NamedTuple):
    """A user, a client id, or both: each a name, `DEFAULT`, or None (not part of it)."""

    user: str | None = None
    client_id: str | None = None

    def __str__(self) -> str:
        parts = [f"{kind}={name}" for kind, name in ((USER, self.user),
                                                       (CLIENT_ID, self.client_id))
                 if name is not None]
        return ", ".join(parts) or "(none)"


# Quotas as stored: each entity's keys and values.
QuotaConfigs = Mapping[QuotaEntity, Mapping[str, float]]


def matching_entities(user: str, client_id: str) -> Iterator[tuple[QuotaEntity, QuotaEntity]]:
    """The entities whose quotas may hold `(user, client_id)`, most specific first (KIP-55),
    each with the key its usage is counted under: a quota set on a user alone (by name or the
    default) is shared by all of the user's client ids, and one on client ids alone by all the
    users of a client id."""
    pair = QuotaEntity(user, client_id)
    by_user = QuotaEntity(user, "")
    by_client = QuotaEntity("", client_id)
    yield QuotaEntity(user, client_id), pair
    yield QuotaEntity(user, DEFAULT), pair
    yield QuotaEntity(user, None), by_user
    yield QuotaEntity(DEFAULT, client_id), pair
    yield QuotaEntity(DEFAULT, DEFAULT), pair
    yield QuotaEntity(DEFAULT, None), by_user
    yield QuotaEntity(None, client_id), by_client
    yield QuotaEntity(None, DEFAULT), by_client


# KIP-55's table, as the entity kinds of `matching_entities` (name, default or absent).
MATCHING_ORDER = tuple(
    (entity.user, entity.client_id) for entity, _ in matching_entities("<user>", "<client-id>"))


class QuotaMatch(NamedTuple):
    """The quota that holds a pair: the entity it was set on, the key usage is counted under,
    and the bound."""

    entity: QuotaEntity
    usage_key: QuotaEntity
    bound: float


def quota_for(configs: QuotaConfigs, key: str, user: str, client_id: str) -> QuotaMatch | None:
    """The `key` quota (one of `QUOTA_KEYS`) that holds `(user, client_id)`; None: unlimited."""
    for entity, usage_key in matching_entities(user, client_id):
        config = configs.get(entity)
        if config is not None and key in config:
            return QuotaMatch(entity, usage_key, float(config[key]))
    return None


@dataclass
class SampledRate:
    """A rate over `samples` windows of `window_s` each, as Kafka's `Rate` over a
    `SampledStat`: values are added to the current window, a window older than all of them
    together no longer counts, and the rate divides what is counted by the time it was counted
    over, but never by less than all the windows but one (so that the first value recorded
    does not read as a burst)."""

    samples: int = QUOTA_WINDOW_NUM
    window_s: float = QUOTA_WINDOW_SIZE_SECONDS
    # Each window's start and total, oldest first.
    _windows: list[list[float]] = field(default_factory=list)

    def record(self, value: float, now: float) -> None:
        self._purge(now)
        if not self._windows or now - self._windows[-1][0] >= self.window_s:
            self._windows.append([now, 0.0])
            del self._windows[:-self.samples]
        self._windows[-1][1] += value

    def total(self, now: float) -> float:
        self._purge(now)
        return sum(total for _, total in self._windows)

    def elapsed_s(self, now: float) -> float:
        """The time the rate is measured over: since the oldest window began, at least all
        windows but one."""
        self._purge(now)
        oldest = self._windows[0][0] if self._windows else now
        return max(now - oldest, (self.samples - 1) * self.window_s)

    def rate(self, now: float) -> float:
        return self.total(now) / self.elapsed_s(now)

    def _purge(self, now: float) -> None:
        expired = now - self.samples * self.window_s
        while self._windows and self._windows[0][0] < expired:
            self._windows.pop(0)


def throttle_time_ms(rate: float, bound: float, elapsed_s: float, most_ms: int) -> int:
    """How long a client measured at `rate` over `elapsed_s` waits for its rate to fall back
    to `bound`: Kafka's `(rate - bound) / bound * window`, at most `most_ms`; 0 within bound."""
    if rate <= bound:
        return 0
    if bound <= 0:
        return most_ms
    return min(most_ms, math.ceil((rate - bound) / bound * elapsed_s * 1000))


class ClientQuotaManager:
    """One kind of quota (`key`) for every client of a broker: `record` counts a request's
    usage for its (user, client id) and says how long the client must wait, from the quotas
    `update` last gave it. A pair without a quota is not counted at all."""

    def __init__(self, key: str, samples: int = QUOTA_WINDOW_NUM,
                 window_s: float = QUOTA_WINDOW_SIZE_SECONDS) -> None:
        self.key = key
        self.samples = samples
        self.window_s = window_s
        # The longest wait asked of a client: the whole span the rate is measured over.
        self.most_throttle_ms = math.ceil(samples * window_s * 1000)
        self._configs: QuotaConfigs = {}
        self._rates: dict[QuotaEntity, SampledRate] = {}
        self._matches: dict[tuple[str, str], QuotaMatch | None] = {}

    @property
    def enabled(self) -> bool:
        """Whether any entity sets this kind of quota."""
        return any(self.key in config for config in self._configs.values())

    def update(self, configs: QuotaConfigs) -> None:
        """The quotas from now on (every entity's); what was counted so far keeps counting
        where the new quotas count it."""
        self._configs = {entity: dict(config) for entity, config in configs.items()}
        self._matches.clear()

    def match(self, user: str, client_id: str) -> QuotaMatch | None:
        pair = (user, client_id)
        if pair not in self._matches:
            self._matches[pair] = quota_for(self._configs, self.key, user, client_id)
        return self._matches[pair]

    def record(self, user: str, client_id: str, value: float, now: float) -> int:
        """Count `value` for the pair at `now`; the milliseconds it must wait (0: none)."""
        found = self.match(user, client_id)
        if found is None:
            return 0
        rate = self._rates.get(found.usage_key)
        if rate is None:
            rate = self._rates[found.usage_key] = SampledRate(self.samples, self.window_s)
        rate.record(value, now)
        return throttle_time_ms(rate.rate(now), found.bound, rate.elapsed_s(now),
                                self.most_throttle_ms)

    def unrecord(self, user: str, client_id: str, value: float, now: float) -> None:
        """Take back `value` counted at `now` (a fetch answered empty because it was
        throttled, as Kafka does, sends none of the bytes it counted)."""
        found = self.match(user, client_id)
        if found is not None and found.usage_key in self._rates:
            self._rates[found.usage_key].record(-value, now)

    def rate(self, user: str, client_id: str, now: float) -> float:
        """The pair's rate now, as its quota counts it (0 without one)."""
        found = self.match(user, client_id)
        rate = None if found is None else self._rates.get(found.usage_key)
        return 0.0 if rate is None else rate.rate(now)


# The first version of each API whose client throttles itself on throttle_time_ms (KIP-219):
# from it on, the broker answers at once and then reads nothing more from the connection for
# that long; before it, the broker holds the answer back for that long. APIs not listed came
# after KIP-219 (every version throttles itself); WriteTxnMarkers is a broker's, never throttled.
CLIENT_THROTTLES_FROM: Mapping[str, int] = {
    "Produce": 6, "Fetch": 8, "ListOffsets": 3, "Metadata": 6, "OffsetCommit": 4,
    "OffsetFetch": 4, "FindCoordinator": 2, "JoinGroup": 3, "Heartbeat": 2, "LeaveGroup": 2,
    "SyncGroup": 2, "DescribeGroups": 2, "ListGroups": 2, "ApiVersions": 2, "CreateTopics": 3,
    "DeleteTopics": 2, "DeleteRecords": 1, "InitProducerId": 1, "AddPartitionsToTxn": 1,
    "AddOffsetsToTxn": 1, "EndTxn": 1, "TxnOffsetCommit": 1, "DescribeConfigs": 2,
    "AlterConfigs": 1, "AlterReplicaLogDirs": 1, "DescribeLogDirs": 1, "CreatePartitions": 1,
    "DeleteGroups": 1,
}


def client_throttles_itself(api_name: str, version: int) -> bool:
    """Whether a client of `api_name` at `version` waits out throttle_time_ms by itself."""
    return version >= CLIENT_THROTTLES_FROM.get(api_name, 0)


class QuotaRequestError(RafkaError, ValueError):
    """An AlterClientQuotas or DescribeClientQuotas entry that asks what Kafka refuses
    (INVALID_REQUEST): an unknown entity type or key, a type named twice, a bad value."""

    code = ErrorCode.INVALID_REQUEST


# DescribeClientQuotas' match types.
MATCH_EXACT, MATCH_DEFAULT, MATCH_SPECIFIED = 0, 1, 2
# The keys Kafka holds as whole numbers (LONG configs); request_percentage is a DOUBLE.
_WHOLE_KEYS = frozenset((PRODUCER_BYTE_RATE, CONSUMER_BYTE_RATE))


def entity_from_components(components: list[tuple[str, str | None]]) -> QuotaEntity:
    """The entity of a request's (entity_type, entity_name) pairs, a null name meaning the
    default of that type."""
    names: dict[str, str] = {}
    for kind, name in components:
        if kind not in (USER, CLIENT_ID):
            raise QuotaRequestError(f"unknown quota entity type {kind!r} (rafka keeps "
                                    f"{USER!r} and {CLIENT_ID!r})")
        if kind in names:
            raise QuotaRequestError(f"entity type {kind!r} given twice")
        if name == DEFAULT:
            raise QuotaRequestError(f"{name!r} is the default's name: send a null name")
        if name in ("", ".", ".."):
            # Empty names no entity; the dots are no znode's name, where quotas are kept.
            raise QuotaRequestError(f"{name!r} is not a {kind} a quota can be set on")
        names[kind] = DEFAULT if name is None else name
    if not names:
        raise QuotaRequestError("an entity needs a user, a client id or both")
    return QuotaEntity(names.get(USER), names.get(CLIENT_ID))


def entity_components(entity: QuotaEntity) -> list[tuple[str, str | None]]:
    """`entity` as a response's (entity_type, entity_name) pairs: null for a default."""
    return [(kind, None if name == DEFAULT else name)
            for kind, name in ((USER, entity.user), (CLIENT_ID, entity.client_id))
            if name is not None]


def quota_value(key: str, value: float) -> float:
    """`value` for `key` as it is stored, refusing an unknown key or a value Kafka would."""
    if key not in QUOTA_KEYS:
        raise QuotaRequestError(f"unknown quota key {key!r} (rafka keeps {', '.join(QUOTA_KEYS)})")
    if not value > 0 or math.isinf(value):
        raise QuotaRequestError(f"{key} must be a positive number, not {value}")
    if key in _WHOLE_KEYS and value != int(value):
        raise QuotaRequestError(f"{key} must be a whole number of bytes, not {value}")
    return value


def matches_filter(entity: QuotaEntity, components: list[tuple[str, int, str | None]],
                   strict: bool) -> bool:
    """Whether `entity` is one DescribeClientQuotas asked for: each (entity_type, match_type,
    match) filter holds (an exact name, the default, or any name, the default's too), and with
    `strict` the entity has no other type."""
    names = {USER: entity.user, CLIENT_ID: entity.client_id}
    for kind, match_type, match in components:
        if kind not in names:
            raise QuotaRequestError(f"unknown quota entity type {kind!r}")
        name = names.pop(kind)
        if match_type == MATCH_EXACT:
            if match is None or name != match:
                return False
        elif match_type == MATCH_DEFAULT:
            if name != DEFAULT:
                return False
        elif match_type == MATCH_SPECIFIED:
            if name is None:
                return False
        else:
            raise QuotaRequestError(f"unknown match type {match_type}")
    return not strict or all(name is None for name in names.values())
