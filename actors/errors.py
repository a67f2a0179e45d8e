"""Errors of the actor layer, and the replies that carry Kafka's error codes between actors.

Replies between actors carry an error *code* (Kafka's numbers and names, `ErrorCode`, in an
`ErrorReply`) rather than a raised exception: that keeps the hot path free of exception
pickling, and each client turns a code into the typed exception the code stands for (each
class's `code`, found with `RafkaError.for_code`). `RafkaError`, `ErrorCode` and the errors of
the layers underneath are re-exported, so that users import every error from one place.
"""

from __future__ import annotations

from typing import Any, TypeVar

import ray.exceptions

from rafka.actors.messages import ErrorReply
from rafka.common.config import InvalidConfigError  # noqa: F401 - re-exported for users
from rafka.common.errors import ErrorCode, RafkaError
from rafka.coordination.errors import (  # noqa: F401 - re-exported for users
    CoordinationError,
    InvalidTopicError,
    UnknownTopicError,
)
from rafka.logstore.errors import (  # noqa: F401 - re-exported for users
    CorruptRecordError,
    FencedLeaderEpochError,
    InvalidRecordError,
    LogStoreError,
    OffsetOutOfRangeError,
    RecordTooLargeError,
)

Reply = TypeVar("Reply")

class NotLeaderError(RafkaError):
    """The replica asked is not the partition's leader (Kafka: NOT_LEADER_OR_FOLLOWER)."""

    code = ErrorCode.NOT_LEADER_OR_FOLLOWER
    retriable = True

    def __init__(self, message: str, leader: int | None = None) -> None:
        super().__init__(message)
        self.leader = leader


class UnknownLeaderEpochError(RafkaError):
    """The request carried a leader epoch newer than the replica knows yet: try again."""

    code = ErrorCode.UNKNOWN_LEADER_EPOCH
    retriable = True


class NotEnoughReplicasError(RafkaError):
    """acks=all and the ISR is smaller than min.insync.replicas: nothing was appended."""

    code = ErrorCode.NOT_ENOUGH_REPLICAS
    retriable = True


class NotEnoughReplicasAfterAppendError(RafkaError):
    """Appended, but the ISR shrank below min.insync.replicas before it was replicated."""

    code = ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND
    retriable = True


class RequestTimedOutError(RafkaError):
    """No answer in time (request.timeout.ms, or acks=all waiting for the ISR)."""

    code = ErrorCode.REQUEST_TIMED_OUT
    retriable = True


class BufferExhaustedError(RequestTimedOutError):
    """The producer's buffer.memory stayed full for max.block.ms (Kafka's BufferExhaustedException,
    a TimeoutException): records are produced faster than the cluster takes them."""


class InvalidRequiredAcksError(RafkaError):
    """acks must be 0, 1 or "all" (-1)."""

    code = ErrorCode.INVALID_REQUIRED_ACKS


class OutOfOrderSequenceError(RafkaError):
    """An idempotent producer's batch is not the next one the leader expects: resend in order."""

    code = ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    retriable = True


class InvalidProducerEpochError(RafkaError):
    """A newer instance of this idempotent producer exists; this one is fenced."""

    code = ErrorCode.INVALID_PRODUCER_EPOCH


class KafkaStorageError(RafkaError):
    """The replica's log could not be read or written."""

    code = ErrorCode.KAFKA_STORAGE_ERROR
    retriable = True


class UnknownPartitionError(RafkaError, ValueError):
    """The topic exists but has no such partition."""

    code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


class OffsetNotAvailableError(RafkaError):
    """The leader cannot answer for the high watermark yet (Kafka: OFFSET_NOT_AVAILABLE, from
    KIP-207): it became leader with records its followers have not confirmed, and until they
    fetch, its high watermark may be behind what it was under the previous leader."""

    code = ErrorCode.OFFSET_NOT_AVAILABLE
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

    code = ErrorCode.PRODUCER_FENCED


class InvalidTxnStateError(RafkaError):
    """A transaction request out of turn (Kafka: INVALID_TXN_STATE), e.g. committing what was
    not begun, or a commit the coordinator already took for an abort."""

    code = ErrorCode.INVALID_TXN_STATE


class InvalidProducerIdMappingError(RafkaError):
    """The transactional id is not this producer id's (Kafka: INVALID_PRODUCER_ID_MAPPING):
    call init_transactions."""

    code = ErrorCode.INVALID_PRODUCER_ID_MAPPING


class InvalidTransactionTimeoutError(RafkaError, ValueError):
    """transaction.timeout.ms is outside (0, transaction.max.timeout.ms]."""

    code = ErrorCode.INVALID_TRANSACTION_TIMEOUT


class ConcurrentTransactionsError(RafkaError):
    """The producer's previous transaction is still being ended: ask again shortly."""

    code = ErrorCode.CONCURRENT_TRANSACTIONS
    retriable = True


class CoordinatorLoadInProgressError(RafkaError):
    """The coordinator is loading its state (it just became the coordinator): ask again."""

    code = ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
    retriable = True


class CoordinatorNotAvailableError(RafkaError):
    """No coordinator now (being created or moving): find it again."""

    code = ErrorCode.COORDINATOR_NOT_AVAILABLE
    retriable = True


class NotCoordinatorError(RafkaError):
    """The broker asked is not the coordinator any more: find it again."""

    code = ErrorCode.NOT_COORDINATOR
    retriable = True


def error_reply(code: ErrorCode, message: str, **details: Any) -> ErrorReply:
    """The reply an actor sends instead of raising; `details` are `ErrorReply`'s optional
    fields (the leader, where the log stands, the sequence expected)."""
    return ErrorReply(int(code), message, **details)


def code_for(error: BaseException) -> ErrorCode | None:
    """The code of a known error, to reply with; None for anything unexpected."""
    for cls in type(error).__mro__:
        if issubclass(cls, RafkaError) and RafkaError.for_code(cls.code) is cls:
            return cls.code
    return None


def error_for(reply: Any) -> Exception | None:
    """The typed error an `ErrorReply`'s code stands for (not raised), or None for any other
    reply: a typed answer (`Appended`, `FetchedRecords`, ...) or None is a success."""
    if not isinstance(reply, ErrorReply) or not reply.code:
        return None
    try:
        known = ErrorCode(reply.code)
    except ValueError:
        return RafkaError(reply.message or f"error code {reply.code}")
    error = RafkaError.for_code(known)
    message = reply.message or known.name
    if error is NotLeaderError:
        return NotLeaderError(message, leader=reply.leader)
    if error is OffsetOutOfRangeError:
        return OffsetOutOfRangeError(message, log_start_offset=reply.log_start_offset,
                                     log_end_offset=reply.log_end_offset)
    return error(message)


def code_of(reply: object) -> int:
    """The error code a reply carries: an `ErrorReply`'s, else NONE (0) for a success."""
    return reply.code if isinstance(reply, ErrorReply) else ErrorCode.NONE


def raise_for(reply: Reply | ErrorReply) -> Reply:
    """Return `reply` if it carries no error, else raise the typed error its code stands for."""
    error = error_for(reply)
    if error is not None:
        raise error
    return reply  # type: ignore[return-value]  # no error found: not an ErrorReply


def is_retriable(error: BaseException) -> bool:
    """Whether the same request may succeed if sent again (Kafka's RetriableException): as each
    error class says, and for Ray's own, an actor that died (another may take its place) or did
    not answer in time. The one classification every client reads."""
    if isinstance(error, (ray.exceptions.RayActorError, ray.exceptions.GetTimeoutError)):
        return True
    return bool(getattr(error, "retriable", False))
