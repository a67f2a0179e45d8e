"""Errors of the actor layer, and the Kafka error codes that carry them between actors.

Replies between actors carry an error *code* (Kafka's numbers and names) rather than a raised
exception: that keeps the hot path free of exception pickling, and each client turns a code into
the typed exception below. The errors of the layers underneath are re-exported, so that users
import every error from one place.
"""

from __future__ import annotations

from enum import IntEnum
from typing import Any, TypeVar

import ray.exceptions

from rafka.common.config import InvalidConfigError  # noqa: F401 - re-exported for users
from rafka.coordination.errors import (  # noqa: F401 - re-exported for users
    CoordinationError,
    InvalidTopicError,
    UnknownTopicError,
)
from rafka.logstore.errors import (
    CorruptRecordError,
    FencedLeaderEpochError,
    InvalidRecordError,
    OffsetOutOfRangeError,
    RecordTooLargeError,
)

Reply = TypeVar("Reply")

class ErrorCode(IntEnum):
    """Kafka's error codes, the ones rafka answers with."""

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
    FENCED_LEADER_EPOCH = 74
    UNKNOWN_LEADER_EPOCH = 75
    UNSUPPORTED_COMPRESSION_TYPE = 76
    OFFSET_NOT_AVAILABLE = 78
    NON_EMPTY_GROUP = 68
    GROUP_ID_NOT_FOUND = 69
    MEMBER_ID_REQUIRED = 79
    PREFERRED_LEADER_NOT_AVAILABLE = 80
    GROUP_MAX_SIZE_REACHED = 81
    FENCED_INSTANCE_ID = 82
    ELECTION_NOT_NEEDED = 84
    INVALID_RECORD = 87
    PRODUCER_FENCED = 90
    TRANSACTIONAL_ID_NOT_FOUND = 105


class RafkaError(Exception):
    """Base of the actor layer's errors. `retriable` errors may succeed if tried again."""

    retriable = False


class NotLeaderError(RafkaError):
    """The replica asked is not the partition's leader (Kafka: NOT_LEADER_OR_FOLLOWER)."""

    retriable = True

    def __init__(self, message: str, leader: int | None = None) -> None:
        super().__init__(message)
        self.leader = leader


class UnknownLeaderEpochError(RafkaError):
    """The request carried a leader epoch newer than the replica knows yet: try again."""

    retriable = True


class NotEnoughReplicasError(RafkaError):
    """acks=all and the ISR is smaller than min.insync.replicas: nothing was appended."""

    retriable = True


class NotEnoughReplicasAfterAppendError(RafkaError):
    """Appended, but the ISR shrank below min.insync.replicas before it was replicated."""

    retriable = True


class RequestTimedOutError(RafkaError):
    """No answer in time (request.timeout.ms, or acks=all waiting for the ISR)."""

    retriable = True


class BufferExhaustedError(RequestTimedOutError):
    """The producer's buffer.memory stayed full for max.block.ms (Kafka's BufferExhaustedException,
    a TimeoutException): records are produced faster than the cluster takes them."""


class InvalidRequiredAcksError(RafkaError):
    """acks must be 0, 1 or "all" (-1)."""


class OutOfOrderSequenceError(RafkaError):
    """An idempotent producer's batch is not the next one the leader expects: resend in order."""

    retriable = True


class InvalidProducerEpochError(RafkaError):
    """A newer instance of this idempotent producer exists; this one is fenced."""


class KafkaStorageError(RafkaError):
    """The replica's log could not be read or written."""

    retriable = True


class UnknownPartitionError(RafkaError, ValueError):
    """The topic exists but has no such partition."""


class OffsetNotAvailableError(RafkaError):
    """The leader cannot answer for the high watermark yet (Kafka: OFFSET_NOT_AVAILABLE, from
    KIP-207): it became leader with records its followers have not confirmed, and until they
    fetch, its high watermark may be behind what it was under the previous leader."""

    retriable = True


class BrokerUnavailableError(RafkaError):
    """A broker or replica actor is gone (it died, or was never started)."""

    retriable = True


class LeaderNotAvailableError(BrokerUnavailableError):
    """The partition has no leader now (Kafka: LEADER_NOT_AVAILABLE): its in-sync replicas
    are all down. With unclean leader election off it stays so until one of them returns."""


class CommitFailedError(RafkaError):
    """An offset commit did not complete: the group rebalanced or the commit timed out."""


# ------------------------------------------------------------------------- transactions


class ProducerFencedError(InvalidProducerEpochError):
    """A newer instance of this transactional producer (the same transactional.id) started,
    or its transaction timed out: this one is fenced. Close it."""


class InvalidTxnStateError(RafkaError):
    """A transaction request out of turn (Kafka: INVALID_TXN_STATE), e.g. committing what was
    not begun, or a commit the coordinator already took for an abort."""


class InvalidProducerIdMappingError(RafkaError):
    """The transactional id is not this producer id's (Kafka: INVALID_PRODUCER_ID_MAPPING):
    call init_transactions."""


