"""Kafka's Produce request read, and its response written, by hand for the versions rafka
serves (3-9). Every batch a Kafka producer sends comes in one, so the broker's event loop
should spend the least it can on each: reading and answering it through kafka-python's schemas
cost a quarter of the broker's CPU per request (`docs/latency.md`). Field for field this reads
and writes what those schemas do (`tests/wire/test_produce.py` checks both against them),
except that a field cut short is refused here, where the schemas read it short.

Versions 3-8 are Kafka's classic encoding (int16-length strings, int32-length arrays and
bytes, request header v1); version 9 is its flexible one (KIP-482: lengths as unsigned
varints plus one, a tagged-field section after each structure, request header v2, response
header v1).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Any, cast

from rafka.common.errors import RafkaError

FLEXIBLE_FROM = 9

_HEADER = struct.Struct(">hhi")  # api_key, api_version, correlation_id
_INT16 = struct.Struct(">h")
_INT32 = struct.Struct(">i")
_ACKS_TIMEOUT = struct.Struct(">hi")
# A partition's answer: index, error_code, base_offset, log_append_time_ms.
_PARTITION_ANSWER = struct.Struct(">ihqq")
_INT64 = struct.Struct(">q")


class ProduceFormatError(RafkaError, ValueError):
    """A Produce request whose bytes are not one (cut short, a negative length, a null
    where the schema allows none)."""


@dataclass(frozen=True, slots=True)
class RequestHeader:
    """What a handler reads of a request's header."""

    request_api_key: int
    request_api_version: int
    correlation_id: int
    client_id: str | None


@dataclass(frozen=True, slots=True)
class PartitionData:
    index: int
    records: bytes | None


@dataclass(frozen=True, slots=True)
class TopicData:
    name: str
    partition_data: list[PartitionData]


@dataclass(frozen=True, slots=True)
class ProduceRequestData:
    """A Produce request, shaped as kafka-python's decoded one is where handlers read it."""

    header: RequestHeader
    transactional_id: str | None
    acks: int
    timeout_ms: int
    topic_data: list[TopicData]


@dataclass(frozen=True, slots=True)
class PartitionAnswer:
    """One partition's part of a Produce response."""

    topic: str
    index: int
    error_code: int
    base_offset: int = -1
    log_append_time_ms: int = -1
    log_start_offset: int = -1
    error_message: str | None = None


class _Reader:
    """A cursor over a request's bytes; every read checks that the bytes are there. What it
    takes is `bytes` also from a `bytearray` (a large frame, read into a buffer of its own:
    `actors/kafka/connection.py`), copied once."""

    __slots__ = ("data", "offset", "view")

    def __init__(self, data: bytes | bytearray, offset: int) -> None:
        self.data = data
        self.offset = offset
        self.view = None if type(data) is bytes else memoryview(data)

    def take(self, size: int) -> bytes:
        end = self.offset + size
        if size < 0 or end > len(self.data):
            raise ProduceFormatError(f"{size} bytes wanted at offset {self.offset} of "
                                     f"{len(self.data)}")
        # No view only over bytes, whose slices are bytes.
        chunk = cast(bytes, self.data[self.offset:end]) if self.view is None \
            else bytes(self.view[self.offset:end])
        self.offset = end
        return chunk

    def unpack(self, layout: struct.Struct) -> tuple[Any, ...]:
        try:
            values = layout.unpack_from(self.data, self.offset)
        except struct.error:
            raise ProduceFormatError(f"the request ends at offset {self.offset}") from None
        self.offset += layout.size
        return values

    def unsigned_varint(self) -> int:
        value = shift = 0
        while True:
            if self.offset >= len(self.data):
                raise ProduceFormatError("a varint runs past the request's end")
            byte = self.data[self.offset]
            self.offset += 1
            value |= (byte & 0x7F) << shift
            if not byte & 0x80:
                return value
            shift += 7
            if shift > 28:
                raise ProduceFormatError("a varint longer than five bytes")

    def length(self, flexible: bool, wide: bool = False) -> int:
        """A string's, bytes' or array's length; -1 for null."""
        if flexible:
            return self.unsigned_varint() - 1
        length: int = self.unpack(_INT32 if wide else _INT16)[0]
        return length

    def string(self, flexible: bool, what: str) -> str:
        string = self.nullable_string(flexible, what, nullable=False)
        assert string is not None  # refused as null above
        return string

    def nullable_string(self, flexible: bool, what: str, nullable: bool = True) -> str | None:
        size = self.length(flexible)
        if size < 0:
            if nullable and size == -1:
                return None
            raise ProduceFormatError(f"{what} is null, which the request does not allow")
        try:
            return self.take(size).decode()
        except UnicodeDecodeError as error:
            raise ProduceFormatError(f"{what} is not UTF-8: {error}") from None

    def array_length(self, flexible: bool, what: str) -> int:
        count = self.length(flexible, wide=True)
        if count < 0:
            raise ProduceFormatError(f"{what} is null, which the request does not allow")
        # Each element takes at least one byte: a count beyond what is left is a lie.
        if count > len(self.data) - self.offset:
            raise ProduceFormatError(f"{what} claims {count} elements in "
                                     f"{len(self.data) - self.offset} bytes")
        return count

    def skip_tagged_fields(self) -> None:
        for _ in range(self.unsigned_varint()):
            self.unsigned_varint()  # the tag
            self.take(self.unsigned_varint())


