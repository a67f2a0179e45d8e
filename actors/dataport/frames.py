"""The data port's frames: a replica host's produce and fetch requests as bytes on a TCP
connection, msgpack with the length in front.

The steady data path runs over connections kept to each replica host's data port
(`rafka.actors.dataport.server`) instead of a Ray actor call each: a producer's requests
(`ReplicaHost.produce`), a follower host's fetches from its leader host
(`ReplicaHost.replica_fetch`, `ReplicaHost.offsets_for_leader_epoch` before a follower
truncates, and `ReplicaHost.wake_session` when a held fetch should list a new partition) and a
consumer's (`ReplicaHost.fetch`) and a group member's offset commits and fetches
(`ReplicaHost.commit_offsets`, `ReplicaHost.fetch_offsets`, and a transactional producer's
`ReplicaHost.commit_transactional_offsets`), and a broker's Kafka listener's
produce and fetch requests on behalf of Kafka clients (`ReplicaHost.produce_kafka` and
`ReplicaHost.fetch_kafka`: their batches are in Kafka's record format, converted on the host). A
Ray call costs a hop about 2-8 ms on this project's machines, a frame on a kept connection well
under one (docs/latency.md). Each request is the actor call's arguments, tagged with the
method's name, and each answer its reply; this module turns them into bytes and back, and checks
every field of what it reads, since anything that can reach the port can write to it. A
connection's first frame must carry the host's token, which only a caller of the host actor
learns (`ReplicaHost.data_port_address`), so the port admits exactly who Ray would.

No I/O here, as h11 keeps its state machine free of it: the port and its clients read and
write the frames (`FrameReader` gathers them from bytes as they come).
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple, TypeVar

import msgpack

from rafka.actors.messages import (
    Appended,
    CommittedOffset,
    CommittedOffsets,
    EpochEndOffset,
    EpochQuery,
    ErrorReply,
    FetchedRecords,
    ListedOffset,
    OffsetQuery,
    PartitionFetch,
    PartitionProduce,
    ReplicaFetchAnswer,
    ReplicaFetchPartition,
    ReplicaFetchResponse,
)
from rafka.common.errors import RafkaError

LENGTH = struct.Struct(">I")
# A fetch request lists partitions (about 40 bytes each).
MAX_REQUEST_BYTES = 16 * 1024 * 1024
# 2: Kafka-format produce and fetch became methods of their own (no flag in the frames).
# 3: answers are lists of typed fields, errors maps of `ErrorReply`'s.
# 4: a follower asks OffsetsForLeaderEpoch over the port (no Ray call on its path).
VERSION = 5
REPLICA_FETCH = "replica_fetch"
CONSUMER_FETCH = "fetch"
KAFKA_FETCH = "fetch_kafka"
PRODUCE = "produce"
KAFKA_PRODUCE = "produce_kafka"
LIST_OFFSETS = "list_offsets"
FETCH_OFFSETS = "fetch_offsets"
COMMIT_OFFSETS = "commit_offsets"
COMMIT_TRANSACTIONAL_OFFSETS = "commit_transactional_offsets"
OFFSETS_FOR_LEADER_EPOCH = "offsets_for_leader_epoch"
WAKE_SESSION = "wake_session"

Reply = FetchedRecords | ErrorReply
_PartitionReply = TypeVar("_PartitionReply")
"""What one partition's entry of a per-partition answer reads as, when it is not an error."""


class FrameError(RafkaError, ValueError):
    """A frame that is not what this protocol sends: the connection is closed."""


def frame(payload: object) -> bytes:
    """`payload` packed, with its length in front."""
    body = msgpack.packb(payload, use_bin_type=True)
    return LENGTH.pack(len(body)) + body


def frame_length(header: bytes, limit: int) -> int:
    """The length a frame's 4-byte header announces, refused beyond `limit`."""
    (length,) = LENGTH.unpack(header)
    if length > limit:
        raise FrameError(f"a frame of {length} bytes, more than the {limit} allowed")
    return length


