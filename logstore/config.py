"""Per-log configuration with Kafka's topic-level names (``segment.bytes``, ``retention.ms``, ...).

Each setting is declared once, on its field (``rafka.common.config.setting``); the field is the
Kafka name in snake case. ``LogConfig.from_dict`` takes the Kafka names and refuses unknown keys,
wrong types and values out of range with ``rafka.common.config.InvalidConfigError``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from rafka.common.config import ConfigDef, Type, setting

_DAY_MS = 24 * 60 * 60 * 1000


@dataclass(frozen=True)
class LogConfig:
    """Configuration of one partition log. Times are milliseconds, sizes bytes."""

    CONFIG_DEF: ClassVar[ConfigDef]

    # A position in a segment is an int32 in the offset index, and a segment holds at least
    # one batch header (61 bytes).
    segment_bytes: int = setting(
        "segment.bytes", Type.INT, 1024 * 1024 * 1024, minimum=61,
        doc="The size a segment file grows to before the log rolls a new one.")
    segment_ms: int = setting(
        "segment.ms", Type.LONG, 7 * _DAY_MS, minimum=1,
        doc="The age of the active segment at which the log rolls a new one, full or not.")
    segment_index_bytes: int = setting(
        "segment.index.bytes", Type.INT, 10 * 1024 * 1024, minimum=12,
        doc="The size of a segment's offset and time indexes.")
    index_interval_bytes: int = setting(
        "index.interval.bytes", Type.INT, 4096, minimum=0,
        doc="How many bytes of records lie between two entries of the offset index.")
    retention_ms: int = setting(
        "retention.ms", Type.LONG, 7 * _DAY_MS, minimum=-1,
        doc="How long records are kept before their segment is deleted; -1 keeps them forever.")
    retention_bytes: int = setting(
        "retention.bytes", Type.LONG, -1, minimum=-1,
        doc="The size the log may grow to before old segments are deleted; -1: no limit.")
    cleanup_policy: str = setting(
        "cleanup.policy", Type.LIST, "delete", choices=("delete", "compact"),
        doc='"delete" (retention by time and size), "compact" (the last record of each key) '
            'or "compact,delete".')
    delete_retention_ms: int = setting(
        "delete.retention.ms", Type.LONG, _DAY_MS, minimum=0,
        doc="How long a compacted log keeps a tombstone, for consumers to see the delete.")
    min_compaction_lag_ms: int = setting(
        "min.compaction.lag.ms", Type.LONG, 0, minimum=0,
        doc="How long a record stays uncompacted after it is written.")
    flush_messages: int | None = setting(
        "flush.messages", Type.LONG, None, minimum=1, nullable=True,
        doc="Records between two fsyncs of the log; None leaves flushing to the OS.")
    flush_ms: int | None = setting(
        "flush.ms", Type.LONG, None, minimum=0, nullable=True,
        doc="Milliseconds between two fsyncs of the log; None leaves flushing to the OS.")
    max_message_bytes: int = setting(
        "max.message.bytes", Type.INT, 1048588, minimum=0,
        doc="The largest record batch the log accepts, after compression.")
    message_timestamp_type: str = setting(
        "message.timestamp.type", Type.STRING, "CreateTime",
        choices=("CreateTime", "LogAppendTime"),
        doc="Whether records keep the producer's timestamp or take the leader's append time.")
    # Accepted for compatibility; segments are deleted at once because reads happen on the
    # same (actor) thread, so no reader can still hold a deleted file.
    file_delete_delay_ms: int = setting(
        "file.delete.delay.ms", Type.LONG, 0, minimum=0,
        doc="How long a deleted segment's files stay on disk (rafka deletes them at once).")

    def __post_init__(self) -> None:
        self.CONFIG_DEF.normalise(self)

    @property
    def compact(self) -> bool:
        """True if the log is compacted: producers must then give every record a key."""
        return "compact" in self.cleanup_policy.split(",")

    @property
    def delete(self) -> bool:
        """True if retention by time and size applies."""
        return "delete" in self.cleanup_policy.split(",")

    @property
    def log_append_time(self) -> bool:
        return self.message_timestamp_type == "LogAppendTime"

    @classmethod
    def from_dict(cls, values: Mapping[str, Any], *, base: LogConfig | None = None) -> LogConfig:
        """Build a config from Kafka names, on top of ``base`` (the defaults if None).

        Integer settings accept ints or decimal strings (ZooKeeper stores overrides as
        strings, as Kafka does); booleans, floats and anything else are refused.
        """
        return dataclasses.replace(base or cls(), **cls.CONFIG_DEF.parse(values))

    def to_dict(self) -> dict[str, Any]:
        """The config with Kafka names, suitable for ``from_dict``."""
        return self.CONFIG_DEF.to_dict(self)


LogConfig.CONFIG_DEF = ConfigDef.of(LogConfig, "log")