def read_produce_request(frame: bytes | bytearray, version: int) -> ProduceRequestData:
    """A Produce request of `version` (3-9) from one frame without its length prefix."""
    flexible = version >= FLEXIBLE_FROM
    reader = _Reader(frame, 0)
    api_key, api_version, correlation_id = reader.unpack(_HEADER)
    client_id = reader.nullable_string(False, "client_id")  # int16 length in every header
    if flexible:
        reader.skip_tagged_fields()
    header = RequestHeader(api_key, api_version, correlation_id, client_id)
    transactional_id = reader.nullable_string(flexible, "transactional_id")
    acks, timeout_ms = reader.unpack(_ACKS_TIMEOUT)
    topics = []
    for _ in range(reader.array_length(flexible, "topic_data")):
        name = reader.string(flexible, "topic_data.name")
        partitions = []
        for _ in range(reader.array_length(flexible, "topic_data.partition_data")):
            (index,) = reader.unpack(_INT32)
            size = reader.length(flexible, wide=True)
            if size < -1:
                raise ProduceFormatError(f"records of length {size}")
            records = None if size == -1 else reader.take(size)
            if flexible:
                reader.skip_tagged_fields()
            partitions.append(PartitionData(index, records))
        if flexible:
            reader.skip_tagged_fields()
        topics.append(TopicData(name, partitions))
    if flexible:
        reader.skip_tagged_fields()
    return ProduceRequestData(header, transactional_id, acks, timeout_ms, topics)


def unsigned_varint(value: int) -> bytes:
    """`value` (>= 0) as Kafka's unsigned varint: seven bits a byte, low bits first."""
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _string(value: str | None, flexible: bool) -> bytes:
    if value is None:
        return b"\x00" if flexible else b"\xff\xff"
    encoded = value.encode()
    prefix = unsigned_varint(len(encoded) + 1) if flexible else _INT16.pack(len(encoded))
    return prefix + encoded


def _count(count: int, flexible: bool) -> bytes:
    return unsigned_varint(count + 1) if flexible else _INT32.pack(count)


def produce_response(version: int, correlation_id: int, answers: list[PartitionAnswer],
                     throttle_time_ms: int = 0) -> bytes:
    """The framed Produce response of `version` (3-9): the partitions in the order given,
    grouped by topic in the order each topic first appears."""
    flexible = version >= FLEXIBLE_FROM
    tag_section = b"\x00" if flexible else b""
    by_topic: dict[str, list[PartitionAnswer]] = {}
    for answer in answers:
        by_topic.setdefault(answer.topic, []).append(answer)
    parts = [_INT32.pack(correlation_id), tag_section, _count(len(by_topic), flexible)]
    for topic, partitions in by_topic.items():
        parts.append(_string(topic, flexible))
        parts.append(_count(len(partitions), flexible))
        for answer in partitions:
            parts.append(_PARTITION_ANSWER.pack(answer.index, answer.error_code,
                                                answer.base_offset, answer.log_append_time_ms))
            if version >= 5:
                parts.append(_INT64.pack(answer.log_start_offset))
            if version >= 8:
                parts.append(_count(0, flexible))  # record_errors: rafka refuses whole batches
                parts.append(_string(answer.error_message, flexible))
            parts.append(tag_section)
        parts.append(tag_section)
    parts.append(_INT32.pack(throttle_time_ms))
    parts.append(tag_section)
    body = b"".join(parts)
    return _INT32.pack(len(body)) + body


def with_throttle_time(response: bytes, version: int, throttle_time_ms: int) -> bytes:
    """A framed Produce response of `version` as `produce_response` wrote it, with its
    throttle_time_ms (the last field, before the flexible versions' closing tag section) set."""
    end = len(response) - (1 if version >= FLEXIBLE_FROM else 0)
    return response[:end - 4] + _INT32.pack(throttle_time_ms) + response[end:]