class FrameReader:
    """Whole frames' bodies out of bytes as they arrive, each at most `limit` bytes."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._buffer = bytearray()
        self._length: int | None = None

    def feed(self, data: bytes) -> list[bytes]:
        """The bodies that `data` completes (FrameError for one beyond the limit)."""
        self._buffer += data
        bodies: list[bytes] = []
        while True:
            if self._length is None:
                if len(self._buffer) < LENGTH.size:
                    return bodies
                self._length = frame_length(bytes(self._buffer[:LENGTH.size]), self.limit)
                del self._buffer[:LENGTH.size]
            if len(self._buffer) < self._length:
                return bodies
            bodies.append(bytes(self._buffer[:self._length]))
            del self._buffer[:self._length]
            self._length = None


def _unpack(body: bytes) -> Any:
    try:
        return msgpack.unpackb(body, raw=False, strict_map_key=True, use_list=True)
    except (ValueError, msgpack.UnpackException) as error:
        raise FrameError(f"not a msgpack frame: {error}") from error


def _ints(values: list[Any], what: str) -> None:
    if not all(type(value) is int for value in values):
        raise FrameError(f"{what}: every field must be an integer")


def _partition_entry(entry: Any, fields: int, what: str) -> list[Any]:
    """`[topic, int, int, ...]` of `fields` fields, checked."""
    if not isinstance(entry, list) or len(entry) != fields or not isinstance(entry[0], str):
        raise FrameError(f"{what} has {fields} fields, a topic first")
    _ints(entry[1:], what)
    return entry


# ------------------------------------------------------------------------------ the hello

def hello(token: bytes) -> bytes:
    """The connection's first frame: the protocol's version and the host's token."""
    return frame([VERSION, token])


def read_hello(body: bytes) -> bytes:
    """The token a connection opened with (FrameError for anything else)."""
    message = _unpack(body)
    if (not isinstance(message, list) or len(message) != 2 or message[0] != VERSION
            or not isinstance(message[1], bytes)):
        raise FrameError(f"the first frame must be [version {VERSION}, token]")
    return message[1]


# ---------------------------------------------------------------------------- the requests

class ReplicaFetchRequest(NamedTuple):
    """`ReplicaHost.replica_fetch`'s arguments, in its order."""

    follower_id: int
    session_id: int
    full: bool
    partitions: list[ReplicaFetchPartition]
    removed: list[tuple[str, int]]
    max_wait_ms: int
    partition_max_bytes: int
    max_bytes: int


class ConsumerFetchRequest(NamedTuple):
    """`ReplicaHost.fetch`'s arguments, in its order."""

    requests: list[PartitionFetch]
    max_wait_ms: int
    min_bytes: int
    max_bytes: int
    read_committed: bool


class KafkaFetchRequest(NamedTuple):
    """`ReplicaHost.fetch_kafka`'s arguments, in its order: a broker's Kafka listener's fetch,
    whose batches the host converts to Kafka's record format."""

    requests: list[PartitionFetch]
    max_wait_ms: int
    min_bytes: int
    max_bytes: int
    read_committed: bool


class ProduceRequest(NamedTuple):
    """`ReplicaHost.produce`'s arguments, in its order."""

    requests: list[PartitionProduce]
    acks: int
    timeout_ms: int
    transactional_id: str | None = None


class KafkaProduceRequest(NamedTuple):
    """`ReplicaHost.produce_kafka`'s arguments, in its order: a broker's Kafka listener's
    produce, whose batches are a Kafka client's, which the host checks and converts."""

    requests: list[PartitionProduce]
    acks: int
    timeout_ms: int
    transactional_id: str | None = None


class ListOffsetsRequest(NamedTuple):
    """`ReplicaHost.list_offsets`'s argument: a Kafka client's ListOffsets, the host's share."""

    queries: list[OffsetQuery]


class FetchOffsetsRequest(NamedTuple):
    """`ReplicaHost.fetch_offsets`'s arguments: a group's committed offsets, from the offset
    manager of its `__consumer_offsets` partition (all of them when `partitions` is None)."""

    partition: int
    group: str
    partitions: list[list[Any]] | None


