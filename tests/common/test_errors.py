"""One error family: every error class rafka defines derives from `rafka.RafkaError`, and each
Kafka error code is found from the class that declares it."""

from __future__ import annotations

import importlib
import inspect
from pathlib import Path

import pytest

import rafka
from rafka.common.errors import ErrorCode, RafkaError, classes_by_code

ROOT = Path(__file__).resolve().parents[2]
LAYERS = ("common", "logstore", "coordination", "wire", "actors", "pipelines", "cli")


def _every_module_name() -> list[str]:
    """`rafka` and every module of every layer, as `rafka.<layer>...`."""
    names = ["rafka"]
    for layer in LAYERS:
        for path in sorted((ROOT / layer).rglob("*.py")):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            names.append(".".join(["rafka", *parts]))
    return names


MODULE_NAMES = _every_module_name()


def _exceptions_defined_in(module_name: str) -> list[type[BaseException]]:
    # Importing only defines things: no module starts Ray, ZooKeeper or Spark at import.
    module = importlib.import_module(module_name)
    return [
        value
        for value in vars(module).values()
        if inspect.isclass(value)
        and issubclass(value, BaseException)
        and value.__module__ == module_name
    ]


def test_the_walk_finds_the_layers_modules() -> None:
    assert "rafka.actors.errors" in MODULE_NAMES
    assert "rafka.cli.commands.errors" in MODULE_NAMES
    assert len(MODULE_NAMES) > 100


@pytest.mark.parametrize("module_name", MODULE_NAMES)
def test_every_exception_a_module_defines_is_a_rafka_error(module_name: str) -> None:
    outside = [
        cls.__qualname__
        for cls in _exceptions_defined_in(module_name)
        if not issubclass(cls, RafkaError)
    ]
    assert not outside, f"{module_name} defines errors outside rafka.RafkaError: {outside}"


def test_every_error_rafka_exports_is_a_rafka_error() -> None:
    exported = [getattr(rafka, name) for name in rafka.__all__]
    errors = [
        value for value in exported if inspect.isclass(value) and issubclass(value, BaseException)
    ]
    assert len(errors) >= 25
    assert [error for error in errors if not issubclass(error, rafka.RafkaError)] == []
    assert rafka.RafkaError is RafkaError and rafka.ErrorCode is ErrorCode


def test_except_rafka_error_catches_the_lower_layers_errors() -> None:
    with pytest.raises(rafka.RafkaError):
        raise rafka.UnknownTopicError("x")
    with pytest.raises(rafka.RafkaError):
        raise rafka.OffsetOutOfRangeError("out of range", log_start_offset=0, log_end_offset=5)
    with pytest.raises(rafka.RafkaError):
        raise rafka.InvalidConfigError("acks", "maybe", "0, 1 or all")
    # Those that were ValueErrors still are, for the callers that catch them so.
    with pytest.raises(ValueError):
        raise rafka.InvalidConfigError("acks", "maybe", "0, 1 or all")
    assert issubclass(rafka.UnknownTopicError, LookupError)
    assert issubclass(rafka.LogStoreError, rafka.RafkaError)
    assert issubclass(rafka.CoordinationError, rafka.RafkaError)


def test_for_code_round_trips_every_class_that_declares_a_code() -> None:
    for module_name in MODULE_NAMES:
        importlib.import_module(module_name)
    declared = classes_by_code()
    assert len(declared) >= 30
    for code, cls in declared.items():
        assert cls.code is code
        assert RafkaError.for_code(code) is cls
        assert RafkaError.for_code(int(code)) is cls
    assert rafka.RafkaError.for_code(ErrorCode.NOT_LEADER_OR_FOLLOWER) is rafka.NotLeaderError
    assert rafka.RafkaError.for_code(ErrorCode.OFFSET_OUT_OF_RANGE) is rafka.OffsetOutOfRangeError
    unknown_partition = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    assert rafka.RafkaError.for_code(unknown_partition) is rafka.UnknownPartitionError


def test_a_code_no_class_declares_is_the_root() -> None:
    assert RafkaError.code is ErrorCode.UNKNOWN_SERVER_ERROR
    assert RafkaError.for_code(ErrorCode.UNKNOWN_SERVER_ERROR) is RafkaError
    assert RafkaError.for_code(12345) is RafkaError


def test_a_subclass_inherits_its_parents_code_without_taking_the_lookup() -> None:
    assert rafka.BufferExhaustedError.code is ErrorCode.REQUEST_TIMED_OUT
    assert RafkaError.for_code(ErrorCode.REQUEST_TIMED_OUT) is rafka.RequestTimedOutError


def test_two_classes_cannot_declare_one_code() -> None:
    with pytest.raises(TypeError, match="NOT_LEADER_OR_FOLLOWER"):
        type("AnotherNotLeader", (RafkaError,), {"code": ErrorCode.NOT_LEADER_OR_FOLLOWER})


@pytest.mark.parametrize(
    ("name", "retriable"),
    [
        ("NotLeaderError", True),
        ("NotEnoughReplicasError", True),
        ("RequestTimedOutError", True),
        ("FencedLeaderEpochError", True),
        ("UnknownLeaderEpochError", True),
        ("RecordTooLargeError", False),
        ("CorruptRecordError", False),
        ("InvalidRequiredAcksError", False),
        ("InvalidConfigError", False),
    ],
)
def test_retriable_is_what_kafka_says(name: str, retriable: bool) -> None:
    assert getattr(rafka, name).retriable is retriable
