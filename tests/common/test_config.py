"""The config schema: types, bounds, choices, defaults, and refusals that say what to do."""

from __future__ import annotations

import dataclasses
import pickle
from dataclasses import dataclass
from typing import Any, ClassVar

import pytest

from rafka.common.config import (
    INT32_MAX,
    INT64_MAX,
    ConfigDef,
    ConfigKey,
    InvalidConfigError,
    Type,
    setting,
)


def _even(value: int) -> int:
    if value % 2:
        raise ValueError("expected an even number")
    return value


@dataclass(frozen=True)
class Sample:
    """A config class declared as the real ones are."""

    CONFIG_DEF: ClassVar[ConfigDef]

    segment_bytes: int = setting("segment.bytes", Type.INT, 1024, minimum=61,
                                 doc="How big a segment grows.")
    retention_ms: int = setting("retention.ms", Type.LONG, -1, minimum=-1,
                                doc="How long records are kept.")
    compact: bool = setting("compact", Type.BOOLEAN, False, doc="Whether to compact.")
    reset: str = setting("auto.offset.reset", Type.STRING, "latest",
                         choices=("earliest", "latest"), doc="Where to start.")
    policy: str = setting("cleanup.policy", Type.LIST, "delete", choices=("delete", "compact"),
                          doc="What cleans the log.")
    name: str = setting("client.id", Type.STRING, "", doc="A name.")
    flush_ms: int | None = setting("flush.ms", Type.LONG, None, minimum=0, nullable=True,
                                   doc="How often to fsync; None: never.")
    pairs: int = setting("pairs", Type.INT, 2, validator=_even, doc="An even count.")
    hosts: int = setting("num.hosts", Type.INT, default_factory=lambda: 3, minimum=0,
                         doc="Computed when the config is made.")
    not_a_setting: str = "plain field"

    def __post_init__(self) -> None:
        self.CONFIG_DEF.normalise(self)


Sample.CONFIG_DEF = ConfigDef.of(Sample, "sample")


def _refusal(key: str, raw: Any) -> InvalidConfigError:
    with pytest.raises(InvalidConfigError) as info:
        Sample.CONFIG_DEF.parse({key: raw})
    return info.value


# -- declaration --------------------------------------------------------------------------------


def test_keys_come_from_the_fields_in_order_with_their_python_names() -> None:
    keys = list(Sample.CONFIG_DEF)
    assert [key.name for key in keys][:3] == ["segment.bytes", "retention.ms", "compact"]
    assert Sample.CONFIG_DEF["client.id"].attribute == "name"
    assert "not_a_setting" not in Sample.CONFIG_DEF and "not.a.setting" not in Sample.CONFIG_DEF
    assert Sample.CONFIG_DEF["segment.bytes"].doc == "How big a segment grows."


def test_defaults_are_the_declared_ones() -> None:
    sample = Sample()
    assert (sample.segment_bytes, sample.retention_ms, sample.reset) == (1024, -1, "latest")
    assert sample.flush_ms is None and sample.hosts == 3
    assert Sample.CONFIG_DEF["segment.bytes"].default == 1024


def test_a_key_is_declared_once() -> None:
    key = ConfigKey("linger.ms", Type.INT, 5)
    with pytest.raises(ValueError, match="declared twice"):
        ConfigDef([key, ConfigKey("linger.ms", Type.LONG, 0)], "producer")


def test_a_key_without_a_python_name_gets_its_dotted_name_in_snake_case() -> None:
    assert ConfigKey("max.poll.records", Type.INT, 500).attribute == "max_poll_records"