class CommitOffsetsRequest(NamedTuple):
    """`ReplicaHost.commit_offsets`'s arguments: a group's OffsetCommit, for the offset
    manager of its `__consumer_offsets` partition; each offset is [topic, partition, offset,
    metadata] or, with the leader epoch it was read at, [..., leader epoch]."""

    partition: int
    group: str
    offsets: list[list[Any]]
    timeout_ms: int


class CommitTransactionalOffsetsRequest(NamedTuple):
    """`ReplicaHost.commit_transactional_offsets`'s arguments: a transactional producer's
    TxnOffsetCommit of a group's offsets (as in `CommitOffsetsRequest`), counted once its
    transaction commits."""

    partition: int
    group: str
    producer_id: int
    producer_epoch: int
    offsets: list[list[Any]]
    timeout_ms: int
    transactional_id: str | None = None


class OffsetsForLeaderEpochRequest(NamedTuple):
    """`ReplicaHost.offsets_for_leader_epoch`'s argument: where a follower's epochs end on
    its leader, before it truncates (KIP-101)."""

    queries: list[EpochQuery]


class WakeSessionRequest(NamedTuple):
    """`ReplicaHost.wake_session`'s arguments: answer this follower's held fetch now. It comes
    on a connection of its own, since the fetch it wakes holds the follower's other one."""

    follower_id: int
    session_id: int


def produce_request(requests: list[PartitionProduce], acks: int, timeout_ms: int,
                    transactional_id: str | None = None) -> bytes:
    """The frame of a producer's request: each partition's batches, and where each record ends
    when the producer says (`PartitionProduce.record_ends`); a transactional producer's id."""
    return frame([PRODUCE, [list(request) for request in requests], acks, timeout_ms,
                  transactional_id])


def kafka_produce_request(requests: list[PartitionProduce], acks: int,
                          timeout_ms: int, transactional_id: str | None = None) -> bytes:
    """The frame of a Kafka listener's produce: each partition's Kafka batches."""
    return frame([KAFKA_PRODUCE, [list(request) for request in requests], acks, timeout_ms,
                  transactional_id])


def replica_fetch_request(follower_id: int, session_id: int, full: bool,
                          partitions: list[ReplicaFetchPartition],
                          removed: list[tuple[str, int]], max_wait_ms: int,
                          partition_max_bytes: int, max_bytes: int) -> bytes:
    """The frame of a follower host's fetch."""
    return frame([REPLICA_FETCH, follower_id, session_id, full, [list(p) for p in partitions],
                  [list(tp) for tp in removed], max_wait_ms, partition_max_bytes, max_bytes])


def consumer_fetch_request(requests: list[PartitionFetch], max_wait_ms: int, min_bytes: int,
                           max_bytes: int, read_committed: bool) -> bytes:
    """The frame of a consumer's fetch (`ReplicaHost.fetch`'s arguments)."""
    return frame([CONSUMER_FETCH, [list(request) for request in requests], max_wait_ms,
                  min_bytes, max_bytes, read_committed])


def kafka_fetch_request(requests: list[PartitionFetch], max_wait_ms: int, min_bytes: int,
                        max_bytes: int, read_committed: bool) -> bytes:
    """The frame of a Kafka listener's fetch (`ReplicaHost.fetch_kafka`'s arguments)."""
    return frame([KAFKA_FETCH, [list(request) for request in requests], max_wait_ms,
                  min_bytes, max_bytes, read_committed])


def list_offsets_request(queries: list[OffsetQuery]) -> bytes:
    """The frame of ListOffsets for partitions led by one host."""
    return frame([LIST_OFFSETS, [list(query) for query in queries]])


def fetch_offsets_request(partition: int, group: str,
                          partitions: list[list[Any]] | None = None) -> bytes:
    """The frame of a group's OffsetFetch, for its offset manager's host."""
    return frame([FETCH_OFFSETS, partition, group,
                  None if partitions is None else [list(tp) for tp in partitions]])


def commit_offsets_request(partition: int, group: str, offsets: list[list[Any]],
                           timeout_ms: int) -> bytes:
    """The frame of a group's OffsetCommit, for its offset manager's host."""
    return frame([COMMIT_OFFSETS, partition, group, [list(entry) for entry in offsets],
                  timeout_ms])


