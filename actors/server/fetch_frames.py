"""A follower's fetch as bytes on a TCP connection: msgpack frames, each with its length in front.

The steady replication path, a follower host's fetch and the leader host's answer, runs over a
connection the follower keeps to each leader host (`rafka.actors.server.replica_fetcher`,
`rafka.actors.server.replication_listener`) instead of a Ray actor call each way: a Ray call
costs a hop about 2-7 ms on this project's machines, a loopback write well under one (see
docs/latency.md). The request and the answer are the same as the actor call's,
`ReplicaHost.replica_fetch`'s arguments and its reply; this module turns them into bytes and
back, and checks every field of what it reads, since anything that can reach the port can write
to it. The connection's first frame must carry the leader host's token, which only a caller of
the host actor learns (`ReplicaHost.replication_address`), so the port admits exactly who Ray
would.

No I/O here: the listener and the fetcher read and write the frames.
"""

from __future__ import annotations

import struct
from typing import Any, NamedTuple

import msgpack

from rafka.actors.messages import FetchedRecords, ReplicaFetchAnswer, ReplicaFetchPartition

LENGTH = struct.Struct(">I")
# A fetch request lists partitions (about 40 bytes each); an answer carries at most
# replica.fetch.response.max.bytes of records plus one batch per partition beyond it.
MAX_REQUEST_BYTES = 16 * 1024 * 1024
VERSION = 1


class FrameError(ValueError):
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


def _unpack(body: bytes) -> Any:
    try:
        return msgpack.unpackb(body, raw=False, strict_map_key=True, use_list=True)
    except (ValueError, msgpack.UnpackException) as error:
        raise FrameError(f"not a msgpack frame: {error}") from error


def _ints(values: list[Any], what: str) -> None:
    if not all(type(value) is int for value in values):
        raise FrameError(f"{what}: every field must be an integer")


# ------------------------------------------------------------------------------ the hello

def hello(token: bytes) -> bytes:
    """The connection's first frame: the protocol's version and the leader host's token."""
    return frame([VERSION, token])


def read_hello(body: bytes) -> bytes:
    """The token a connection opened with (FrameError for anything else)."""
    message = _unpack(body)
    if (not isinstance(message, list) or len(message) != 2 or message[0] != VERSION
            or not isinstance(message[1], bytes)):
        raise FrameError("the first frame must be [version 1, token]")
    return message[1]


# ---------------------------------------------------------------------------- the request

class FetchRequest(NamedTuple):
    """`ReplicaHost.replica_fetch`'s arguments, in its order, as read off a frame."""

    follower_id: int
    session_id: int
    full: bool
    partitions: list[ReplicaFetchPartition]
    removed: list[tuple[str, int]]
    max_wait_ms: int
    partition_max_bytes: int
    max_bytes: int


def fetch_request(follower_id: int, session_id: int, full: bool,
                  partitions: list[ReplicaFetchPartition], removed: list[tuple[str, int]],
                  max_wait_ms: int, partition_max_bytes: int, max_bytes: int) -> bytes:
    """The frame of one fetch."""
    return frame([follower_id, session_id, full, [list(p) for p in partitions],
                  [list(tp) for tp in removed], max_wait_ms, partition_max_bytes, max_bytes])


def read_fetch_request(body: bytes) -> FetchRequest:
    message = _unpack(body)
    if not isinstance(message, list) or len(message) != 8:
        raise FrameError("a fetch request has 8 fields")
    (follower_id, session_id, full, partitions, removed, max_wait_ms, partition_max_bytes,
     max_bytes) = message
    _ints([follower_id, session_id, max_wait_ms, partition_max_bytes, max_bytes],
          "a fetch request")
    if not isinstance(full, bool) or not isinstance(partitions, list) \
            or not isinstance(removed, list):
        raise FrameError("a fetch request's `full` is a boolean, its partitions lists")
    listed = []
    for entry in partitions:
        if (not isinstance(entry, list) or len(entry) != 5 or not isinstance(entry[0], str)):
            raise FrameError("a listed partition is [topic, partition, offset, leader epoch, "
                             "high watermark]")
        _ints(entry[1:], "a listed partition")
        listed.append(ReplicaFetchPartition(*entry))
    gone = []
    for entry in removed:
        if (not isinstance(entry, list) or len(entry) != 2 or not isinstance(entry[0], str)
                or type(entry[1]) is not int):
            raise FrameError("a removed partition is [topic, partition]")
        gone.append((entry[0], entry[1]))
    return FetchRequest(follower_id, session_id, full, listed, gone, max_wait_ms,
                        partition_max_bytes, max_bytes)


# ----------------------------------------------------------------------------- the answer

def fetch_answer(reply: dict[str, Any]) -> bytes:
    """The frame of `replica_fetch`'s reply: records as a list, an error as a map."""
    answers = []
    for answer in reply.get("partitions", ()):
        fetched = answer.reply
        if isinstance(fetched, FetchedRecords):
            fetched = [fetched.records, *fetched[1:6],
                       [list(pair) for pair in fetched.aborted_transactions]]
        answers.append([answer.topic, answer.partition, answer.fetch_offset, fetched])
    error = {key: value for key, value in reply.items() if key != "partitions"}
    return frame([error, answers])


def read_fetch_answer(body: bytes) -> dict[str, Any]:
    """`replica_fetch`'s reply again, as the actor call returns it."""
    message = _unpack(body)
    if (not isinstance(message, list) or len(message) != 2 or not isinstance(message[0], dict)
            or not isinstance(message[1], list) or type(message[0].get("error")) is not int):
        raise FrameError("a fetch answer is [{error, ...}, [partition answers]]")
    reply = dict(message[0])
    partitions = []
    for entry in message[1]:
        if (not isinstance(entry, list) or len(entry) != 4 or not isinstance(entry[0], str)):
            raise FrameError("a partition's answer is [topic, partition, fetch offset, reply]")
        _ints(entry[1:3], "a partition's answer")
        fetched = entry[3]
        if isinstance(fetched, list):
            if len(fetched) != 7 or not isinstance(fetched[0], bytes) \
                    or not isinstance(fetched[6], list):
                raise FrameError("fetched records are [records, 5 offsets, aborted]")
            _ints(fetched[1:6], "fetched records")
            for pair in fetched[6]:
                if not isinstance(pair, list) or len(pair) != 2:
                    raise FrameError("an aborted transaction is [producer id, first offset]")
                _ints(pair, "an aborted transaction")
            aborted = tuple(tuple(pair) for pair in fetched[6])
            fetched = FetchedRecords(fetched[0], *fetched[1:6], aborted)
        elif not isinstance(fetched, dict) or type(fetched.get("error")) is not int:
            raise FrameError("a partition's reply is records or an error")
        partitions.append(ReplicaFetchAnswer(entry[0], entry[1], entry[2], fetched))
    reply["partitions"] = partitions
    return reply
