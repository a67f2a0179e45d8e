"""Typed errors of the log store, named after Kafka's so a Kafka user recognises them.

Every message says what happened and, where there is one, what the caller should do next.
"""

from __future__ import annotations

from rafka.common.errors import ErrorCode, RafkaError


class LogStoreError(RafkaError):
    """Base class of every error raised by :mod:`logstore`.

    ``retriable`` (from `RafkaError`): whether a client may send the same request again and
    succeed, read by the clients through ``rafka.actors.errors.is_retriable``.
    """


class CorruptRecordError(LogStoreError):
    """A record batch failed a framing, magic, CRC or record check (Kafka:
    CorruptRecordException).

    Kafka's producer resends such a batch, taking it for damage on the way. Between Ray actors
    bytes are not damaged on the way: a batch refused as corrupt was built so, and sending it
    again would not help, so it is not retriable here. On disk it means the data is damaged,
    and recovery truncates it.
    """

    code = ErrorCode.CORRUPT_MESSAGE


class InvalidRecordError(LogStoreError):
    """A well-formed batch that breaks a rule of the log (Kafka: InvalidRecordException).

    Example: a record without a key sent to a compacted topic. Resending does not help: the
    producer must change what it sends.
    """

    code = ErrorCode.INVALID_RECORD


class RecordTooLargeError(LogStoreError):
    """A batch, or its decompressed records, exceed ``max.message.bytes`` (RecordTooLargeException).

    The producer should send smaller batches (lower ``batch.size``) or the topic's
    ``max.message.bytes`` should be raised.
    """

    code = ErrorCode.MESSAGE_TOO_LARGE


class OffsetOutOfRangeError(LogStoreError):
    """A fetch or a truncation asked for an offset outside [log start offset, log end offset].

    A consumer should reset its position (``auto.offset.reset``) to one of the two bounds
    given in the message.
    """

    code = ErrorCode.OFFSET_OUT_OF_RANGE

    def __init__(self, message: str, *, log_start_offset: int, log_end_offset: int) -> None:
        super().__init__(message)
        self.log_start_offset = log_start_offset
        self.log_end_offset = log_end_offset


class UnexpectedAppendOffsetError(LogStoreError):
    """A follower tried to append batches that start below its log end offset.

    (Kafka: UnexpectedAppendOffsetException.) The follower must truncate to the leader's epoch
    boundary first and fetch again from its new log end offset.
    """


class LogClosedError(LogStoreError):
    """The log was used after :meth:`rafka.logstore.log.Log.close`; open it again to use it."""


class FencedLeaderEpochError(LogStoreError):
    """An append as leader carried an epoch older than the latest one in the log.

    (Kafka: FencedLeaderEpochException.) The replica is no longer the leader of the current
    epoch: it must stop accepting produce requests and follow the new leader. A client retries
    at the new leader.
    """

    code = ErrorCode.FENCED_LEADER_EPOCH
    retriable = True