def commit_transactional_offsets_request(partition: int, group: str, producer_id: int,
                                         producer_epoch: int, offsets: list[list[Any]],
                                         timeout_ms: int,
                                         transactional_id: str | None = None) -> bytes:
    """The frame of a transactional producer's TxnOffsetCommit, for the group's offset
    manager's host."""
    return frame([COMMIT_TRANSACTIONAL_OFFSETS, partition, group, producer_id, producer_epoch,
                  [list(entry) for entry in offsets], timeout_ms, transactional_id])


def offsets_for_leader_epoch_request(queries: list[EpochQuery]) -> bytes:
    """The frame of a follower's OffsetsForLeaderEpoch, for partitions led by one host."""
    return frame([OFFSETS_FOR_LEADER_EPOCH, [list(query) for query in queries]])


def wake_session_request(follower_id: int, session_id: int) -> bytes:
    """The frame of a follower's wake-up of its fetch session on a leader host."""
    return frame([WAKE_SESSION, follower_id, session_id])


Request = (ProduceRequest | KafkaProduceRequest | ReplicaFetchRequest | ConsumerFetchRequest
           | KafkaFetchRequest | ListOffsetsRequest | FetchOffsetsRequest | CommitOffsetsRequest
           | CommitTransactionalOffsetsRequest
           | OffsetsForLeaderEpochRequest | WakeSessionRequest)


def decode_request(body: bytes) -> Request:
    """A request frame's body as the request it is, checked field by field (FrameError for
    anything else)."""
    message = _unpack(body)
    if not isinstance(message, list) or not message:
        raise FrameError("a request is [method, fields...]")
    method, fields = message[0], message[1:]
    if method == REPLICA_FETCH:
        return _read_replica_fetch(fields)
    if method == CONSUMER_FETCH:
        return ConsumerFetchRequest(*_read_consumer_fetch(fields))
    if method == KAFKA_FETCH:
        return KafkaFetchRequest(*_read_consumer_fetch(fields))
    if method == PRODUCE:
        return ProduceRequest(*_read_produce(fields))
    if method == KAFKA_PRODUCE:
        return KafkaProduceRequest(*_read_produce(fields))
    if method == LIST_OFFSETS:
        return _read_list_offsets(fields)
    if method == FETCH_OFFSETS:
        return _read_fetch_offsets(fields)
    if method == COMMIT_OFFSETS:
        return _read_commit_offsets(fields)
    if method == COMMIT_TRANSACTIONAL_OFFSETS:
        return _read_commit_transactional_offsets(fields)
    if method == OFFSETS_FOR_LEADER_EPOCH:
        return _read_offsets_for_leader_epoch(fields)
    if method == WAKE_SESSION:
        if len(fields) != 2 or any(type(value) is not int for value in fields):
            raise FrameError("a wake-up is [follower id, session id]")
        return WakeSessionRequest(*fields)
    raise FrameError(f"no method {method!r} here: the port serves "
                     f"{', '.join(map(repr, REQUESTS))}")


def _read_replica_fetch(fields: list[Any]) -> ReplicaFetchRequest:
    if len(fields) != 8:
        raise FrameError("a follower's fetch has 8 fields")
    (follower_id, session_id, full, partitions, removed, max_wait_ms, partition_max_bytes,
     max_bytes) = fields
    _ints([follower_id, session_id, max_wait_ms, partition_max_bytes, max_bytes],
          "a follower's fetch")
    if not isinstance(full, bool) or not isinstance(partitions, list) \
            or not isinstance(removed, list):
        raise FrameError("a follower's fetch has a boolean `full` and lists of partitions")
    listed = [ReplicaFetchPartition(*_partition_entry(entry, 5, "a listed partition"))
              for entry in partitions]
    gone = [tuple(_partition_entry(entry, 2, "a removed partition")) for entry in removed]
    return ReplicaFetchRequest(follower_id, session_id, full, listed, gone, max_wait_ms,
                               partition_max_bytes, max_bytes)


