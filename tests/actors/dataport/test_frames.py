"""The data port's frames (pure logic): what a follower or a consumer sends and a host answers
reads back as the actor call's arguments and reply, and anything else is refused, not acted on."""

from __future__ import annotations

import msgpack
import pytest

from rafka.actors import messages
from rafka.actors.dataport import frames
from rafka.actors.dataport.frames import (
    CommitOffsetsRequest,
    CommitTransactionalOffsetsRequest,
    ConsumerFetchRequest,
    FetchOffsetsRequest,
    FrameError,
    FrameReader,
    KafkaFetchRequest,
    KafkaProduceRequest,
    ListOffsetsRequest,
    OffsetsForLeaderEpochRequest,
    ProduceRequest,
    WakeSessionRequest,
)
from rafka.actors.errors import ErrorCode, error_reply

LIMIT = frames.MAX_REQUEST_BYTES


def body(frame: bytes) -> bytes:
    """A frame's body, after checking the length in front of it."""
    length = frames.frame_length(frame[:4], LIMIT)
    assert length == len(frame) - 4
    return frame[4:]


def packed(value: object) -> bytes:
    return msgpack.packb(value, use_bin_type=True)


def test_a_fetch_request_reads_back_as_the_calls_arguments() -> None:
    listed = [messages.ReplicaFetchPartition("orders", 0, 120, 3, 100),
              messages.ReplicaFetchPartition("payments.eu-1", 7, 0, 0, 0)]
    arguments = (2, 2**61 + 5, True, listed, [("gone", 4)], 500, 1_048_576, 10_485_760)
    request = frames.decode_request(body(frames.replica_fetch_request(*arguments)))
    assert tuple(request) == arguments
    assert all(isinstance(p, messages.ReplicaFetchPartition) for p in request.partitions)


def test_a_fetch_answer_reads_back_as_the_calls_reply() -> None:
    records = messages.FetchedRecords(b"\x00batch-bytes\xff", 130, 125, 0, 130, 120, ((77, 118),))
    nothing = messages.FetchedRecords(b"", 9, 9, 2, 9)
    refused = error_reply(ErrorCode.FENCED_LEADER_EPOCH, "epoch 3 is not 4", leader=2)
    reply = messages.ReplicaFetchResponse([
        messages.ReplicaFetchAnswer("orders", 0, 120, records),
        messages.ReplicaFetchAnswer("orders", 1, 9, nothing),
        messages.ReplicaFetchAnswer("orders", 2, 40, refused),
    ])
    framed = frames.replica_fetch_answer(reply)
    assert frames.read_replica_fetch_answer(body(framed)) == reply


def test_a_records_view_is_sent_as_its_bytes() -> None:
    view = memoryview(b"0123456789")[2:6]
    reply = messages.ReplicaFetchResponse([
        messages.ReplicaFetchAnswer("t", 0, 0, messages.FetchedRecords(view, 4, 4, 0, 4))])
    answer = frames.read_replica_fetch_answer(body(frames.replica_fetch_answer(reply)))
    assert isinstance(answer, messages.ReplicaFetchResponse)
    assert answer.partitions[0].reply.records == b"2345"


def test_a_session_error_without_partitions_reads_back() -> None:
    reply = error_reply(ErrorCode.FETCH_SESSION_ID_NOT_FOUND, "no fetch session 5")
    answer = frames.read_replica_fetch_answer(body(frames.replica_fetch_answer(reply)))
    assert answer == reply
    assert type(answer) is messages.ErrorReply


def test_a_consumers_fetch_reads_back_as_the_calls_arguments() -> None:
    asked = [messages.PartitionFetch("orders", 0, 120, 1_048_576),
             messages.PartitionFetch("orders", 3, 0, 10)]
    request = frames.decode_request(body(
        frames.consumer_fetch_request(asked, 500, 1, 52_428_800, True)))
    assert request == ConsumerFetchRequest(asked, 500, 1, 52_428_800, True)
    assert type(request) is ConsumerFetchRequest
    assert all(isinstance(p, messages.PartitionFetch) for p in request.requests)


