"""The requests to a broker's control endpoint as bytes, without I/O: msgpack frames with a
length in front, as the data port's (`rafka.actors.dataport.frames`). The controller sends
LeaderAndIsr, UpdateMetadata, StopReplica and topic config changes; the broker's own replica
hosts send their leaders' ISR changes (`update_partition_states`), which the broker writes to
ZooKeeper with its session (as a ZooKeeper-era Kafka broker's `Partition` wrote its own), and
their questions to transaction coordinators (`verify_transaction`, KIP-890), which a broker
also puts to another (the coordinator's).

A connection opens with a hello (the protocol's version and the cluster's control token);
then each request is `[correlation id, method, controller epoch, arguments]` and each answer
`[correlation id, kind, payload]`, so that requests can follow each other on one connection
without waiting and answers find their requests (`PendingRequests`). The broker applies a
connection's requests in the order they came, as Ray ran one caller's calls to an actor,
except those in `CONCURRENT`, applied as they come.

Everything read is checked, since anything that can reach the port can write to it; a frame
that is not what this protocol sends raises `ControlFrameError`, and the connection is closed.

`ReconnectBackoff` is how long a connection waits before it tries again, Kafka's
`reconnect.backoff.ms` doubling up to `reconnect.backoff.max.ms`.
"""

from __future__ import annotations

import hashlib
import hmac
import random
import struct
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, NamedTuple, TypeVar

import msgpack

from rafka.actors.messages import (
    ErrorReply,
    IsrChange,
    IsrWritten,
    LeaderAndIsrRequest,
    PartitionErrors,
    PartitionMetadata,
    UpdateMetadataRequest,
)
from rafka.common.errors import ErrorCode, RafkaError
from rafka.common.topic_partition import TopicPartition
from rafka.coordination.models import BrokerInfo

LENGTH = struct.Struct(">I")
VERSION = 1
# A full UpdateMetadata lists every partition (about 60 bytes each).
MAX_FRAME_BYTES = 256 * 1024 * 1024

LEADER_AND_ISR = "leader_and_isr"
UPDATE_METADATA = "update_metadata"
STOP_REPLICAS = "stop_replicas"
UPDATE_TOPIC_CONFIG = "update_topic_config"
UPDATE_PARTITION_STATES = "update_partition_states"
VERIFY_TRANSACTION = "verify_transaction"
METHODS = (LEADER_AND_ISR, UPDATE_METADATA, STOP_REPLICAS, UPDATE_TOPIC_CONFIG,
           UPDATE_PARTITION_STATES, VERIFY_TRANSACTION)
# The requests whose handler takes no epoch before its arguments: UpdateMetadata carries its
# own, each ISR change the controller epoch its leader knows (a host is no controller), and a
# transaction's verification has nothing to do with the controller.
WITHOUT_EPOCH = (UPDATE_METADATA, UPDATE_PARTITION_STATES, VERIFY_TRANSACTION)
# The requests applied as they come, beside the connection's others rather than after them:
# a verification may wait on another broker, and a host's ISR changes must not wait on it.
CONCURRENT = (VERIFY_TRANSACTION,)

# What a broker answers: nothing (done), a refusal, the partitions it did not apply, or (to
# ISR changes) each change's outcome in order.
IsrWrites = list[IsrWritten | ErrorReply]
ControlAnswer = ErrorReply | PartitionErrors | IsrWrites | None
_NONE, _ERROR, _PARTITION_ERRORS, _ISR_WRITES = 0, 1, 2, 3

T = TypeVar("T")


class ControlFrameError(RafkaError, ValueError):
    """A frame that is not what the control protocol sends: the connection is closed."""


