"""Client settings: Kafka's names and defaults, either spelling, and clear refusals."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rafka.actors.clients.config import ConsumerConfig, ProducerConfig
from rafka.common.config import InvalidConfigError


def test_producer_defaults_are_kafkas_except_linger_and_batch_size() -> None:
    config = ProducerConfig.from_kwargs()
    assert config == ProducerConfig()
    assert (config.acks, config.enable_idempotence) == (-1, True)
    assert config.max_in_flight_requests_per_connection == 5
    assert config.retries == 2**31 - 1
    assert (config.retry_backoff_ms, config.request_timeout_ms) == (100, 30_000)
    assert config.delivery_timeout_ms == 120_000
    assert (config.compression_type, config.max_request_size) == ("none", 1_048_576)
    # rafka's deliberate differences (see the field comments): batching is what makes calls pay.
    assert (config.linger_ms, config.batch_size) == (5, 262_144)


def test_consumer_defaults_are_kafkas() -> None:
    config = ConsumerConfig.from_kwargs(group_id="billing")
    assert config.auto_offset_reset == "latest"
    assert config.enable_auto_commit is True
    assert config.auto_commit_interval_ms == 5_000
    assert (config.fetch_max_wait_ms, config.fetch_min_bytes) == (500, 1)
    assert (config.fetch_max_bytes, config.max_partition_fetch_bytes) == (52_428_800, 1_048_576)
    assert (config.max_poll_records, config.session_timeout_ms) == (500, 45_000)
    assert config.partition_assignment_strategy == "range"
    assert config.offsets_storage == "kafka"


PRODUCER_SAMPLES: dict[str, Any] = {
    "client_id": "billing-producer",
    "acks": 1,
    "enable_idempotence": False,
    "max_in_flight_requests_per_connection": 3,
    "retries": 7,
    "retry_backoff_ms": 250,
    "delivery_timeout_ms": 200_000,
    "request_timeout_ms": 10_000,
    "linger_ms": 20,
    "batch_size": 32_768,
    "compression_type": "zstd",
    "max_request_size": 2_000_000,
}

CONSUMER_SAMPLES: dict[str, Any] = {
    "group_id": "billing",
    "client_id": "billing-1",
    "auto_offset_reset": "earliest",
    "enable_auto_commit": False,
    "auto_commit_interval_ms": 1_000,
    "fetch_max_wait_ms": 100,
    "fetch_min_bytes": 1_024,
    "fetch_max_bytes": 10_000_000,
    "max_partition_fetch_bytes": 500_000,
    "max_poll_records": 50,
    "session_timeout_ms": 6_000,
    "partition_assignment_strategy": "roundrobin",
    "offsets_storage": "zookeeper",
}


@pytest.mark.parametrize(
    ("cls", "samples"),
    [(ProducerConfig, PRODUCER_SAMPLES), (ConsumerConfig, CONSUMER_SAMPLES)],
)
def test_python_names_and_kafka_dotted_names_mean_the_same(cls: Any, samples: dict) -> None:
    by_python = cls.from_kwargs(**samples)
    by_dotted = cls.from_kwargs({k.replace("_", "."): v for k, v in samples.items()})
    assert by_python == by_dotted
    for name, value in samples.items():
        assert getattr(by_python, name) == value


def test_dotted_names_work_as_keyword_arguments_too() -> None:
    assert ProducerConfig.from_kwargs(**{"linger.ms": 50}).linger_ms == 50


def test_values_from_a_properties_file_are_strings() -> None:
    config = ProducerConfig.from_kwargs(
        {"linger.ms": "7", "enable.idempotence": "false", "acks": "1", "retries": " 3 "}
    )
    assert (config.linger_ms, config.enable_idempotence, config.acks, config.retries) == (
        7,
        False,
        1,
        3,
    )


@pytest.mark.parametrize(
    ("given_acks", "stored"),
    [(0, 0), (1, 1), (-1, -1), ("all", -1), ("ALL", -1), ("-1", -1), ("0", 0)],
)
def test_acks_accepts_kafkas_spellings_and_all_is_minus_one(given_acks: Any, stored: int) -> None:
    assert ProducerConfig.from_kwargs(acks=given_acks, enable_idempotence=False).acks == stored


@pytest.mark.parametrize("bad", [2, -2, "some", None, True, 1.0])
def test_other_acks_are_refused_with_what_is_allowed(bad: Any) -> None:
    with pytest.raises(InvalidConfigError, match=r"acks=.*expected 0, 1, \"all\" or -1") as info:
        ProducerConfig.from_kwargs(acks=bad)
    assert info.value.key == "acks" and info.value.value == bad
    assert isinstance(info.value, ValueError)


def test_an_unknown_name_is_refused_with_a_suggestion() -> None:
    with pytest.raises(InvalidConfigError, match="did you mean 'linger_ms'") as info:
        ProducerConfig.from_kwargs(linger_msec=5)
    assert info.value.key == "linger_msec"
    with pytest.raises(InvalidConfigError, match=r"did you mean 'linger\.ms'"):
        ProducerConfig.from_kwargs({"lingr.ms": 5})
    with pytest.raises(InvalidConfigError, match="did you mean 'group_id'"):
        ConsumerConfig.from_kwargs(group_idd="g")
    with pytest.raises(InvalidConfigError, match="not a consumer setting"):
        ConsumerConfig.from_kwargs(linger_ms=5)  # a producer setting given to a consumer


def test_the_same_setting_twice_with_different_values_is_refused() -> None:
    with pytest.raises(InvalidConfigError, match=r"conflicts with linger\.ms=5"):
        ProducerConfig.from_kwargs({"linger.ms": 5}, linger_ms=6)
    assert ProducerConfig.from_kwargs({"linger.ms": 6}, linger_ms=6).linger_ms == 6


@pytest.mark.parametrize(
    ("key", "bad"),
    [
        ("linger_ms", -1),
        ("linger_ms", True),
        ("linger_ms", 2.5),
        ("linger_ms", "soon"),
        ("batch_size", 0),
        ("retries", -1),
        ("max_in_flight_requests_per_connection", 0),
        ("enable_idempotence", "yes"),
        ("enable_idempotence", 1),
        ("client_id", 7),
        ("max_request_size", 2**31),
    ],
)
def test_bad_producer_values_are_refused_naming_the_key(key: str, bad: Any) -> None:
    with pytest.raises(InvalidConfigError) as info:
        ProducerConfig.from_kwargs(**{key: bad})
    assert info.value.key == key.replace("_", ".")
    assert repr(bad) in str(info.value)
    assert "expected" in info.value.allowed


@given(st.integers(min_value=0, max_value=2**31 - 1))
def test_any_non_negative_linger_is_kept(linger: int) -> None:
    config = ProducerConfig.from_kwargs(linger_ms=linger)
    assert config.linger_ms == linger
    assert config.delivery_timeout_ms >= linger + config.request_timeout_ms


@given(st.integers(max_value=-1))
def test_any_negative_linger_is_refused(linger: int) -> None:
    with pytest.raises(InvalidConfigError):
        ProducerConfig.from_kwargs(linger_ms=linger)


def test_an_unknown_codec_is_refused_with_the_codecs_rafka_has() -> None:
    with pytest.raises(InvalidConfigError, match="none, gzip, snappy, lz4, zstd"):
        ProducerConfig.from_kwargs(compression_type="brotli")
    assert ProducerConfig.from_kwargs(compression_type="LZ4").compression_type == "lz4"
    assert ProducerConfig.from_kwargs(compression_type="snappy").compression_type == "snappy"


# -- idempotence, as Kafka 3.x decides it -----------------------------------------------------


@pytest.mark.parametrize(
    ("setting", "key"),
    [
        ({"acks": 1}, "acks"),
        ({"acks": 0}, "acks"),
        ({"max_in_flight_requests_per_connection": 6}, "max.in.flight.requests.per.connection"),
        ({"retries": 0}, "retries"),
    ],
)
def test_explicit_idempotence_with_a_conflicting_setting_is_an_error(
    setting: dict, key: str
) -> None:
    with pytest.raises(InvalidConfigError, match=r"enable\.idempotence=true") as info:
        ProducerConfig.from_kwargs(enable_idempotence=True, **setting)
    assert info.value.key == key


@pytest.mark.parametrize(
    "setting", [{"acks": 1}, {"max_in_flight_requests_per_connection": 6}, {"retries": 0}]
)
def test_default_idempotence_turns_off_quietly_when_ruled_out(setting: dict) -> None:
    config = ProducerConfig.from_kwargs(**setting)
    assert config.enable_idempotence is False


def test_idempotence_stays_on_when_the_settings_allow_it() -> None:
    config = ProducerConfig.from_kwargs(acks="all", max_in_flight_requests_per_connection=5)
    assert config.enable_idempotence is True


def test_delivery_timeout_must_cover_linger_and_request_timeout_when_set() -> None:
    with pytest.raises(InvalidConfigError, match=r"delivery.timeout.ms.*\(5 \+ 30000\)"):
        ProducerConfig.from_kwargs(delivery_timeout_ms=30_000)
    # Unset, it grows to fit, as Kafka's does.
    assert ProducerConfig.from_kwargs(request_timeout_ms=150_000).delivery_timeout_ms == 150_005


# -- consumer ---------------------------------------------------------------------------------


@pytest.mark.parametrize(("given_reset", "stored"), [("earliest", "earliest"), ("NONE", "none")])
def test_auto_offset_reset_choices(given_reset: str, stored: str) -> None:
    assert ConsumerConfig.from_kwargs(auto_offset_reset=given_reset).auto_offset_reset == stored


def test_a_bad_auto_offset_reset_names_the_choices() -> None:
    with pytest.raises(InvalidConfigError, match="expected one of earliest, latest, none"):
        ConsumerConfig.from_kwargs({"auto.offset.reset": "smallest"})


def test_auto_commit_needs_a_group() -> None:
    assert ConsumerConfig.from_kwargs().enable_auto_commit is False  # default, no group: off
    assert ConsumerConfig.from_kwargs(group_id="g").enable_auto_commit is True
    with pytest.raises(InvalidConfigError, match=r"needs a group\.id"):
        ConsumerConfig.from_kwargs(enable_auto_commit=True)
    with pytest.raises(InvalidConfigError, match="non-empty string"):
        ConsumerConfig.from_kwargs(group_id="  ")


@pytest.mark.parametrize(
    ("strategy", "stored"),
    [
        ("range", "range"),
        ("RoundRobin", "roundrobin"),
        ("sticky", "sticky"),
        ("org.apache.kafka.clients.consumer.RoundRobinAssignor", "roundrobin"),
    ],
)
def test_assignment_strategy_names(strategy: str, stored: str) -> None:
    config = ConsumerConfig.from_kwargs(partition_assignment_strategy=strategy)
    assert config.partition_assignment_strategy == stored


def test_a_user_assignor_or_function_is_kept_as_given() -> None:
    class Mine:
        name = "mine"

        def assign(self, members: Any, partitions_per_topic: Any, current: Any) -> dict:
            return {}

    def by_function(members: Any, partitions_per_topic: Any, current: Any) -> dict:
        return {}

    mine = Mine()
    key = "partition.assignment.strategy"
    assert ConsumerConfig.from_kwargs({key: mine}).partition_assignment_strategy is mine
    assert ConsumerConfig.from_kwargs({key: by_function}).partition_assignment_strategy is (
        by_function
    )


@pytest.mark.parametrize("bad", ["cooperative", 3, ["range"]])
def test_an_unknown_assignment_strategy_is_refused(bad: Any) -> None:
    with pytest.raises(InvalidConfigError, match="expected one of range, roundrobin, sticky"):
        ConsumerConfig.from_kwargs(partition_assignment_strategy=bad)


def test_offsets_storage_is_kafka_or_zookeeper() -> None:
    assert ConsumerConfig.from_kwargs(offsets_storage="ZooKeeper").offsets_storage == "zookeeper"
    with pytest.raises(InvalidConfigError, match="kafka, zookeeper"):
        ConsumerConfig.from_kwargs(offsets_storage="redis")


# -- the dataclasses themselves ---------------------------------------------------------------


def test_configs_are_frozen() -> None:
    config = ProducerConfig()
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.linger_ms = 10  # type: ignore[misc]


def test_direct_construction_is_validated_too() -> None:
    with pytest.raises(InvalidConfigError, match=r"linger\.ms"):
        ProducerConfig(linger_ms=-1)
    assert dataclasses.replace(ProducerConfig(), linger_ms=9).linger_ms == 9
    with pytest.raises(InvalidConfigError, match="acks"):
        dataclasses.replace(ProducerConfig(), acks=1)  # idempotence is now on explicitly


def test_a_custom_partitioner_must_be_callable() -> None:
    def by_first_byte(key: bytes | None, n: int) -> int:
        return key[0] % n if key else 0

    assert ProducerConfig.from_kwargs(partitioner=by_first_byte).partitioner is by_first_byte
    assert ProducerConfig.from_kwargs({"partitioner.class": by_first_byte}).partitioner is (
        by_first_byte
    )
    with pytest.raises(InvalidConfigError, match="expected a callable"):
        ProducerConfig.from_kwargs(partitioner="org.example.MyPartitioner")