# -- types ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("key", "raw", "typed"),
    [
        ("segment.bytes", 4096, 4096),
        ("segment.bytes", " 4096 ", 4096),  # ZooKeeper and properties files hold text
        ("retention.ms", str(INT64_MAX), INT64_MAX),
        ("compact", True, True),
        ("compact", "FALSE", False),
        ("client.id", " spaced ", " spaced "),  # a plain string is kept as given
        ("cleanup.policy", "compact, delete", "compact,delete"),
        ("cleanup.policy", ["compact", "delete"], "compact,delete"),
        ("flush.ms", None, None),
        ("flush.ms", "10", 10),
    ],
)
def test_values_typed_or_as_text_become_typed(key: str, raw: Any, typed: Any) -> None:
    parsed = Sample.CONFIG_DEF.parse({key: raw})
    assert parsed == {Sample.CONFIG_DEF[key].attribute: typed}
    # Parsing what parse gave is a no-op: a config can be built from its own to_dict.
    assert Sample.CONFIG_DEF[key].parse(typed) == typed


@pytest.mark.parametrize(
    ("key", "raw", "says"),
    [
        ("segment.bytes", "big", "expected an integer in [61, 2147483647]"),
        ("segment.bytes", 1.5, "expected an integer"),
        ("segment.bytes", True, "expected an integer"),  # a bool is no number of bytes
        ("segment.bytes", None, "expected an integer"),  # not nullable
        ("compact", 1, "expected true or false"),
        ("compact", "yes", "expected true or false"),
        ("client.id", 7, "expected a string"),
        ("cleanup.policy", 1, "expected one or more of delete, compact, separated by commas"),
        ("cleanup.policy", ["compact", 2], "separated by commas"),
    ],
)
def test_a_wrong_type_names_the_key_the_value_and_what_is_allowed(
    key: str, raw: Any, says: str
) -> None:
    refused = _refusal(key, raw)
    assert (refused.key, refused.value) == (key, raw)
    assert says in refused.allowed
    assert str(refused) == f"invalid {key}={raw!r}: {refused.allowed}"
    assert isinstance(refused, ValueError)


# -- bounds, choices, validators ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("key", "raw", "allowed"),
    [
        ("segment.bytes", 60, "[61, 2147483647]"),
        ("segment.bytes", INT32_MAX + 1, "[61, 2147483647]"),  # an INT is 32 bits
        ("retention.ms", -2, f"[-1, {INT64_MAX}]"),
        ("retention.ms", INT64_MAX + 1, f"[-1, {INT64_MAX}]"),  # a LONG is 64 bits
        ("flush.ms", -1, f"[0, {INT64_MAX}]"),
    ],
)
def test_integers_out_of_bounds_are_refused_with_the_bounds(
    key: str, raw: int, allowed: str
) -> None:
    assert _refusal(key, raw).allowed == f"expected an integer in {allowed}"


def test_the_bounds_are_inclusive() -> None:
    parsed = Sample.CONFIG_DEF.parse({"segment.bytes": 61, "retention.ms": INT64_MAX})
    assert parsed == {"segment_bytes": 61, "retention_ms": INT64_MAX}


def test_choices_forgive_case_and_keep_the_choices_spelling() -> None:
    assert Sample.CONFIG_DEF.parse({"auto.offset.reset": " EARLIEST "}) == {"reset": "earliest"}
    assert Sample.CONFIG_DEF.parse({"cleanup.policy": "Compact"}) == {"policy": "compact"}
    assert _refusal("auto.offset.reset", "smallest").allowed == "expected one of earliest, latest"
    assert "delete, compact" in _refusal("cleanup.policy", "compact,shred").allowed


def test_a_custom_validator_normalises_or_says_what_is_allowed() -> None:
    assert Sample.CONFIG_DEF.parse({"pairs": "4"}) == {"pairs": 4}
    refused = _refusal("pairs", 3)
    assert refused.allowed == "expected an even number"
    assert str(refused) == "invalid pairs=3: expected an even number"


# -- names ----------------------------------------------------------------------------------------


def test_an_unknown_key_is_refused_with_a_suggestion_and_the_known_keys() -> None:
    refused = _refusal("segment.byte", 1)
    assert refused.key == "segment.byte"
    assert "not a sample setting" in refused.allowed
    assert "did you mean 'segment.bytes'?" in refused.allowed
    assert "known keys: auto.offset.reset, cleanup.policy, client.id" in refused.allowed