def test_a_kafka_listeners_requests_say_so() -> None:
    """A broker's Kafka listener asks the host to read and write Kafka's record format: its
    requests are methods of their own, so they never reach the native entry points."""
    asked = [messages.PartitionFetch("orders", 0, 120, 1_048_576)]
    fetch = frames.decode_request(body(
        frames.kafka_fetch_request(asked, 500, 1, 52_428_800, False)))
    assert fetch == KafkaFetchRequest(asked, 500, 1, 52_428_800, False)
    assert type(fetch) is KafkaFetchRequest
    parts = [messages.PartitionProduce("orders", 0, b"kafka-batch", None)]
    produce = frames.decode_request(body(frames.kafka_produce_request(parts, -1, 30_000)))
    assert produce == KafkaProduceRequest(parts, -1, 30_000)
    assert type(produce) is KafkaProduceRequest


def test_a_consumers_answer_reads_back_in_the_order_asked() -> None:
    replies = [messages.FetchedRecords(b"batches", 130, 125, 0, 130, 125),
               error_reply(ErrorCode.NOT_LEADER_OR_FOLLOWER, "refresh metadata"),
               messages.FetchedRecords(b"", 9, 9, 2, 9, 9, ((4, 7), (5, 8)))]
    assert frames.read_consumer_fetch_answer(
        body(frames.consumer_fetch_answer(replies))) == replies


def test_a_producers_request_reads_back_as_the_calls_arguments() -> None:
    parts = [messages.PartitionProduce("orders", 0, b"batch-0", None),
             messages.PartitionProduce("orders", 1, b"batch-1", b"\x05\x00\x00\x00")]
    request = frames.decode_request(body(frames.produce_request(parts, -1, 30_000)))
    assert request == ProduceRequest(parts, -1, 30_000)
    assert type(request) is ProduceRequest
    assert all(isinstance(p, messages.PartitionProduce) for p in request.requests)


def test_a_producers_answer_reads_back_in_the_order_sent() -> None:
    replies = [messages.Appended(100, 199, -1, 0),
               error_reply(ErrorCode.NOT_ENOUGH_REPLICAS, "2 in sync, 3 needed"),
               error_reply(ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER, "expected 7",
                           expected_sequence=7)]
    answer = frames.read_produce_answer(body(frames.produce_answer(replies)))
    assert answer == replies
    assert [type(reply) for reply in answer] == [
        messages.Appended, messages.ErrorReply, messages.ErrorReply]


def test_a_list_offsets_request_and_answer_read_back() -> None:
    queries = [messages.OffsetQuery("orders", 0, -1, False),
               messages.OffsetQuery("orders", 2, 1_700_000, True)]
    request = frames.decode_request(body(frames.list_offsets_request(queries)))
    assert request == ListOffsetsRequest(queries)
    assert all(isinstance(q, messages.OffsetQuery) for q in request.queries)
    replies = [messages.ListedOffset(130, -1, 4), messages.ListedOffset(None, -1, -1),
               error_reply(ErrorCode.NOT_LEADER_OR_FOLLOWER, "refresh metadata", leader=None)]
    answer = frames.read_list_offsets_answer(body(frames.list_offsets_answer(replies)))
    assert answer == replies
    assert [type(reply) for reply in answer] == [
        messages.ListedOffset, messages.ListedOffset, messages.ErrorReply]


def test_an_offset_fetch_and_its_answer_read_back() -> None:
    for partitions in (None, [["orders", 0], ["orders", 3]]):
        request = frames.decode_request(body(
            frames.fetch_offsets_request(17, "billing", partitions)))
        assert request == FetchOffsetsRequest(17, "billing", partitions)
    reply = messages.CommittedOffsets([messages.CommittedOffset("orders", 0, 120, "", 3),
                                       messages.CommittedOffset("orders", 3, 7, "m", None)])
    answer = frames.read_fetch_offsets_answer(body(frames.fetch_offsets_answer(reply)))
    assert answer == reply
    assert isinstance(answer, messages.CommittedOffsets)
    assert all(type(entry) is messages.CommittedOffset for entry in answer.offsets)
    refused = error_reply(ErrorCode.NOT_LEADER_OR_FOLLOWER, "moved", leader=2)
    assert frames.read_fetch_offsets_answer(
        body(frames.fetch_offsets_answer(refused))) == refused