def _read_consumer_fetch(fields: list[Any]) -> tuple[list[PartitionFetch], int, int, int,
                                                      bool]:
    """A consumer's fetch's fields (a Kafka listener's too), checked."""
    if len(fields) != 5:
        raise FrameError("a consumer's fetch has 5 fields")
    requests, max_wait_ms, min_bytes, max_bytes, read_committed = fields
    _ints([max_wait_ms, min_bytes, max_bytes], "a consumer's fetch")
    if not isinstance(requests, list) or not isinstance(read_committed, bool):
        raise FrameError("a consumer's fetch has a list of partitions and a boolean "
                         "`read_committed`")
    asked = [PartitionFetch(*_partition_entry(entry, 4, "a fetched partition"))
             for entry in requests]
    return asked, max_wait_ms, min_bytes, max_bytes, read_committed


def _read_produce(fields: list[Any]) -> tuple[list[PartitionProduce], int, int, str | None]:
    """A producer's request's fields (a Kafka listener's too), checked. A producer of an
    earlier rafka sends no transactional id (three fields)."""
    if len(fields) not in (3, 4):
        raise FrameError("a producer's request has 4 fields")
    requests, acks, timeout_ms, transactional_id = (*fields, None) if len(fields) == 3 \
        else fields
    _ints([acks, timeout_ms], "a producer's request")
    if not isinstance(transactional_id, str | None):
        raise FrameError("a producer's transactional id is a string or nil")
    if not isinstance(requests, list):
        raise FrameError("a producer's request has a list of partitions")
    parts = []
    for entry in requests:
        if (not isinstance(entry, list) or len(entry) != 4 or not isinstance(entry[0], str)
                or type(entry[1]) is not int or not isinstance(entry[2], bytes)
                or not isinstance(entry[3], bytes | None)):
            raise FrameError("a produced partition is [topic, partition, records, record ends "
                             "or nil]")
        parts.append(PartitionProduce(*entry))
    return parts, acks, timeout_ms, transactional_id


def _read_list_offsets(fields: list[Any]) -> ListOffsetsRequest:
    if len(fields) != 1 or not isinstance(fields[0], list):
        raise FrameError("ListOffsets has one field, a list of partitions")
    queries = []
    for entry in fields[0]:
        if (not isinstance(entry, list) or len(entry) != 4 or not isinstance(entry[0], str)
                or type(entry[1]) is not int or type(entry[2]) is not int
                or not isinstance(entry[3], bool)):
            raise FrameError("a ListOffsets partition is [topic, partition, timestamp, "
                             "read_committed]")
        queries.append(OffsetQuery(*entry))
    return ListOffsetsRequest(queries)


def _read_offsets_for_leader_epoch(fields: list[Any]) -> OffsetsForLeaderEpochRequest:
    if len(fields) != 1 or not isinstance(fields[0], list):
        raise FrameError("OffsetsForLeaderEpoch has one field, a list of partitions")
    queries = []
    for entry in fields[0]:
        if (not isinstance(entry, list) or len(entry) != 4 or not isinstance(entry[0], str)
                or any(type(value) is not int for value in entry[1:])):
            raise FrameError("an OffsetsForLeaderEpoch partition is [topic, partition, epoch, "
                             "current leader epoch]")
        queries.append(EpochQuery(*entry))
    return OffsetsForLeaderEpochRequest(queries)


def _read_fetch_offsets(fields: list[Any]) -> FetchOffsetsRequest:
    if len(fields) != 3 or type(fields[0]) is not int or not isinstance(fields[1], str):
        raise FrameError("an OffsetFetch is [partition, group, partitions or nil]")
    partition, group, partitions = fields
    if partitions is not None:
        if not isinstance(partitions, list):
            raise FrameError("an OffsetFetch's partitions are a list or nil")
        partitions = [_partition_entry(entry, 2, "an OffsetFetch partition")
                      for entry in partitions]
    return FetchOffsetsRequest(partition, group, partitions)


def _read_commit_offsets(fields: list[Any]) -> CommitOffsetsRequest:
    if (len(fields) != 4 or type(fields[0]) is not int or not isinstance(fields[1], str)
            or type(fields[3]) is not int):
        raise FrameError("an OffsetCommit is [partition, group, offsets, timeout ms]")
    _check_committed_offsets(fields[2])
    return CommitOffsetsRequest(*fields)


