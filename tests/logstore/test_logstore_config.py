"""LogConfig: Kafka names, defaults, refusal of unknown keys and wrong types."""

from __future__ import annotations

import pytest

from rafka.common.config import InvalidConfigError
from rafka.logstore import LogConfig


def test_defaults_are_kafkas() -> None:
    config = LogConfig()
    assert config.segment_bytes == 1 << 30
    assert config.segment_ms == 7 * 24 * 3600 * 1000
    assert config.index_interval_bytes == 4096
    assert config.retention_ms == 7 * 24 * 3600 * 1000
    assert config.retention_bytes == -1
    assert config.cleanup_policy == "delete"
    assert config.delete_retention_ms == 24 * 3600 * 1000
    assert config.min_compaction_lag_ms == 0
    assert config.flush_messages is None and config.flush_ms is None
    assert config.max_message_bytes == 1048588
    assert config.message_timestamp_type == "CreateTime"


def test_from_dict_uses_kafka_names_and_round_trips() -> None:
    config = LogConfig.from_dict(
        {
            "segment.bytes": 1024,
            "retention.ms": -1,
            "cleanup.policy": "compact,delete",
            "flush.messages": 10,
            "message.timestamp.type": "LogAppendTime",
            "file.delete.delay.ms": 0,
        }
    )
    assert config.segment_bytes == 1024 and config.retention_ms == -1
    assert config.compact and config.delete and config.log_append_time
    assert config.flush_messages == 10
    assert LogConfig.from_dict(config.to_dict()) == config


def test_overrides_go_on_top_of_a_base() -> None:
    broker_defaults = LogConfig.from_dict({"retention.ms": 1000})
    topic = LogConfig.from_dict({"segment.bytes": 2048}, base=broker_defaults)
    assert (topic.retention_ms, topic.segment_bytes) == (1000, 2048)


def test_numeric_strings_are_accepted_as_zookeeper_stores_them() -> None:
    config = LogConfig.from_dict({"segment.bytes": "4096", "cleanup.policy": ["compact"]})
    assert config.segment_bytes == 4096 and config.cleanup_policy == "compact"
    assert not config.delete


def test_unknown_keys_are_refused_with_the_known_ones_listed() -> None:
    with pytest.raises(InvalidConfigError, match=r"segment\.byte.*known keys.*segment\.bytes"):
        LogConfig.from_dict({"segment.byte": 1})


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("segment.bytes", "big"),
        ("segment.bytes", 1.5),
        ("segment.bytes", True),
        ("segment.bytes", None),
        ("segment.bytes", 10),  # smaller than one batch header
        ("segment.bytes", 2**31),  # positions are int32
        ("retention.ms", -2),
        ("cleanup.policy", "shred"),
        ("cleanup.policy", 1),
        ("message.timestamp.type", "WallClock"),
        ("flush.messages", 0),
        ("index.interval.bytes", -1),
    ],
)
def test_wrong_types_and_ranges_are_refused(key: str, value: object) -> None:
    with pytest.raises(InvalidConfigError, match=key.replace(".", r"\.")):
        LogConfig.from_dict({key: value})


def test_nullable_flush_settings_and_direct_construction_are_checked() -> None:
    assert LogConfig.from_dict({"flush.ms": None}).flush_ms is None
    with pytest.raises(InvalidConfigError):
        LogConfig(segment_bytes=-5)
    with pytest.raises(InvalidConfigError):
        LogConfig.from_dict(["segment.bytes"])  # type: ignore[arg-type]