def test_an_offsets_for_leader_epoch_request_and_answer_read_back() -> None:
    queries = [messages.EpochQuery("orders", 0, 3, 5), messages.EpochQuery("orders", 4, 0, 2)]
    request = frames.decode_request(body(frames.offsets_for_leader_epoch_request(queries)))
    assert request == OffsetsForLeaderEpochRequest(queries)
    assert all(type(query) is messages.EpochQuery for query in request.queries)
    replies = [messages.EpochEndOffset(3, 1_200),
               error_reply(ErrorCode.FENCED_LEADER_EPOCH, "epoch 2 < 4", leader=None)]
    answer = frames.read_offsets_for_leader_epoch_answer(
        body(frames.offsets_for_leader_epoch_answer(replies)))
    assert answer == replies
    assert [type(reply) for reply in answer] == [messages.EpochEndOffset, messages.ErrorReply]


def test_an_offset_commit_and_its_answer_read_back() -> None:
    offsets = [["orders", 0, 42, ""], ["orders", 3, 7, "checkpoint 9", 5]]
    request = frames.decode_request(body(frames.commit_offsets_request(17, "billing", offsets,
                                                                       5000)))
    assert request == CommitOffsetsRequest(17, "billing", offsets, 5000)
    assert frames.read_commit_offsets_answer(body(frames.commit_offsets_answer(None))) is None
    refused = error_reply(ErrorCode.NOT_LEADER_OR_FOLLOWER, "moved", leader=2)
    assert frames.read_commit_offsets_answer(
        body(frames.commit_offsets_answer(refused))) == refused


@pytest.mark.parametrize("frame_body", [
    packed(["commit_offsets", 17, "billing", []]),                      # no timeout
    packed(["commit_offsets", "17", "billing", [], 5000]),              # a string partition
    packed(["commit_offsets", 17, "billing", [["orders", 0, 42]], 5000]),  # no metadata
    packed(["commit_offsets", 17, "billing", [["orders", 0, "42", ""]], 5000]),  # a string offset
    packed(["commit_offsets", 17, "billing", [["orders", 0, 42, None]], 5000]),  # nil metadata
    packed(["commit_offsets", 17, "billing", [["orders", 0, 42, "", "5"]], 5000]),  # string epoch
    packed(["commit_offsets", 17, "billing", "orders", 5000]),          # offsets not a list
])
def test_anything_but_an_offset_commit_is_refused(frame_body: bytes) -> None:
    with pytest.raises(FrameError):
        frames.decode_request(frame_body)


def test_a_transactional_offset_commit_reads_back() -> None:
    offsets = [["orders", 0, 42, ""], ["orders", 3, 7, "checkpoint 9", 5]]
    request = frames.decode_request(body(frames.commit_transactional_offsets_request(
        17, "billing", 4000, 3, offsets, 5000)))
    assert request == CommitTransactionalOffsetsRequest(17, "billing", 4000, 3, offsets, 5000)
    fenced = error_reply(ErrorCode.INVALID_PRODUCER_EPOCH, "epoch 3 < 4")
    assert frames.ANSWER_READERS[frames.COMMIT_TRANSACTIONAL_OFFSETS](
        body(frames.ANSWERS[CommitTransactionalOffsetsRequest](fenced))) == fenced


