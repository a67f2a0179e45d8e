"""The one classification of errors both clients read: codes to typed errors, and which of them
are worth retrying (Kafka's RetriableException)."""

from __future__ import annotations

import pytest
import ray.exceptions

from rafka.actors.errors import (
    CorruptRecordError,
    ErrorCode,
    FencedLeaderEpochError,
    InvalidRecordError,
    NotEnoughReplicasError,
    NotLeaderError,
    OffsetNotAvailableError,
    OffsetOutOfRangeError,
    RafkaError,
    RecordTooLargeError,
    UnknownPartitionError,
    code_of,
    error_for,
    error_reply,
    is_retriable,
    raise_for,
)
from rafka.actors.messages import ErrorReply, ListedOffset

RETRIABLE = {
    ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.REQUEST_TIMED_OUT,
    ErrorCode.NOT_ENOUGH_REPLICAS, ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND,
    ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER, ErrorCode.KAFKA_STORAGE_ERROR,
    ErrorCode.FENCED_LEADER_EPOCH, ErrorCode.UNKNOWN_LEADER_EPOCH, ErrorCode.OFFSET_NOT_AVAILABLE,
}
# What sending the same request again cannot fix: the request itself must change.
FATAL = {
    ErrorCode.OFFSET_OUT_OF_RANGE, ErrorCode.CORRUPT_MESSAGE, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
    ErrorCode.MESSAGE_TOO_LARGE, ErrorCode.INVALID_REQUIRED_ACKS, ErrorCode.INVALID_PRODUCER_EPOCH,
    ErrorCode.INVALID_RECORD,
}


@pytest.mark.parametrize("code", sorted(RETRIABLE | FATAL))
def test_every_code_a_client_meets_has_a_typed_error_and_a_verdict(code: ErrorCode) -> None:
    error = error_for(error_reply(code, "what happened"))
    assert error is not None and type(error) is not RafkaError, code
    assert is_retriable(error) == (code in RETRIABLE), (code, type(error))
    assert "what happened" in str(error)


def test_the_typed_errors_carry_what_the_reply_said() -> None:
    not_leader = error_for(error_reply(ErrorCode.NOT_LEADER_OR_FOLLOWER, "moved", leader=2))
    assert isinstance(not_leader, NotLeaderError) and not_leader.leader == 2
    out_of_range = error_for(error_reply(ErrorCode.OFFSET_OUT_OF_RANGE, "past the end",
                                         log_start_offset=3, log_end_offset=9))
    assert isinstance(out_of_range, OffsetOutOfRangeError)
    assert (out_of_range.log_start_offset, out_of_range.log_end_offset) == (3, 9)


def test_no_error_and_unknown_codes() -> None:
    assert error_for(ListedOffset(5, -1, 0)) is None
    assert raise_for(ListedOffset(5, -1, 0)) == ListedOffset(5, -1, 0)
    assert error_for(None) is None and raise_for(None) is None
    assert code_of(ListedOffset(5, -1, 0)) == 0 and code_of(None) == 0
    assert code_of(error_reply(ErrorCode.NOT_LEADER_OR_FOLLOWER, "moved")) == 6
    unknown = error_for(ErrorReply(9999, "from a newer broker"))
    assert type(unknown) is RafkaError and not is_retriable(unknown)
    with pytest.raises(UnknownPartitionError):
        raise_for(error_reply(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "no partition 7"))


def test_ray_failures_are_retriable_and_programming_errors_are_not() -> None:
    assert is_retriable(ray.exceptions.GetTimeoutError("slow"))
    assert is_retriable(ray.exceptions.RayActorError())
    assert not is_retriable(TypeError("a bug"))
    assert not is_retriable(ValueError("a bug"))


@pytest.mark.parametrize(("error", "retriable"), [
    (NotEnoughReplicasError("isr"), True), (OffsetNotAvailableError("lagging"), True),
    (FencedLeaderEpochError("old epoch"), True), (CorruptRecordError("bad"), False),
    (InvalidRecordError("no key"), False), (RecordTooLargeError("big"), False),
])
def test_the_class_decides(error: Exception, retriable: bool) -> None:
    assert is_retriable(error) == retriable