def control_token(cluster_secret: str | None) -> bytes:
    """What a connection to a control endpoint opens with: derived from the cluster's
    ZooKeeper credentials, which every broker holds and the registration (world-readable)
    must not carry. A cluster without credentials leaves its znodes open to anyone, and its
    control endpoints to anyone who can reach them (TLS, when on, still asks for the
    cluster's certificate)."""
    if cluster_secret is None:
        return b""
    return hmac.new(cluster_secret.encode(), b"rafka control endpoint", hashlib.sha256).digest()


def frame(payload: object) -> bytes:
    body = msgpack.packb(payload, use_bin_type=True)
    return LENGTH.pack(len(body)) + body


def frame_length(header: bytes, limit: int = MAX_FRAME_BYTES) -> int:
    """The length a frame's 4-byte header announces, refused beyond `limit`."""
    (length,) = LENGTH.unpack(header)
    if length > limit:
        raise ControlFrameError(f"a frame of {length} bytes, more than the {limit} allowed")
    return length


def _unpack(body: bytes) -> Any:
    try:
        return msgpack.unpackb(body, raw=False, strict_map_key=True, use_list=True)
    except (ValueError, msgpack.UnpackException) as error:
        raise ControlFrameError(f"not a msgpack frame: {error}") from error


def _check(condition: bool, what: str) -> None:
    if not condition:
        raise ControlFrameError(what)


def _is_int(value: Any) -> bool:
    return type(value) is int


def _int_list(value: Any) -> bool:
    return isinstance(value, list) and all(map(_is_int, value))


def _str_map(value: Any) -> bool:
    return isinstance(value, dict) and all(isinstance(key, str) for key in value)


# ----------------------------------------------------------------------------- the hello

def hello(token: bytes) -> bytes:
    return frame([VERSION, token])


def read_hello(body: bytes) -> bytes:
    """The token a connection opened with."""
    message = _unpack(body)
    _check(isinstance(message, list) and len(message) == 2 and message[0] == VERSION
           and isinstance(message[1], bytes), f"the first frame must be [{VERSION}, token]")
    return bytes(message[1])


# -------------------------------------------------------------------------- the requests

class ControlRequest(NamedTuple):
    """A request as the broker reads it: its handler's arguments after the epoch."""

    correlation_id: int
    method: str
    controller_epoch: int
    arguments: tuple[Any, ...]


def _pack_leader_and_isr(request: LeaderAndIsrRequest) -> list[Any]:
    return [request.topic, request.partition, request.leader, request.leader_epoch,
            list(request.isr), list(request.replicas), request.controller_epoch,
            request.zk_version, request.leader_host, dict(request.config)]


def _read_leader_and_isr(packed: Any) -> LeaderAndIsrRequest:
    _check(isinstance(packed, list) and len(packed) == 10 and isinstance(packed[0], str)
           and all(map(_is_int, packed[1:4])) and _int_list(packed[4])
           and _int_list(packed[5]) and _is_int(packed[6]) and _is_int(packed[7])
           and (packed[8] is None or isinstance(packed[8], str)) and _str_map(packed[9]),
           "a LeaderAndIsr partition is [topic, partition, leader, leader epoch, isr, "
           "replicas, controller epoch, zk version, leader host, config]")
    return LeaderAndIsrRequest(packed[0], packed[1], packed[2], packed[3], tuple(packed[4]),
                               tuple(packed[5]), packed[6], packed[7], packed[8], packed[9])


def _pack_update_metadata(request: UpdateMetadataRequest) -> list[Any]:
    return [request.controller_id, request.controller_epoch,
            [[info.to_json(), info.epoch] for info in request.brokers.values()],
            [[tp.topic, tp.partition, state.leader, state.leader_epoch, list(state.isr),
              list(state.replicas), state.zk_version]
             for tp, state in request.partitions.items()],
            list(request.deleted_topics), request.full, dict(request.topic_ids)]