def _read_commit_transactional_offsets(fields: list[Any]
                                       ) -> CommitTransactionalOffsetsRequest:
    # A producer of an earlier rafka sends no transactional id (six fields).
    if (len(fields) not in (6, 7) or type(fields[0]) is not int
            or not isinstance(fields[1], str)
            or any(type(value) is not int for value in (fields[2], fields[3], fields[5]))
            or (len(fields) == 7 and not isinstance(fields[6], str | None))):
        raise FrameError("a TxnOffsetCommit is [partition, group, producer id, producer epoch, "
                         "offsets, timeout ms, transactional id]")
    _check_committed_offsets(fields[4])
    return CommitTransactionalOffsetsRequest(*fields)


def _check_committed_offsets(offsets: Any) -> None:
    if not isinstance(offsets, list):
        raise FrameError("committed offsets are a list")
    for entry in offsets:
        if (not isinstance(entry, list) or len(entry) not in (4, 5)
                or not isinstance(entry[0], str) or not isinstance(entry[3], str)
                or any(type(value) is not int for value in (entry[1], entry[2], *entry[4:]))):
            raise FrameError("a committed offset is [topic, partition, offset, metadata"
                             "(, leader epoch)]")


# ----------------------------------------------------------------------------- the answers
#
# Every answer is a list of plain values (an Appended's offsets, fetched records, ...); an
# error is a map of `ErrorReply`'s fields, so the two never read as each other.

_ERROR_FIELDS: dict[str, tuple[type, ...]] = {
    "code": (int,), "message": (str,), "leader": (int, type(None)),
    "log_start_offset": (int,), "log_end_offset": (int,), "high_watermark": (int,),
    "expected_sequence": (int, type(None))}


def _pack_error(error: ErrorReply) -> dict[str, int | str | None]:
    return error._asdict()


def _is_error(packed: Any) -> bool:
    return isinstance(packed, dict)


def _read_error(packed: Any) -> ErrorReply:
    if (not isinstance(packed, dict) or set(packed) != set(_ERROR_FIELDS)
            or not all(type(packed[name]) in kinds for name, kinds in _ERROR_FIELDS.items())):
        raise FrameError(f"an error is a map of {', '.join(_ERROR_FIELDS)}")
    return ErrorReply(**packed)


def _error_or_list(body: bytes, what: str) -> ErrorReply | list[Any]:
    """An answer's body: the request's error, or the list of what it answers (FrameError,
    saying `what`, for anything else)."""
    message = _unpack(body)
    if _is_error(message):
        return _read_error(message)
    if not isinstance(message, list):
        raise FrameError(f"{what} or an error")
    return message


def _pack_reply(reply: Reply) -> Any:
    """Records as a list, an error as a map."""
    if isinstance(reply, FetchedRecords):
        return [reply.records, *reply[1:6], [list(pair) for pair in reply.aborted_transactions]]
    return _pack_error(reply)


def _read_reply(packed: Any) -> Reply:
    if _is_error(packed):
        return _read_error(packed)
    if (not isinstance(packed, list) or len(packed) != 7 or not isinstance(packed[0], bytes)
            or not isinstance(packed[6], list)):
        raise FrameError("a partition's reply is records [records, 5 offsets, aborted] or an "
                         "error")
    _ints(packed[1:6], "fetched records")
    for pair in packed[6]:
        if not isinstance(pair, list) or len(pair) != 2:
            raise FrameError("an aborted transaction is [producer id, first offset]")
        _ints(pair, "an aborted transaction")
    next_offset, high_watermark, log_start_offset, log_end_offset, last_stable_offset = \
        packed[1:6]
    return FetchedRecords(packed[0], next_offset, high_watermark, log_start_offset,
                          log_end_offset, last_stable_offset,
                          tuple((p[0], p[1]) for p in packed[6]))


def replica_fetch_answer(reply: ReplicaFetchResponse | ErrorReply) -> bytes:
    """The frame of `replica_fetch`'s reply: each partition's answer, or the fetch's error."""
    if isinstance(reply, ErrorReply):
        return frame(_pack_error(reply))
    return frame([[answer.topic, answer.partition, answer.fetch_offset,
                   _pack_reply(answer.reply)] for answer in reply.partitions])