@pytest.mark.parametrize("frame_body", [
    packed(["commit_transactional_offsets", 17, "billing", 4000, 3, []]),   # no timeout
    packed(["commit_transactional_offsets", 17, "billing", "4000", 3, [], 5000]),  # string id
    packed(["commit_transactional_offsets", 17, "billing", 4000, None, [], 5000]),  # nil epoch
    packed(["commit_transactional_offsets", 17, "billing", 4000, 3,
            [["orders", 0, 42]], 5000]),                                    # no metadata
    packed(["commit_transactional_offsets", 17, "billing", 4000, 3, "orders", 5000]),
])
def test_anything_but_a_transactional_offset_commit_is_refused(frame_body: bytes) -> None:
    with pytest.raises(FrameError):
        frames.decode_request(frame_body)


def test_an_offset_commits_answer_is_nil_or_an_error() -> None:
    with pytest.raises(FrameError):
        frames.read_commit_offsets_answer(packed([0]))


def test_a_wake_up_and_its_answer_read_back() -> None:
    request = frames.decode_request(body(frames.wake_session_request(2, 1 << 61)))
    assert request == WakeSessionRequest(2, 1 << 61)
    assert frames.read_wake_session_answer(body(frames.wake_session_answer(None))) is None


@pytest.mark.parametrize("frame_body", [
    packed(["wake_session", 2]),                               # no session id
    packed(["wake_session", 2, "7"]),                          # a string session id
    packed(["wake_session", True, 7]),                         # a boolean follower id
    packed(["wake_session", 2, 7, 0]),                         # a field too many
])
def test_anything_but_a_wake_up_is_refused(frame_body: bytes) -> None:
    with pytest.raises(FrameError):
        frames.decode_request(frame_body)


def test_a_wake_ups_answer_is_nil() -> None:
    with pytest.raises(FrameError):
        frames.read_wake_session_answer(packed([0]))


@pytest.mark.parametrize("frame_body", [
    packed(["offsets_for_leader_epoch"]),                      # no partitions
    packed(["offsets_for_leader_epoch", [["t", 0, 3]]]),       # a short partition
    packed(["offsets_for_leader_epoch", [["t", 0, 3, "5"]]]),  # a string epoch
    packed(["offsets_for_leader_epoch", [["t", 0, True, 5]]]), # a boolean epoch
    packed(["offsets_for_leader_epoch", [[0, 0, 3, 5]]]),      # a topic not a string
])
def test_anything_but_an_offsets_for_leader_epoch_request_is_refused(frame_body: bytes) -> None:
    with pytest.raises(FrameError):
        frames.decode_request(frame_body)


@pytest.mark.parametrize("frame_body", [
    packed({"error": 0}),                                      # not a list
    packed([[3]]),                                             # a short entry
    packed([[3, "1200"]]),                                     # a string offset
])
def test_anything_but_an_offsets_for_leader_epoch_answer_is_refused(frame_body: bytes) -> None:
    with pytest.raises(FrameError):
        frames.read_offsets_for_leader_epoch_answer(frame_body)


@pytest.mark.parametrize("frame_body", [
    packed(["fetch_offsets", 17, "billing"]),                  # a field missing
    packed(["fetch_offsets", "17", "billing", None]),          # a string for the partition
    packed(["fetch_offsets", 17, b"billing", None]),           # a group not a string
    packed(["fetch_offsets", 17, "billing", [["orders"]]]),    # a short partition
    packed(["fetch_offsets", 17, "billing", "orders"]),        # partitions not a list
])
def test_anything_but_an_offset_fetch_is_refused(frame_body: bytes) -> None:
    with pytest.raises(FrameError):
        frames.decode_request(frame_body)


@pytest.mark.parametrize("frame_body", [
    packed(0),                                                 # not a list nor an error
    packed({"offsets": []}),                                   # not an error's fields
    packed([["orders", 0, 120, ""]]),                          # a short entry
    packed([["orders", 0, "120", "", 3]]),                     # a string offset
])
def test_anything_but_an_offset_fetch_answer_is_refused(frame_body: bytes) -> None:
    with pytest.raises(FrameError):
        frames.read_fetch_offsets_answer(frame_body)


