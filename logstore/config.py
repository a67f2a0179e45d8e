"""Per-log configuration with Kafka's topic-level names (``segment.bytes``, ``retention.ms``, ...).

``LogConfig.from_dict`` takes the Kafka names, rejects unknown keys and wrong types with an
:class:`InvalidConfigError`; the dataclass fields are the same names in snake case.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from rafka.logstore.errors import InvalidConfigError

INT32_MAX = 2**31 - 1
INT64_MAX = 2**63 - 1

_CLEANUP_POLICIES = ("delete", "compact")
_TIMESTAMP_TYPES = ("CreateTime", "LogAppendTime")


@dataclass(frozen=True)
class LogConfig:
    """Configuration of one partition log. Times are milliseconds, sizes bytes."""

    segment_bytes: int = 1024 * 1024 * 1024
    segment_ms: int = 7 * 24 * 60 * 60 * 1000
    segment_index_bytes: int = 10 * 1024 * 1024
    index_interval_bytes: int = 4096
    retention_ms: int = 7 * 24 * 60 * 60 * 1000  # -1: keep forever
    retention_bytes: int = -1  # -1: no size limit
    cleanup_policy: str = "delete"  # "delete", "compact" or "compact,delete"
    delete_retention_ms: int = 24 * 60 * 60 * 1000
    min_compaction_lag_ms: int = 0
    flush_messages: int | None = None  # None: leave flushing to the OS
    flush_ms: int | None = None
    max_message_bytes: int = 1048588
    message_timestamp_type: str = "CreateTime"
    # Accepted for compatibility; segments are deleted at once because reads happen on the
    # same (actor) thread, so no reader can still hold a deleted file.
    file_delete_delay_ms: int = 0

    def __post_init__(self) -> None:
        for spec in _SPECS.values():
            spec.check(getattr(self, spec.field))
        policies = self.cleanup_policy.split(",")
        if not policies or any(p not in _CLEANUP_POLICIES for p in policies):
            raise InvalidConfigError(
                f"cleanup.policy={self.cleanup_policy!r}: use 'delete', 'compact' or "
                "'compact,delete'"
            )

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
        if not isinstance(values, Mapping):
            raise InvalidConfigError(f"log config must be a mapping, got {type(values).__name__}")
        changes = {}
        for key, raw in values.items():
            spec = _SPECS.get(key)
            if spec is None:
                raise InvalidConfigError(
                    f"unknown log config {key!r}; known keys: {', '.join(sorted(_SPECS))}"
                )
            changes[spec.field] = spec.parse(raw)
        return dataclasses.replace(base or cls(), **changes)

    def to_dict(self) -> dict[str, Any]:
        """The config with Kafka names, suitable for ``from_dict``."""
        return {name: getattr(self, spec.field) for name, spec in _SPECS.items()}


@dataclass(frozen=True)
class _Spec:
    name: str
    kind: type  # int or str
    minimum: int | None = None
    maximum: int | None = None
    nullable: bool = False
    choices: tuple[str, ...] = ()

    @property
    def field(self) -> str:
        return self.name.replace(".", "_")

    def parse(self, raw: Any) -> Any:
        if raw is None and self.nullable:
            return None
        if self.kind is int:
            if isinstance(raw, str):
                try:
                    raw = int(raw.strip(), 10)
                except ValueError:
                    raise InvalidConfigError(
                        f"{self.name}={raw!r} is not an integer"
                    ) from None
            elif type(raw) is not int:  # bool is an int subclass: refuse it explicitly
                raise InvalidConfigError(
                    f"{self.name} must be an integer, got {type(raw).__name__} {raw!r}"
                )
        elif self.name == "cleanup.policy" and isinstance(raw, (list, tuple)):
            # Kafka's cleanup.policy is a list: ["compact", "delete"] means "compact,delete".
            if not all(isinstance(p, str) for p in raw):
                raise InvalidConfigError(f"cleanup.policy must list strings, got {raw!r}")
            raw = ",".join(p.strip() for p in raw)
        elif not isinstance(raw, str):
            raise InvalidConfigError(
                f"{self.name} must be a string, got {type(raw).__name__} {raw!r}"
            )
        else:
            raw = ",".join(part.strip() for part in raw.split(","))
        return raw

    def check(self, value: Any) -> None:
        if value is None:
            if not self.nullable:
                raise InvalidConfigError(f"{self.name} cannot be None")
            return
        if self.kind is int:
            if type(value) is not int:
                raise InvalidConfigError(
                    f"{self.name} must be an integer, got {type(value).__name__} {value!r}"
                )
            if self.minimum is not None and value < self.minimum:
                raise InvalidConfigError(f"{self.name}={value} is below its minimum {self.minimum}")
            if self.maximum is not None and value > self.maximum:
                raise InvalidConfigError(f"{self.name}={value} is above its maximum {self.maximum}")
        else:
            if not isinstance(value, str):
                raise InvalidConfigError(f"{self.name} must be a string, got {value!r}")
            if self.choices and value not in self.choices:
                raise InvalidConfigError(
                    f"{self.name}={value!r}: use one of {', '.join(self.choices)}"
                )


_SPECS: dict[str, _Spec] = {
    spec.name: spec
    for spec in (
        # A position in a segment is an int32 in the offset index, hence the maximum.
        _Spec("segment.bytes", int, minimum=61, maximum=INT32_MAX),
        _Spec("segment.ms", int, minimum=1),
        _Spec("segment.index.bytes", int, minimum=12, maximum=INT32_MAX),
        _Spec("index.interval.bytes", int, minimum=0, maximum=INT32_MAX),
        _Spec("retention.ms", int, minimum=-1),
        _Spec("retention.bytes", int, minimum=-1),
        _Spec("cleanup.policy", str),
        _Spec("delete.retention.ms", int, minimum=0),
        _Spec("min.compaction.lag.ms", int, minimum=0),
        _Spec("flush.messages", int, minimum=1, nullable=True),
        _Spec("flush.ms", int, minimum=0, nullable=True),
        _Spec("max.message.bytes", int, minimum=0, maximum=INT32_MAX),
        _Spec("message.timestamp.type", str, choices=_TIMESTAMP_TYPES),
        _Spec("file.delete.delay.ms", int, minimum=0),
    )
}
