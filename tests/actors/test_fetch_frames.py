"""The replication stream's frames (pure logic): what a follower sends and a leader answers reads
back as the actor call's arguments and reply, and anything else is refused, not acted on."""

from __future__ import annotations

import msgpack
import pytest

from rafka.actors.errors import ErrorCode, error_reply
from rafka.actors.messages import FetchedRecords, ReplicaFetchAnswer, ReplicaFetchPartition
from rafka.actors.server import fetch_frames
from rafka.actors.server.fetch_frames import FrameError

LIMIT = fetch_frames.MAX_REQUEST_BYTES


def body(frame: bytes) -> bytes:
    """A frame's body, after checking the length in front of it."""
    length = fetch_frames.frame_length(frame[:4], LIMIT)
    assert length == len(frame) - 4
    return frame[4:]


def test_a_fetch_request_reads_back_as_the_calls_arguments() -> None:
    listed = [ReplicaFetchPartition("orders", 0, 120, 3, 100),
              ReplicaFetchPartition("payments.eu-1", 7, 0, 0, 0)]
    arguments = (2, 2**61 + 5, True, listed, [("gone", 4)], 500, 1_048_576, 10_485_760)
    request = fetch_frames.read_fetch_request(body(fetch_frames.fetch_request(*arguments)))
    assert tuple(request) == arguments
    assert all(isinstance(p, ReplicaFetchPartition) for p in request.partitions)


def test_a_fetch_answer_reads_back_as_the_calls_reply() -> None:
    records = FetchedRecords(b"\x00batch-bytes\xff", 130, 125, 0, 130, 120, ((77, 118),))
    nothing = FetchedRecords(b"", 9, 9, 2, 9)
    refused = error_reply(ErrorCode.FENCED_LEADER_EPOCH, "epoch 3 is not 4", leader_epoch=4)
    reply = {"error": 0, "partitions": [
        ReplicaFetchAnswer("orders", 0, 120, records),
        ReplicaFetchAnswer("orders", 1, 9, nothing),
        ReplicaFetchAnswer("orders", 2, 40, refused),
    ]}
    assert fetch_frames.read_fetch_answer(body(fetch_frames.fetch_answer(reply))) == reply


def test_a_records_view_is_sent_as_its_bytes() -> None:
    view = memoryview(b"0123456789")[2:6]
    reply = {"error": 0, "partitions": [
        ReplicaFetchAnswer("t", 0, 0, FetchedRecords(view, 4, 4, 0, 4))]}
    answer = fetch_frames.read_fetch_answer(body(fetch_frames.fetch_answer(reply)))
    assert answer["partitions"][0].reply.records == b"2345"


def test_a_session_error_without_partitions_reads_back() -> None:
    reply = error_reply(ErrorCode.FETCH_SESSION_ID_NOT_FOUND, "no fetch session 5")
    assert fetch_frames.read_fetch_answer(body(fetch_frames.fetch_answer(reply))) == {
        **reply, "partitions": []}


def test_the_hello_carries_the_token() -> None:
    assert fetch_frames.read_hello(body(fetch_frames.hello(b"k" * 16))) == b"k" * 16


def packed(value: object) -> bytes:
    return msgpack.packb(value, use_bin_type=True)


GOOD_REQUEST = [2, 5, False, [["t", 0, 1, 0, 0]], [], 500, 1024, 4096]


@pytest.mark.parametrize("frame_body", [
    b"\xc1",                                         # not msgpack
    b"\x92\x01",                                     # msgpack cut short
    packed({"follower": 2}),                         # not a list
    packed(GOOD_REQUEST[:7]),                        # a field missing
    packed([*GOOD_REQUEST[:2], 1, *GOOD_REQUEST[3:]]),  # `full` not a boolean
    packed(["2", *GOOD_REQUEST[1:]]),                # a string for the follower id
    packed([2, 5, False, [["t", 0, 1.5, 0, 0]], [], 500, 1024, 4096]),   # a float offset
    packed([2, 5, False, [[0, 0, 1, 0, 0]], [], 500, 1024, 4096]),       # a topic not a string
    packed([2, 5, False, [["t", 0, 1, 0]], [], 500, 1024, 4096]),        # a short partition
    packed([2, 5, False, [], [["t"]], 500, 1024, 4096]),                 # a short removal
    packed([2, 5, False, "t", [], 500, 1024, 4096]),                     # partitions not a list
])
def test_anything_but_a_fetch_request_is_refused(frame_body: bytes) -> None:
    with pytest.raises(FrameError):
        fetch_frames.read_fetch_request(frame_body)


@pytest.mark.parametrize("frame_body", [
    packed([{"error": 0}]),
    packed([{"error": "0"}, []]),
    packed([{"error": 0}, [["t", 0, 0, [b"", 1, 1, 0]]]]),               # short records
    packed([{"error": 0}, [["t", 0, 0, ["r", 1, 1, 0, 1, -1, []]]]]),    # records not bytes
    packed([{"error": 0}, [["t", 0, 0, [b"", 1, 1, 0, 1, -1, [[1]]]]]]),  # a short abort
    packed([{"error": 0}, [["t", 0, 0, {"message": "no code"}]]]),
    packed([{"error": 0}, [["t", "0", 0, {"error": 6}]]]),
])
def test_anything_but_a_fetch_answer_is_refused(frame_body: bytes) -> None:
    with pytest.raises(FrameError):
        fetch_frames.read_fetch_answer(frame_body)


@pytest.mark.parametrize("frame_body", [
    packed([2, b"k" * 16]),      # another version
    packed([1, "k" * 16]),       # a token that is not bytes
    packed(GOOD_REQUEST),        # a fetch before the hello
])
def test_a_connection_must_open_with_the_hello(frame_body: bytes) -> None:
    with pytest.raises(FrameError):
        fetch_frames.read_hello(frame_body)


def test_a_frame_longer_than_allowed_is_refused_before_it_is_read() -> None:
    with pytest.raises(FrameError, match="more than the 1024 allowed"):
        fetch_frames.frame_length((1025).to_bytes(4, "big"), 1024)