@pytest.mark.parametrize("frame_body", [
    packed(["list_offsets"]),                                  # no partitions
    packed(["list_offsets", [["t", 0, -1]]]),                  # a short partition
    packed(["list_offsets", [["t", 0, -1.5, False]]]),         # a float timestamp
    packed(["list_offsets", [["t", 0, -1, 0]]]),               # read_committed not a boolean
    packed(["list_offsets", [[0, 0, -1, False]]]),             # a topic not a string
])
def test_anything_but_a_list_offsets_request_is_refused(frame_body: bytes) -> None:
    with pytest.raises(FrameError):
        frames.decode_request(frame_body)


@pytest.mark.parametrize("frame_body", [
    packed({"error": 0}),                                      # not a list
    packed([{"offset": 3}]),                                   # not an error's fields
    packed([[3, -1]]),                                         # a short offset
    packed([[[3], -1, 0]]),                                    # not a plain value
    packed([[3, -1, "0"]]),                                    # a string leader epoch
])
def test_anything_but_a_list_offsets_answer_is_refused(frame_body: bytes) -> None:
    with pytest.raises(FrameError):
        frames.read_list_offsets_answer(frame_body)


@pytest.mark.parametrize("frame_body", [
    packed(["produce", [["t", 0, b"r", None]], -1]),                 # a field missing
    packed(["produce", [["t", 0, "r", None]], -1, 1000]),            # records not bytes
    packed(["produce", [["t", 0, b"r", 5]], -1, 1000]),              # record ends not bytes
    packed(["produce", [["t", 0, b"r"]], -1, 1000]),                 # a short partition
    packed(["produce", "t", -1, 1000]),                              # partitions not a list
    packed(["produce", [], "all", 1000]),                            # acks not an integer
    packed(["produce", [], -1, 1000, True]),                         # a field too many
    packed(["produce_kafka", [["t", 0, b"r", None]], -1]),           # a field missing
    packed(["produce_kafka", [["t", 0, "r", None]], -1, 1000]),      # records not bytes
    packed(["produce_kafka", [], -1, "1000"]),                       # a string timeout
    packed(["produce_kafka", [], -1, 1000, True]),                   # a field too many
])
def test_anything_but_a_producers_request_is_refused(frame_body: bytes) -> None:
    with pytest.raises(FrameError):
        frames.decode_request(frame_body)


@pytest.mark.parametrize("frame_body", [
    packed({"error": 0}),
    packed([[1, 2, 3]]),
    packed([[1, 2, "3", 4]]),
    packed([{"message": "no code"}]),
])
def test_anything_but_a_producers_answer_is_refused(frame_body: bytes) -> None:
    with pytest.raises(FrameError):
        frames.read_produce_answer(frame_body)


def test_frames_come_out_whole_however_the_bytes_are_cut() -> None:
    framed = [frames.frame(["a"]), frames.frame([b"x" * 70_000]), frames.frame([])]
    stream = b"".join(framed)
    for cut in (1, 3, 4, 5, 1000, len(stream)):
        reader = FrameReader(LIMIT)
        bodies = []
        for start in range(0, len(stream), cut):
            bodies += reader.feed(stream[start:start + cut])
        assert bodies == [frame[4:] for frame in framed], f"cut every {cut} bytes"


def test_a_reader_refuses_a_frame_beyond_its_limit_from_its_header() -> None:
    reader = FrameReader(100)
    with pytest.raises(FrameError):
        reader.feed((101).to_bytes(4, "big"))


def test_the_hello_carries_the_token() -> None:
    assert frames.read_hello(body(frames.hello(b"k" * 16))) == b"k" * 16


GOOD_REQUEST = ["replica_fetch", 2, 5, False, [["t", 0, 1, 0, 0]], [], 500, 1024, 4096]


def replica_fetch(*fields: object) -> bytes:
    return packed(["replica_fetch", *fields])


