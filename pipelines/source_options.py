"""Spark's Kafka-source options, read and checked, and the offset ranges they resolve to.

Pure: `parse_source_options` turns the options a Spark user would pass to
`spark.read.format("kafka")` into a `SourceOptions`, refusing unknown and unsupported ones by
name; `resolve_ranges` turns them, with what the cluster said (each partition's log start
offset and high watermark, committed offsets, offsets found for timestamps), into the
`[start, until)` of each partition. `docs/pipelines.md` lists every option and what rafka
does with it.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from rafka.actors.errors import RafkaError
from rafka.common.sentinels import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP

log = logging.getLogger(__name__)

# In Spark's JSON offsets, as in Kafka's ListOffsets: -2 earliest, -1 latest.
EARLIEST, LATEST = EARLIEST_TIMESTAMP, LATEST_TIMESTAMP

TopicPartitionKey = tuple[str, int]
OffsetRanges = dict[TopicPartitionKey, tuple[int, int]]
"""Each partition's `[start, until)`."""

# Spark's own, lower-cased as Spark compares them (its options are case-insensitive).
_SUPPORTED = {
    "subscribe", "subscribepattern", "assign",
    "startingoffsets", "endingoffsets",
    "startingtimestamp", "endingtimestamp",
    "startingoffsetsbytimestamp", "endingoffsetsbytimestamp",
    "startingoffsetsbytimestampstrategy",
    "failondataloss", "minpartitions", "includeheaders",
    "kafkaconsumer.polltimeoutms",
    "maxoffsetspertrigger", "minoffsetspertrigger", "maxtriggerdelay",
    "kafka.bootstrap.servers",
}
_STREAMING_ONLY = {"maxoffsetspertrigger", "minoffsetspertrigger", "maxtriggerdelay"}
_BATCH_ONLY = {"endingoffsets", "endingtimestamp", "endingoffsetsbytimestamp"}
_REFUSED = {
    "groupidprefix": "rafka's reads use no Kafka consumer group; pass group= to commit a "
                     "batch's offsets to a group",
    "kafka.group.id": "rafka's reads use no Kafka consumer group; pass group= to commit a "
                      "batch's offsets to a group",
    "fetchoffset.numretries": "rafka asks the partition leaders for offsets directly, and "
                              "retries on leader changes until kafkaConsumer.pollTimeoutMs",
    "fetchoffset.retryintervalms": "rafka asks the partition leaders for offsets directly, "
                                   "and retries on leader changes until "
                                   "kafkaConsumer.pollTimeoutMs",
}


class SourceOptionError(RafkaError, ValueError):
    """An option Spark's Kafka source would take that is wrong, or that rafka does not do."""


class DataLossError(RafkaError):
    """Records a read was to start from, or was planned for, are gone (deleted by retention or
    DeleteRecords, or truncated by an unclean leader election) and `failOnDataLoss` is true, as
    in Spark's Kafka source."""


@dataclass(frozen=True)
class Offsets:
    """Where a read starts or ends: "earliest", "latest", "committed" (rafka's: the group's
    committed offsets), `specific` offsets per partition (Spark's JSON, -2 and -1 included),
    `timestamps` per partition, or one `timestamp` for every partition."""

    kind: Literal["earliest", "latest", "committed", "specific", "timestamps", "timestamp"]
    specific: Mapping[TopicPartitionKey, int] | None = None
    timestamp: int | None = None

    @property
    def per_partition(self) -> Mapping[TopicPartitionKey, int]:
        """`specific`, for the kinds that give it ("specific" and "timestamps")."""
        assert self.specific is not None, f"{self.kind!r} offsets name no partitions"
        return self.specific

    def timestamp_of(self, tp: TopicPartitionKey) -> int | None:
        if self.kind == "timestamp":
            return self.timestamp
        if self.kind == "timestamps":
            return self.per_partition[tp]
        return None