def _read_update_metadata(packed: Any) -> UpdateMetadataRequest:
    # A controller of an earlier rafka sends no topic ids (six fields).
    _check(isinstance(packed, list) and len(packed) in (6, 7) and _is_int(packed[0])
           and _is_int(packed[1]) and isinstance(packed[2], list)
           and isinstance(packed[3], list) and isinstance(packed[4], list)
           and all(isinstance(topic, str) for topic in packed[4])
           and isinstance(packed[5], bool) and (len(packed) == 6 or _str_map(packed[6])),
           "an UpdateMetadata is [controller, epoch, brokers, partitions, deleted, full, "
           "topic ids]")
    brokers: dict[int, BrokerInfo] = {}
    for entry in packed[2]:
        _check(isinstance(entry, list) and len(entry) == 2 and _str_map(entry[0])
               and (entry[1] is None or _is_int(entry[1])), "a broker is [registration, epoch]")
        try:
            info = BrokerInfo.from_json(entry[0], epoch=entry[1])
        except (KeyError, TypeError, ValueError, AttributeError) as error:
            raise ControlFrameError(f"a broker's registration: {error!r}") from error
        brokers[info.node_id] = info
    partitions: dict[TopicPartition, PartitionMetadata] = {}
    for entry in packed[3]:
        _check(isinstance(entry, list) and len(entry) == 7 and isinstance(entry[0], str)
               and all(map(_is_int, (entry[1], entry[2], entry[3], entry[6])))
               and _int_list(entry[4]) and _int_list(entry[5]),
               "a partition is [topic, partition, leader, leader epoch, isr, replicas, "
               "zk version]")
        partitions[TopicPartition(entry[0], entry[1])] = PartitionMetadata(
            entry[2], entry[3], tuple(entry[4]), tuple(entry[5]), entry[6])
    return UpdateMetadataRequest(packed[0], packed[1], brokers, partitions, tuple(packed[4]),
                                 packed[5], dict(packed[6]) if len(packed) == 7 else {})


def _pack_isr_change(change: IsrChange) -> list[Any]:
    return [change.topic, change.partition, change.leader, change.leader_epoch,
            list(change.isr), change.controller_epoch, change.zk_version]


def _read_isr_change(packed: Any) -> IsrChange:
    _check(isinstance(packed, list) and len(packed) == 7 and isinstance(packed[0], str)
           and all(map(_is_int, packed[1:4])) and _int_list(packed[4])
           and _is_int(packed[5]) and _is_int(packed[6]),
           "an ISR change is [topic, partition, leader, leader epoch, isr, controller epoch, "
           "zk version]")
    return IsrChange(packed[0], packed[1], packed[2], packed[3], tuple(packed[4]), packed[5],
                     packed[6])


def encode_request(correlation_id: int, method: str, controller_epoch: int,
                   *arguments: Any) -> bytes:
    """One request, framed: `arguments` are its handler's after the epoch
    (`Broker.leader_and_isr`, `update_metadata`, `stop_replicas`, `update_topic_config`,
    `update_partition_states`; the last two ignore `controller_epoch`)."""
    if method == LEADER_AND_ISR:
        (partitions,) = arguments
        body: list[Any] = [[_pack_leader_and_isr(request) for request in partitions]]
    elif method == UPDATE_METADATA:
        (request,) = arguments
        body = [_pack_update_metadata(request)]
    elif method == STOP_REPLICAS:
        partitions, delete = arguments
        body = [[[topic, partition] for topic, partition in partitions], bool(delete)]
    elif method == UPDATE_TOPIC_CONFIG:
        topic, config = arguments
        body = [topic, dict(config)]
    elif method == UPDATE_PARTITION_STATES:
        (changes,) = arguments
        body = [[_pack_isr_change(change) for change in changes]]
    elif method == VERIFY_TRANSACTION:
        transactional_id, producer_id, producer_epoch, partitions, forwarded = arguments
        body = [transactional_id, producer_id, producer_epoch,
                [[topic, partition] for topic, partition in partitions], bool(forwarded)]
    else:
        raise ValueError(f"no control request {method!r}")
    return frame([correlation_id, method, controller_epoch, body])