@pytest.mark.parametrize("frame_body", [
    b"\xc1",                                         # not msgpack
    b"\x92\x01",                                     # msgpack cut short
    packed({"follower": 2}),                         # not a list
    packed([]),                                      # no method
    packed(["produce", 1, 2]),                       # a method the port does not serve
    packed(GOOD_REQUEST[:8]),                        # a field missing
    replica_fetch(2, 5, 1, [], [], 500, 1024, 4096),                 # `full` not a boolean
    replica_fetch("2", 5, False, [], [], 500, 1024, 4096),           # a string for an id
    replica_fetch(2, 5, False, [["t", 0, 1.5, 0, 0]], [], 500, 1024, 4096),  # a float offset
    replica_fetch(2, 5, False, [[0, 0, 1, 0, 0]], [], 500, 1024, 4096),  # a topic not a string
    replica_fetch(2, 5, False, [["t", 0, 1, 0]], [], 500, 1024, 4096),  # a short partition
    replica_fetch(2, 5, False, [], [["t"]], 500, 1024, 4096),        # a short removal
    replica_fetch(2, 5, False, "t", [], 500, 1024, 4096),            # partitions not a list
    packed(["fetch", [["t", 0, 0, 1024]], 500, 1, 4096]),                   # a field missing
    packed(["fetch", [["t", 0, 0]], 500, 1, 4096, False]),                  # a short partition
    packed(["fetch", [["t", 0, 0, 1024]], 500, 1, 4096, 0]),                # not a boolean
    packed(["fetch", [["t", 0, 0, 1024]], 500, 1, 4096, False, True]),      # a field too many
    packed(["fetch", [["t", 0, 0, "1024"]], 500, 1, 4096, False]),          # a string for bytes
    packed(["fetch_kafka", [["t", 0, 0, 1024]], 500, 1, 4096]),             # a field missing
    packed(["fetch_kafka", [["t", 0, 0]], 500, 1, 4096, False]),            # a short partition
    packed(["fetch_kafka", [["t", 0, 0, 1024]], 500, 1, 4096, "yes"]),      # not a boolean
    packed(["fetch_kafka", [["t", 0, 0, 1024]], 500, 1, 4096, False, True]),  # too many
])
def test_anything_but_a_fetch_request_is_refused(frame_body: bytes) -> None:
    with pytest.raises(FrameError):
        frames.decode_request(frame_body)


@pytest.mark.parametrize("frame_body", [
    packed({"code": 70}),                                                # a short error
    packed([{"code": "0"}, []]),
    packed([["t", 0, 0, [b"", 1, 1, 0]]]),                               # short records
    packed([["t", 0, 0, ["r", 1, 1, 0, 1, -1, []]]]),                    # records not bytes
    packed([["t", 0, 0, [b"", 1, 1, 0, 1, -1, [[1]]]]]),                 # a short abort
    packed([["t", 0, 0, {"message": "no code"}]]),
    packed([["t", "0", 0, {"code": 6}]]),
    packed([["t", 0, 0, {**error_reply(ErrorCode.NOT_LEADER_OR_FOLLOWER, "x")._asdict(),
                         "leader": "2"}]]),                             # a string leader
    packed(7),                                                           # not a list
])
def test_anything_but_a_fetch_answer_is_refused(frame_body: bytes) -> None:
    with pytest.raises(FrameError):
        frames.read_replica_fetch_answer(frame_body)


@pytest.mark.parametrize("frame_body", [
    packed([frames.VERSION - 1, b"k" * 16]),  # another version: the frames changed since
    packed([frames.VERSION, "k" * 16]),       # a token that is not bytes
    packed(GOOD_REQUEST),        # a fetch before the hello
])
def test_a_connection_must_open_with_the_hello(frame_body: bytes) -> None:
    with pytest.raises(FrameError):
        frames.read_hello(frame_body)


def test_a_frame_longer_than_allowed_is_refused_before_it_is_read() -> None:
    with pytest.raises(FrameError, match="more than the 1024 allowed"):
        frames.frame_length((1025).to_bytes(4, "big"), 1024)