@dataclass(frozen=True)
class SourceOptions:
    subscribe: tuple[str, ...] | None = None
    subscribe_pattern: str | None = None
    assign: tuple[TopicPartitionKey, ...] | None = None
    starting: Offsets = Offsets("earliest")
    ending: Offsets = Offsets("latest")
    starting_timestamp_strategy: Literal["error", "latest"] = "error"
    fail_on_data_loss: bool = True
    min_partitions: int | None = None
    include_headers: bool = False
    poll_timeout_ms: int = 120_000
    max_offsets_per_trigger: int | None = None
    min_offsets_per_trigger: int | None = None
    max_trigger_delay_ms: int = 15 * 60 * 1000

    def stream_source(self) -> dict[str, Any]:
        """What a stream reads, as its checkpoint records it (JSON's types): a checkpoint of
        another source is refused, while rate limits and the like may change between runs,
        as Spark's."""
        source = {"subscribe": self.subscribe, "subscribePattern": self.subscribe_pattern,
                  "assign": self.assign}
        loaded: dict[str, Any] = json.loads(json.dumps(source, sort_keys=True))
        return loaded

    def topics_of(self, existing: Iterable[str]) -> list[str]:
        """The topics read, given the topics that exist (for `subscribePattern`, which, as a
        Kafka consumer's, leaves out internal topics)."""
        if self.subscribe is not None:
            return list(self.subscribe)
        if self.assign is not None:
            return sorted({topic for topic, _partition in self.assign})
        assert self.subscribe_pattern is not None  # the one strategy left
        pattern = re.compile(self.subscribe_pattern)
        return sorted(t for t in existing if pattern.fullmatch(t) and not t.startswith("__"))


def parse_source_options(options: Mapping[str, Any], *, streaming: bool,
                         group: str | None = None) -> SourceOptions:
    """Read Spark's Kafka-source options (names compared case-insensitively, values as
    strings or Python values). Exactly one of `subscribe`, `subscribePattern`, `assign`."""
    given = {}
    for name, value in options.items():
        lowered = name.lower()
        if lowered in given:
            raise SourceOptionError(f"option {name!r} is given twice (Spark's option names "
                                    "are case-insensitive)")
        given[lowered] = (name, value)
    for lowered, (name, _value) in given.items():
        if lowered in _REFUSED:
            raise SourceOptionError(f"option {name!r} is not supported: {_REFUSED[lowered]}")
        if lowered.startswith("kafka.") and lowered != "kafka.bootstrap.servers":
            raise SourceOptionError(
                f"option {name!r} is not supported: rafka reads from the partitions' replica "
                "hosts, not with a Kafka consumer, so Kafka consumer settings do not apply")
        if lowered not in _SUPPORTED:
            raise SourceOptionError(f"unknown option {name!r}; Spark's Kafka source takes: "
                                    f"{', '.join(sorted(_SUPPORTED))}")
        if streaming and lowered in _BATCH_ONLY:
            raise SourceOptionError(f"option {name!r} is for batch queries only (read_topic); "
                                    "a stream reads on until it is stopped")
        if not streaming and lowered in _STREAMING_ONLY:
            raise SourceOptionError(f"option {name!r} is for streaming queries only "
                                    "(stream_topic); a batch query reads its whole range")

    def text(key: str) -> str | None:
        return None if key not in given else str(given[key][1])

    strategies = [key for key in ("subscribe", "subscribepattern", "assign") if key in given]
    if len(strategies) != 1:
        raise SourceOptionError(
            "give exactly one of 'subscribe' (topics, comma-separated), 'subscribePattern' (a "
            f"regular expression) or 'assign' (JSON like '{{\"t\": [0, 1]}}'); got "
            f"{[given[key][0] for key in strategies] or 'none'}")
    subscribe = pattern = assign = None
    if "subscribe" in given:
        raw = given["subscribe"][1]
        names = raw if isinstance(raw, (list, tuple)) else str(raw).split(",")
        subscribe = tuple(name.strip() for name in names if name.strip())
        if not subscribe:
            raise SourceOptionError("option 'subscribe' names no topic")
    elif "subscribepattern" in given:
        pattern = str(given["subscribepattern"][1])
        try:
            re.compile(pattern)
        except re.error as error:
            raise SourceOptionError(f"subscribePattern {pattern!r} is not a valid regular "
                                    f"expression: {error}") from None
    else:
        assign = _parse_assign(given["assign"][1])

    starting = _parse_bound("starting", given, group, streaming)
    ending = _parse_bound("ending", given, group, streaming)
    if not streaming and starting.kind == "latest":
        raise SourceOptionError("startingOffsets='latest' is not allowed for batch queries "
                                "(as in Spark): the batch would be empty")
    if ending.kind == "earliest":
        raise SourceOptionError("endingOffsets='earliest' is not allowed (as in Spark)")
    for offsets, name in ((starting, "startingOffsets"), (ending, "endingOffsets")):
        if offsets.kind == "specific" and not streaming and name == "startingOffsets" and any(
                offset == LATEST for offset in offsets.per_partition.values()):
            raise SourceOptionError("startingOffsets may not use -1 (latest) for batch "
                                    "queries (as in Spark)")
        if offsets.kind == "specific" and name == "endingOffsets" and any(
                offset == EARLIEST for offset in offsets.per_partition.values()):
            raise SourceOptionError("endingOffsets may not use -2 (earliest) (as in Spark)")
    strategy = (text("startingoffsetsbytimestampstrategy") or "error").lower()
    if strategy not in ("error", "latest"):
        raise SourceOptionError(f"startingOffsetsByTimestampStrategy must be 'error' or "
                                f"'latest', not {strategy!r}")
    return SourceOptions(
        subscribe=subscribe,
        subscribe_pattern=pattern,
        assign=assign,
        starting=starting,
        ending=ending,
        starting_timestamp_strategy=strategy,  # type: ignore[arg-type]
        fail_on_data_loss=_boolean(given, "failondataloss", True),
        min_partitions=_positive(given, "minpartitions"),
        include_headers=_boolean(given, "includeheaders", False),
        poll_timeout_ms=_positive(given, "kafkaconsumer.polltimeoutms") or 120_000,
        max_offsets_per_trigger=_positive(given, "maxoffsetspertrigger"),
        min_offsets_per_trigger=_positive(given, "minoffsetspertrigger"),
        max_trigger_delay_ms=(_duration_ms(given, "maxtriggerdelay")
                              if "maxtriggerdelay" in given else 15 * 60 * 1000),
    )