def decode_request(body: bytes) -> ControlRequest:
    message = _unpack(body)
    _check(isinstance(message, list) and len(message) == 4 and _is_int(message[0])
           and message[1] in METHODS and _is_int(message[2]) and isinstance(message[3], list),
           "a request is [correlation id, method, controller epoch, arguments]")
    correlation_id, method, epoch, fields = message
    if method == LEADER_AND_ISR:
        _check(len(fields) == 1 and isinstance(fields[0], list),
               "LeaderAndIsr's arguments are [partitions]")
        arguments: tuple[Any, ...] = ([_read_leader_and_isr(entry) for entry in fields[0]],)
    elif method == UPDATE_METADATA:
        _check(len(fields) == 1, "UpdateMetadata's arguments are [request]")
        arguments = (_read_update_metadata(fields[0]),)
    elif method == STOP_REPLICAS:
        _check(len(fields) == 2 and isinstance(fields[0], list) and isinstance(fields[1], bool)
               and all(isinstance(entry, list) and len(entry) == 2
                       and isinstance(entry[0], str) and _is_int(entry[1])
                       for entry in fields[0]),
               "StopReplica's arguments are [[[topic, partition], ...], delete]")
        arguments = ([(topic, partition) for topic, partition in fields[0]], fields[1])
    elif method == UPDATE_PARTITION_STATES:
        _check(len(fields) == 1 and isinstance(fields[0], list),
               "ISR changes' arguments are [changes]")
        arguments = ([_read_isr_change(entry) for entry in fields[0]],)
    elif method == VERIFY_TRANSACTION:
        _check(len(fields) == 5 and isinstance(fields[0], str) and _is_int(fields[1])
               and _is_int(fields[2]) and isinstance(fields[3], list)
               and all(isinstance(entry, list) and len(entry) == 2
                       and isinstance(entry[0], str) and _is_int(entry[1])
                       for entry in fields[3]) and isinstance(fields[4], bool),
               "a verification's arguments are [transactional id, producer id, producer "
               "epoch, [[topic, partition], ...], forwarded]")
        arguments = (fields[0], fields[1], fields[2],
                     [(topic, partition) for topic, partition in fields[3]], fields[4])
    else:
        _check(len(fields) == 2 and isinstance(fields[0], str) and _str_map(fields[1]),
               "a topic config change's arguments are [topic, config]")
        arguments = (fields[0], fields[1])
    return ControlRequest(correlation_id, method, epoch, arguments)


# --------------------------------------------------------------------------- the answers

def _pack_error(error: ErrorReply) -> list[Any]:
    return list(error)


def _read_error(packed: Any) -> ErrorReply:
    _check(isinstance(packed, list) and len(packed) == 7 and _is_int(packed[0])
           and isinstance(packed[1], str) and (packed[2] is None or _is_int(packed[2]))
           and all(map(_is_int, packed[3:6])) and (packed[6] is None or _is_int(packed[6])),
           "an error is ErrorReply's seven fields")
    return ErrorReply(*packed)


def encode_answer(correlation_id: int, answer: ControlAnswer) -> bytes:
    if answer is None:
        return frame([correlation_id, _NONE, None])
    if isinstance(answer, ErrorReply):
        return frame([correlation_id, _ERROR, _pack_error(answer)])
    if isinstance(answer, list):
        return frame([correlation_id, _ISR_WRITES,
                      [[_ERROR, _pack_error(reply)] if isinstance(reply, ErrorReply)
                       else [_NONE, reply.zk_version] for reply in answer]])
    return frame([correlation_id, _PARTITION_ERRORS,
                  [[tp.topic, tp.partition, _pack_error(error)]
                   for tp, error in answer.errors.items()]])