class InvalidTransactionTimeoutError(RafkaError, ValueError):
    """transaction.timeout.ms is outside (0, transaction.max.timeout.ms]."""


class ConcurrentTransactionsError(RafkaError):
    """The producer's previous transaction is still being ended: ask again shortly."""

    retriable = True


class CoordinatorLoadInProgressError(RafkaError):
    """The coordinator is loading its state (it just became the coordinator): ask again."""

    retriable = True


class CoordinatorNotAvailableError(RafkaError):
    """No coordinator now (being created or moving): find it again."""

    retriable = True


class NotCoordinatorError(RafkaError):
    """The broker asked is not the coordinator any more: find it again."""

    retriable = True


_ERRORS: dict[ErrorCode, type[Exception]] = {
    ErrorCode.OFFSET_OUT_OF_RANGE: OffsetOutOfRangeError,
    ErrorCode.CORRUPT_MESSAGE: CorruptRecordError,
    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION: UnknownPartitionError,
    ErrorCode.NOT_LEADER_OR_FOLLOWER: NotLeaderError,
    ErrorCode.REQUEST_TIMED_OUT: RequestTimedOutError,
    ErrorCode.MESSAGE_TOO_LARGE: RecordTooLargeError,
    ErrorCode.NOT_ENOUGH_REPLICAS: NotEnoughReplicasError,
    ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND: NotEnoughReplicasAfterAppendError,
    ErrorCode.INVALID_REQUIRED_ACKS: InvalidRequiredAcksError,
    ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER: OutOfOrderSequenceError,
    ErrorCode.INVALID_PRODUCER_EPOCH: InvalidProducerEpochError,
    ErrorCode.KAFKA_STORAGE_ERROR: KafkaStorageError,
    ErrorCode.FENCED_LEADER_EPOCH: FencedLeaderEpochError,
    ErrorCode.UNKNOWN_LEADER_EPOCH: UnknownLeaderEpochError,
    ErrorCode.OFFSET_NOT_AVAILABLE: OffsetNotAvailableError,
    ErrorCode.INVALID_RECORD: InvalidRecordError,
    ErrorCode.PRODUCER_FENCED: ProducerFencedError,
    ErrorCode.INVALID_TXN_STATE: InvalidTxnStateError,
    ErrorCode.INVALID_PRODUCER_ID_MAPPING: InvalidProducerIdMappingError,
    ErrorCode.INVALID_TRANSACTION_TIMEOUT: InvalidTransactionTimeoutError,
    ErrorCode.CONCURRENT_TRANSACTIONS: ConcurrentTransactionsError,
    ErrorCode.COORDINATOR_LOAD_IN_PROGRESS: CoordinatorLoadInProgressError,
    ErrorCode.COORDINATOR_NOT_AVAILABLE: CoordinatorNotAvailableError,
    ErrorCode.NOT_COORDINATOR: NotCoordinatorError,
}

_CODES = {error: code for code, error in _ERRORS.items()}


def error_reply(code: ErrorCode, message: str, **details: Any) -> dict[str, Any]:
    """The reply an actor sends instead of raising."""
    return {"error": int(code), "message": message, **details}


def code_for(error: BaseException) -> ErrorCode | None:
    """The code of a known error, to reply with; None for anything unexpected."""
    for cls in type(error).__mro__:
        if cls in _CODES:
            return _CODES[cls]
    return None


def error_for(reply: Any) -> Exception | None:
    """The typed error a reply's code stands for (not raised), or None if it carries none.
    A typed reply (`Appended`, `FetchedRecords`, ...) is a success: only dicts carry errors."""
    if not isinstance(reply, dict):
        return None
    code = reply.get("error", 0)
    if not code:
        return None
    try:
        known = ErrorCode(code)
    except ValueError:
        return RafkaError(reply.get("message", f"error code {code}"))
    error = _ERRORS.get(known, RafkaError)
    message = reply.get("message", known.name)
    if error is NotLeaderError:
        return NotLeaderError(message, leader=reply.get("leader"))
    if error is OffsetOutOfRangeError:
        return OffsetOutOfRangeError(message, log_start_offset=reply.get("log_start_offset", -1),
                                     log_end_offset=reply.get("log_end_offset", -1))
    return error(message)


def raise_for(reply: Reply) -> Reply:
    """Return `reply` if it carries no error, else raise the typed error its code stands for."""
    error = error_for(reply)
    if error is not None:
        raise error
    return reply


def is_retriable(error: BaseException) -> bool:
    """Whether the same request may succeed if sent again (Kafka's RetriableException): as each
    error class says, and for Ray's own, an actor that died (another may take its place) or did
    not answer in time. The one classification every client reads."""
    if isinstance(error, (ray.exceptions.RayActorError, ray.exceptions.GetTimeoutError)):
        return True
    return bool(getattr(error, "retriable", False))