def _parse_assign(raw: Any) -> tuple[TopicPartitionKey, ...]:
    try:
        spec = json.loads(raw) if isinstance(raw, str) else raw
        pairs = tuple(sorted((str(topic), int(partition))
                             for topic, partitions in spec.items() for partition in partitions))
    except (json.JSONDecodeError, AttributeError, TypeError, ValueError):
        raise SourceOptionError(f"assign={raw!r}: use JSON like '{{\"topicA\": [0, 1], "
                                "\"topicB\": [2, 4]}'") from None
    if not pairs:
        raise SourceOptionError("option 'assign' names no partition")
    return pairs


def _parse_bound(which: str, given: dict[str, tuple[str, Any]], group: str | None,
                 streaming: bool) -> Offsets:
    """Spark's precedence: `<which>Timestamp`, then `<which>OffsetsByTimestamp`, then
    `<which>Offsets`."""
    if f"{which}timestamp" in given:
        name, raw = given[f"{which}timestamp"]
        try:
            return Offsets("timestamp", timestamp=int(raw))
        except (TypeError, ValueError):
            raise SourceOptionError(f"{name}={raw!r}: give milliseconds since the epoch"
                                    ) from None
    if f"{which}offsetsbytimestamp" in given:
        name, raw = given[f"{which}offsetsbytimestamp"]
        return Offsets("timestamps", specific=_partition_map(name, raw, "timestamp"))
    if f"{which}offsets" not in given:
        if which == "ending":
            return Offsets("latest")
        return Offsets("committed" if group is not None else
                       ("latest" if streaming else "earliest"))
    name, raw = given[f"{which}offsets"]
    if isinstance(raw, str) and raw.strip().lower() in ("earliest", "latest", "committed"):
        kind = raw.strip().lower()
        if kind == "committed" and group is None:
            raise SourceOptionError(f"{name}='committed' needs group=")
        if kind == "committed" and which == "ending":
            raise SourceOptionError(f"{name}='committed' is for where a read starts")
        return Offsets(kind)  # type: ignore[arg-type]
    return Offsets("specific", specific=_partition_map(name, raw, "offset"))


def _partition_map(name: str, raw: Any, what: str) -> dict[TopicPartitionKey, int]:
    try:
        spec = json.loads(raw) if isinstance(raw, str) else raw
        return {(str(topic), int(partition)): int(value)
                for topic, partitions in spec.items() for partition, value in partitions.items()}
    except (json.JSONDecodeError, AttributeError, TypeError, ValueError):
        raise SourceOptionError(
            f"{name}={raw!r}: use 'earliest', 'latest' or JSON mapping each topic to "
            f"{{partition: {what}}}, like '{{\"orders\": {{\"0\": 42, \"1\": -2}}}}'") from None


def _boolean(given: dict[str, tuple[str, Any]], key: str, default: bool) -> bool:
    if key not in given:
        return default
    name, raw = given[key]
    if isinstance(raw, bool):
        return raw
    if str(raw).strip().lower() in ("true", "false"):
        return str(raw).strip().lower() == "true"
    raise SourceOptionError(f"{name}={raw!r}: give true or false")


def _positive(given: dict[str, tuple[str, Any]], key: str) -> int | None:
    if key not in given:
        return None
    name, raw = given[key]
    try:
        value = int(raw)
    except (TypeError, ValueError):
        value = 0
    if value <= 0 or isinstance(raw, bool):
        raise SourceOptionError(f"{name}={raw!r}: give a positive whole number")
    return value