def decode_answer(body: bytes) -> tuple[int, ControlAnswer]:
    """The correlation id an answer is for, and the answer."""
    message = _unpack(body)
    _check(isinstance(message, list) and len(message) == 3 and _is_int(message[0])
           and message[1] in (_NONE, _ERROR, _PARTITION_ERRORS, _ISR_WRITES),
           "an answer is [correlation id, kind, payload]")
    correlation_id, kind, payload = message
    if kind == _NONE:
        return correlation_id, None
    if kind == _ERROR:
        return correlation_id, _read_error(payload)
    if kind == _ISR_WRITES:
        return correlation_id, _read_isr_writes(payload)
    _check(isinstance(payload, list) and all(
        isinstance(entry, list) and len(entry) == 3 and isinstance(entry[0], str)
        and _is_int(entry[1]) for entry in payload),
        "partition errors are [[topic, partition, error], ...]")
    return correlation_id, PartitionErrors(
        {TopicPartition(topic, partition): _read_error(error)
         for topic, partition, error in payload})


def verification_error(answer: ControlAnswer, topic: str, partition: int) -> ErrorCode:
    """What a transaction's verification answered for one partition: NONE (the answer
    names no error for it), the whole request's error, or the partition's."""
    if isinstance(answer, ErrorReply):
        return ErrorCode(answer.code)
    if isinstance(answer, PartitionErrors):
        refused = answer.errors.get(TopicPartition(topic, partition))
        return ErrorCode.NONE if refused is None else ErrorCode(refused.code)
    return ErrorCode.NONE


def _read_isr_writes(payload: Any) -> IsrWrites:
    _check(isinstance(payload, list) and all(
        isinstance(entry, list) and len(entry) == 2 and entry[0] in (_NONE, _ERROR)
        for entry in payload), "ISR writes are [[kind, written or error], ...]")
    replies: IsrWrites = []
    for kind, outcome in payload:
        if kind == _ERROR:
            replies.append(_read_error(outcome))
        else:
            _check(_is_int(outcome), "a written ISR change is its znode version")
            replies.append(IsrWritten(outcome))
    return replies


# ------------------------------------------------------ matching, and waiting to reconnect

class PendingRequests(Generic[T]):
    """The requests sent on one connection and not answered yet, by correlation id (what
    each waiter is, `T`, is the caller's business)."""

    def __init__(self) -> None:
        self._next = 0
        self._waiting: dict[int, T] = {}

    def add(self, waiter: T) -> int:
        """A correlation id for a new request, whose answer goes to `waiter`."""
        self._next += 1
        self._waiting[self._next] = waiter
        return self._next

    def answered(self, correlation_id: int) -> T | None:
        """Whom the answer with this id is for; None for one nobody waits for (it came after
        its request was given up, or was never asked)."""
        return self._waiting.pop(correlation_id, None)

    def forget(self, correlation_id: int) -> None:
        self._waiting.pop(correlation_id, None)

    def take_all(self) -> list[T]:
        """Every waiter, forgotten here: the connection went."""
        waiting, self._waiting = list(self._waiting.values()), {}
        return waiting

    def __len__(self) -> int:
        return len(self._waiting)


@dataclass
class ReconnectBackoff:
    """How long to wait before the next attempt to connect after `failures` in a row:
    `initial_s` doubling up to `max_s`, each with up to `jitter` of itself added or taken away
    (so that a controller's connections to brokers that went together do not come back in
    step), as Kafka's `reconnect.backoff.ms` and `reconnect.backoff.max.ms`."""

    initial_s: float = 0.05
    max_s: float = 1.0
    jitter: float = 0.2
    uniform: Callable[[float, float], float] = random.uniform

    def delay_s(self, failures: int) -> float:
        if failures <= 0:
            return 0.0
        base = min(self.max_s, self.initial_s * 2 ** min(failures - 1, 30))
        return max(0.0, base * (1 + self.uniform(-self.jitter, self.jitter)))