def read_replica_fetch_answer(body: bytes) -> ReplicaFetchResponse | ErrorReply:
    """`replica_fetch`'s reply again, as the actor call returns it."""
    message = _error_or_list(body, "a follower's fetch answer is a list of partition answers")
    if isinstance(message, ErrorReply):
        return message
    partitions = []
    for entry in message:
        if not isinstance(entry, list) or len(entry) != 4 or not isinstance(entry[0], str):
            raise FrameError("a partition's answer is [topic, partition, fetch offset, reply]")
        _ints(entry[1:3], "a partition's answer")
        partitions.append(ReplicaFetchAnswer(entry[0], entry[1], entry[2],
                                             _read_reply(entry[3])))
    return ReplicaFetchResponse(partitions)


def _per_partition_answer(replies: Sequence[tuple[Any, ...]]) -> bytes:
    """One reply per partition, in order: an error as a map, anything else as its fields."""
    return frame([_pack_error(reply) if isinstance(reply, ErrorReply) else list(reply)
                  for reply in replies])


def _read_per_partition(
    body: bytes, what: str, read_reply: Callable[[Any], _PartitionReply],
) -> list[_PartitionReply | ErrorReply]:
    """`_per_partition_answer` read back: an error map as `ErrorReply`, every other entry by
    `read_reply` (FrameError, saying `what`, when the body is not a list)."""
    message = _unpack(body)
    if not isinstance(message, list):
        raise FrameError(what)
    return [_read_error(packed) if _is_error(packed) else read_reply(packed)
            for packed in message]


def consumer_fetch_answer(replies: list[Reply]) -> bytes:
    """The frame of `fetch`'s reply: one per partition asked, in order."""
    return frame([_pack_reply(reply) for reply in replies])


def read_consumer_fetch_answer(body: bytes) -> list[Reply]:
    return _read_per_partition(
        body, "a consumer's fetch answer is a list of partition replies", _read_reply)


def produce_answer(replies: list[Appended | ErrorReply]) -> bytes:
    """The frame of `produce`'s reply: one per partition, in order."""
    return _per_partition_answer(replies)


def _read_append(packed: Any) -> Appended:
    if not isinstance(packed, list) or len(packed) != 4:
        raise FrameError("a partition's reply is an append or an error")
    _ints(packed, "an append")
    return Appended(*packed)


def read_produce_answer(body: bytes) -> list[Appended | ErrorReply]:
    return _read_per_partition(
        body, "a producer's answer is a list of partition replies", _read_append)


def list_offsets_answer(replies: list[ListedOffset | ErrorReply]) -> bytes:
    """The frame of `list_offsets`'s reply: one per partition, in order."""
    return _per_partition_answer(replies)


def _read_listed_offset(packed: Any) -> ListedOffset:
    if (not isinstance(packed, list) or len(packed) != 3
            or not (packed[0] is None or type(packed[0]) is int)):
        raise FrameError("a partition's offset is [offset or nil, timestamp, leader epoch]")
    _ints(packed[1:], "a partition's offset")
    return ListedOffset(*packed)


def read_list_offsets_answer(body: bytes) -> list[ListedOffset | ErrorReply]:
    return _read_per_partition(
        body, "a ListOffsets answer is a list of partition replies", _read_listed_offset)


def offsets_for_leader_epoch_answer(replies: list[EpochEndOffset | ErrorReply]) -> bytes:
    """The frame of `offsets_for_leader_epoch`'s reply: one per partition, in order."""
    return _per_partition_answer(replies)


def _read_epoch_end_offset(packed: Any) -> EpochEndOffset:
    if not isinstance(packed, list) or len(packed) != 2:
        raise FrameError("an epoch's end is [leader epoch, end offset]")
    _ints(packed, "an epoch's end")
    return EpochEndOffset(*packed)


def read_offsets_for_leader_epoch_answer(body: bytes) -> list[EpochEndOffset | ErrorReply]:
    return _read_per_partition(
        body, "an OffsetsForLeaderEpoch answer is a list of partition replies",
        _read_epoch_end_offset)