_DURATION = re.compile(r"\s*(\d+)\s*(ms|s|m|h|d)?\s*")
_UNIT_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}


def _duration_ms(given: dict[str, tuple[str, Any]], key: str) -> int:
    """Spark's time strings ("15m", "30s", "500ms"; a bare number is seconds)."""
    name, raw = given[key]
    match = _DURATION.fullmatch(str(raw))
    if match is None:
        raise SourceOptionError(f"{name}={raw!r}: give a duration like '30s', '15m' or '500ms'")
    return int(match.group(1)) * _UNIT_MS[match.group(2) or "s"]


class NoOffsetForTimestampError(SourceOptionError):
    """startingOffsetsByTimestampStrategy=error and a partition has no record at or after the
    timestamp asked."""


def resolve_ranges(
    options: SourceOptions,
    bounds: Mapping[TopicPartitionKey, tuple[int, int]],
    *,
    committed: Mapping[TopicPartitionKey, int | None] | None = None,
    starting_found: Mapping[TopicPartitionKey, int | None] | None = None,
    ending_found: Mapping[TopicPartitionKey, int | None] | None = None,
) -> dict[TopicPartitionKey, tuple[int, int]]:
    """Each partition's `[start, until)`, from `bounds` (log start offset, high watermark),
    the group's `committed` offsets, and the offsets found for the starting and ending
    timestamps (None where no record is at or after it)."""
    for offsets, name in ((options.starting, "startingOffsets"),
                          (options.ending, "endingOffsets")):
        if offsets.kind in ("specific", "timestamps"):
            missing = sorted(set(bounds) - set(offsets.per_partition))
            unknown = sorted(set(offsets.per_partition) - set(bounds))
            if missing or unknown:
                by = name if offsets.kind == "specific" else name + "ByTimestamp"
                raise SourceOptionError(
                    f"{by} must name every partition read, as in Spark: "
                    + (f"missing {_names(missing)}" if missing else "")
                    + ("; " if missing and unknown else "")
                    + (f"not read (or not there): {_names(unknown)}" if unknown else "")
                    + ("; use -2 for earliest, -1 for latest" if offsets.kind == "specific"
                       else ""))
    ranges = {}
    for tp, (log_start, high_watermark) in sorted(bounds.items()):
        start = _position(options.starting, tp, log_start, high_watermark, committed,
                          starting_found, options.starting_timestamp_strategy)
        until = _position(options.ending, tp, log_start, high_watermark, None, ending_found,
                          "latest")
        if start < log_start:
            check_data_loss(tp, start, log_start, options.fail_on_data_loss)
        start = min(max(start, log_start), high_watermark)
        ranges[tp] = (start, max(start, min(until, high_watermark)))
    return ranges


def check_data_loss(tp: TopicPartitionKey, start: int, log_start: int,
                    fail_on_data_loss: bool) -> None:
    """A read was to start at `start`, below what the log still holds."""
    message = (f"{tp[0]}-{tp[1]}: offsets {start}..{log_start - 1} are gone (the log starts "
               f"at {log_start}: deleted by retention or DeleteRecords)")
    if fail_on_data_loss:
        raise DataLossError(message + "; pass failOnDataLoss=false to read on from the log "
                            "start")
    log.warning("%s: read from the log start (failOnDataLoss=false)", message)


def _position(offsets: Offsets, tp: TopicPartitionKey, log_start: int, high_watermark: int,
              committed: Mapping[TopicPartitionKey, int | None] | None,
              found: Mapping[TopicPartitionKey, int | None] | None, strategy: str) -> int:
    kind = offsets.kind
    if kind == "earliest":
        return log_start
    if kind == "latest":
        return high_watermark
    if kind == "committed":
        offset = (committed or {}).get(tp)
        return log_start if offset is None else offset
    if kind == "specific":
        offset = offsets.per_partition[tp]
        return {EARLIEST: log_start, LATEST: high_watermark}.get(offset, offset)
    offset = (found or {}).get(tp)
    if offset is not None:
        return offset
    if strategy == "error":
        raise NoOffsetForTimestampError(
            f"{tp[0]}-{tp[1]} has no record at or after timestamp {offsets.timestamp_of(tp)}; "
            "pass startingOffsetsByTimestampStrategy=latest to start at the latest offset "
            "instead")
    return high_watermark


def _names(partitions: Iterable[TopicPartitionKey]) -> str:
    return ", ".join(f"{topic}-{partition}" for topic, partition in partitions)