def test_an_unknown_key_like_no_known_one_gets_no_suggestion() -> None:
    refused = _refusal("zzz", 1)
    assert "did you mean" not in refused.allowed and "known keys" in refused.allowed


def test_python_names_only_where_the_schema_accepts_them() -> None:
    refused = _refusal("segment_bytes", 100)
    assert "did you mean 'segment.bytes'?" in refused.allowed
    both = ConfigDef(Sample.CONFIG_DEF, "sample", attribute_names=True)
    assert both.parse({"segment_bytes": 100}) == both.parse({"segment.bytes": 100})
    with pytest.raises(InvalidConfigError, match="did you mean 'segment_bytes'"):
        both.parse({"segment_byte": 100})  # suggested in the spelling given


def test_sources_may_repeat_a_setting_only_with_the_same_value() -> None:
    both = ConfigDef(Sample.CONFIG_DEF, "sample", attribute_names=True)
    assert both.parse({"segment.bytes": 100}, {"segment_bytes": "100"}) == {"segment_bytes": 100}
    with pytest.raises(InvalidConfigError, match=r"conflicts with segment\.bytes=100") as info:
        both.parse({"segment.bytes": 100}, {"segment_bytes": 200})
    assert info.value.key == "segment_bytes"


def test_a_config_that_is_not_a_mapping_is_refused() -> None:
    with pytest.raises(InvalidConfigError, match=r"sample config must be a mapping.*got list"):
        Sample.CONFIG_DEF.parse(["segment.bytes"])  # type: ignore[arg-type]
    assert Sample.CONFIG_DEF.parse(None) == {}


# -- the dataclass --------------------------------------------------------------------------------


def test_direct_construction_is_checked_and_typed_as_parsing_is() -> None:
    assert Sample(segment_bytes="2048").segment_bytes == 2048  # type: ignore[arg-type]
    with pytest.raises(InvalidConfigError, match=r"segment\.bytes"):
        Sample(segment_bytes=10)
    with pytest.raises(InvalidConfigError, match=r"segment\.bytes"):
        dataclasses.replace(Sample(), segment_bytes=-1)


def test_to_dict_uses_kafkas_names_and_parses_back() -> None:
    sample = Sample(retention_ms=5, policy="compact,delete")
    as_dict = Sample.CONFIG_DEF.to_dict(sample)
    assert as_dict["retention.ms"] == 5 and as_dict["client.id"] == ""
    assert "not_a_setting" not in as_dict
    assert Sample(**Sample.CONFIG_DEF.parse(as_dict)) == sample


# -- the error ------------------------------------------------------------------------------------


def test_the_error_crosses_processes_whole() -> None:
    refused = _refusal("segment.bytes", "big")
    copy = pickle.loads(pickle.dumps(refused))
    assert (copy.key, copy.value, copy.allowed, str(copy)) == (
        refused.key, refused.value, refused.allowed, str(refused))


def test_a_rule_across_settings_is_one_message() -> None:
    error = InvalidConfigError("min.insync.replicas 3 is above the replication factor 2")
    assert error.key is None and str(error) == error.allowed
    assert str(pickle.loads(pickle.dumps(error))) == str(error)


def test_every_layer_raises_the_one_class_users_catch() -> None:
    import rafka
    from rafka.actors.clients.config import ConsumerConfig, ProducerConfig
    from rafka.actors.config import BrokerConfig, TopicConfig
    from rafka.logstore.config import LogConfig

    assert rafka.InvalidConfigError is InvalidConfigError
    parsers = [LogConfig.from_dict, TopicConfig.from_dict, BrokerConfig.from_dict,
               ProducerConfig.from_kwargs, ConsumerConfig.from_kwargs]
    for parse in parsers:
        with pytest.raises(rafka.InvalidConfigError, match=r"no\.such\.setting"):
            parse({"no.such.setting": 1})