def commit_offsets_answer(reply: ErrorReply | None) -> bytes:
    """The frame of `commit_offsets`' (and `commit_transactional_offsets`') reply: nil once
    the offsets are stored, or the error."""
    return frame(None if reply is None else _pack_error(reply))


def read_commit_offsets_answer(body: bytes) -> ErrorReply | None:
    message = _unpack(body)
    return None if message is None else _read_error(message)


def wake_session_answer(_reply: None) -> bytes:
    """The frame that says a wake-up was taken (it has nothing else to say)."""
    return frame(None)


def read_wake_session_answer(body: bytes) -> None:
    if _unpack(body) is not None:
        raise FrameError("a wake-up's answer is nil")


def fetch_offsets_answer(reply: CommittedOffsets | ErrorReply) -> bytes:
    """The frame of `fetch_offsets`'s reply: the group's committed offsets, or its error."""
    if isinstance(reply, ErrorReply):
        return frame(_pack_error(reply))
    return frame([list(entry) for entry in reply.offsets])


def read_fetch_offsets_answer(body: bytes) -> CommittedOffsets | ErrorReply:
    message = _error_or_list(body, "an OffsetFetch answer is a list of committed offsets")
    if isinstance(message, ErrorReply):
        return message
    for entry in message:
        if (not isinstance(entry, list) or len(entry) != 5 or not isinstance(entry[0], str)
                or type(entry[1]) is not int or type(entry[2]) is not int
                or not isinstance(entry[3], str)
                or not (entry[4] is None or type(entry[4]) is int)):
            raise FrameError("a committed offset is [topic, partition, offset, metadata, "
                             "leader epoch or nil]")
    return CommittedOffsets([CommittedOffset(*entry) for entry in message])


ANSWERS: dict[type, Callable[[Any], bytes]] = {
    ReplicaFetchRequest: replica_fetch_answer, ConsumerFetchRequest: consumer_fetch_answer,
    KafkaFetchRequest: consumer_fetch_answer, ProduceRequest: produce_answer,
    KafkaProduceRequest: produce_answer, ListOffsetsRequest: list_offsets_answer,
    FetchOffsetsRequest: fetch_offsets_answer, CommitOffsetsRequest: commit_offsets_answer,
    CommitTransactionalOffsetsRequest: commit_offsets_answer,
    OffsetsForLeaderEpochRequest: offsets_for_leader_epoch_answer,
    WakeSessionRequest: wake_session_answer}
"""How each request's reply is framed, by the request's type."""

REQUESTS: dict[str, Callable[..., bytes]] = {
    PRODUCE: produce_request, KAFKA_PRODUCE: kafka_produce_request,
    CONSUMER_FETCH: consumer_fetch_request, KAFKA_FETCH: kafka_fetch_request,
    REPLICA_FETCH: replica_fetch_request, LIST_OFFSETS: list_offsets_request,
    FETCH_OFFSETS: fetch_offsets_request, COMMIT_OFFSETS: commit_offsets_request,
    COMMIT_TRANSACTIONAL_OFFSETS: commit_transactional_offsets_request,
    OFFSETS_FOR_LEADER_EPOCH: offsets_for_leader_epoch_request,
    WAKE_SESSION: wake_session_request}
"""How a client frames each method's arguments."""

ANSWER_READERS: dict[str, Callable[[bytes], Any]] = {
    PRODUCE: read_produce_answer, KAFKA_PRODUCE: read_produce_answer,
    CONSUMER_FETCH: read_consumer_fetch_answer,
    KAFKA_FETCH: read_consumer_fetch_answer,
    REPLICA_FETCH: read_replica_fetch_answer,
    LIST_OFFSETS: read_list_offsets_answer,
    FETCH_OFFSETS: read_fetch_offsets_answer,
    COMMIT_OFFSETS: read_commit_offsets_answer,
    COMMIT_TRANSACTIONAL_OFFSETS: read_commit_offsets_answer,
    OFFSETS_FOR_LEADER_EPOCH: read_offsets_for_leader_epoch_answer,
    WAKE_SESSION: read_wake_session_answer}
"""How a client reads each method's answer."""
