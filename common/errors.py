"""The root of every error rafka raises, and Kafka's numbered error codes they stand for.

As aiokafka's `KafkaError`: each error class says which Kafka error code it stands for (`code`)
and whether the same request may succeed if tried again (`retriable`), and `RafkaError.for_code`
finds the class a code stands for, from those attributes. Every layer's errors derive from
`RafkaError`, so `except rafka.RafkaError` catches whatever rafka raises.
"""

from __future__ import annotations

from enum import IntEnum
from typing import Any, ClassVar


class ErrorCode(IntEnum):
    """Kafka's error codes, the ones rafka answers with."""

    UNKNOWN_SERVER_ERROR = -1
    NONE = 0
    OFFSET_OUT_OF_RANGE = 1
    CORRUPT_MESSAGE = 2
    UNKNOWN_TOPIC_OR_PARTITION = 3
    LEADER_NOT_AVAILABLE = 5
    NOT_LEADER_OR_FOLLOWER = 6
    REQUEST_TIMED_OUT = 7
    REPLICA_NOT_AVAILABLE = 9
    MESSAGE_TOO_LARGE = 10
    STALE_CONTROLLER_EPOCH = 11
    NETWORK_EXCEPTION = 13
    COORDINATOR_LOAD_IN_PROGRESS = 14
    COORDINATOR_NOT_AVAILABLE = 15
    NOT_COORDINATOR = 16
    INVALID_TOPIC_EXCEPTION = 17
    NOT_ENOUGH_REPLICAS = 19
    NOT_ENOUGH_REPLICAS_AFTER_APPEND = 20
    INVALID_REQUIRED_ACKS = 21
    ILLEGAL_GENERATION = 22
    INCONSISTENT_GROUP_PROTOCOL = 23
    INVALID_GROUP_ID = 24
    UNKNOWN_MEMBER_ID = 25
    INVALID_SESSION_TIMEOUT = 26
    REBALANCE_IN_PROGRESS = 27
    UNSUPPORTED_VERSION = 35
    TOPIC_ALREADY_EXISTS = 36
    INVALID_PARTITIONS = 37
    INVALID_REPLICATION_FACTOR = 38
    INVALID_REPLICA_ASSIGNMENT = 39
    INVALID_CONFIG = 40
    NOT_CONTROLLER = 41
    INVALID_REQUEST = 42
    POLICY_VIOLATION = 44
    OUT_OF_ORDER_SEQUENCE_NUMBER = 45
    INVALID_PRODUCER_EPOCH = 47
    INVALID_TXN_STATE = 48
    INVALID_PRODUCER_ID_MAPPING = 49
    INVALID_TRANSACTION_TIMEOUT = 50
    CONCURRENT_TRANSACTIONS = 51
    TRANSACTION_COORDINATOR_FENCED = 52
    KAFKA_STORAGE_ERROR = 56
    LOG_DIR_NOT_FOUND = 57
    REASSIGNMENT_IN_PROGRESS = 60
    FETCH_SESSION_ID_NOT_FOUND = 70
    INVALID_FETCH_SESSION_EPOCH = 71
    FENCED_LEADER_EPOCH = 74
    UNKNOWN_LEADER_EPOCH = 75
    UNSUPPORTED_COMPRESSION_TYPE = 76
    OFFSET_NOT_AVAILABLE = 78
    NON_EMPTY_GROUP = 68
    GROUP_ID_NOT_FOUND = 69
    GROUP_SUBSCRIBED_TO_TOPIC = 86
    MEMBER_ID_REQUIRED = 79
    PREFERRED_LEADER_NOT_AVAILABLE = 80
    GROUP_MAX_SIZE_REACHED = 81
    FENCED_INSTANCE_ID = 82
    ELECTION_NOT_NEEDED = 84
    INVALID_RECORD = 87
    PRODUCER_FENCED = 90
    UNKNOWN_TOPIC_ID = 100
    TRANSACTIONAL_ID_NOT_FOUND = 105
    FENCED_MEMBER_EPOCH = 110
    UNRELEASED_INSTANCE_ID = 111
    UNSUPPORTED_ASSIGNOR = 112
    STALE_MEMBER_EPOCH = 113
    MISMATCHED_ENDPOINT_TYPE = 114
    TRANSACTION_ABORTABLE = 120
    INVALID_REGULAR_EXPRESSION = 130


class RafkaError(Exception):
    """The root of every error rafka raises.

    `code`: the Kafka error code the error stands for. A class that sets `code` in its own body
    is the one `for_code` answers for that code; its subclasses inherit the code without taking
    the lookup over (a `BufferExhaustedError` travels as the REQUEST_TIMED_OUT it is a kind of).
    Errors that stand for no code of their own keep the root's UNKNOWN_SERVER_ERROR.
    `retriable`: whether the same request may succeed if sent again (Kafka's
    RetriableException).
    """

    code: ClassVar[ErrorCode] = ErrorCode.UNKNOWN_SERVER_ERROR
    retriable: ClassVar[bool] = False

    # code -> the class that declared it; filled as the error modules are imported.
    _by_code: ClassVar[dict[ErrorCode, type[RafkaError]]] = {}

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "code" not in cls.__dict__:
            return
        taken = RafkaError._by_code.get(cls.code)
        same_class = taken is not None and (taken.__module__, taken.__qualname__) == (
            cls.__module__, cls.__qualname__)  # its module imported again
        if taken is not None and not same_class:
            # Two classes for one code would make the lookup depend on import order.
            raise TypeError(
                f"{cls.__qualname__} and {taken.__qualname__} both declare {cls.code.name}"
            )
        RafkaError._by_code[cls.code] = cls

    @staticmethod
    def for_code(code: int) -> type[RafkaError]:
        """The class that stands for Kafka error `code`, or `RafkaError` for a code no class
        declares (only the classes of modules imported so far are known)."""
        try:
            return RafkaError._by_code.get(ErrorCode(code), RafkaError)
        except ValueError:
            return RafkaError


def classes_by_code() -> dict[ErrorCode, type[RafkaError]]:
    """Each code a class declares, with that class (of the modules imported so far)."""
    return dict(RafkaError._by_code)
