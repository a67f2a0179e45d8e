"""Record batches between Kafka's format and rafka's.

Both begin with Kafka's 61-byte v2 batch header, the same fields in the same order (see
`rafka.logstore.batch`). They differ in two things: the CRC (Kafka's is CRC-32C, rafka's zlib's
CRC-32) and the records (Kafka frames each with varints, rafka packs them as one msgpack
array). So a Kafka producer's batch is converted once, on its way into the log, keeping every
header field (the producer id, epoch and base sequence among them, so idempotence holds) and
every record's offset delta, timestamp, key, value and headers; a fetch converts back, keeping
the base offset and leader epoch. A record has the same offset whoever wrote it and whoever
reads it. Compression is kept: a batch stored compressed is sent compressed with the same codec.

Kafka's record, inside a batch's (possibly compressed) records section::

    length varint | attributes int8 | timestamp_delta varlong | offset_delta varint |
    key_length varint | key | value_length varint | value |
    header_count varint | (name_length varint | name | value_length varint | value)*

Lengths of -1 stand for null. Varints are zigzag-encoded, as in protocol buffers.
"""

from __future__ import annotations

import struct
import sys
from operator import itemgetter
from typing import Any

from aiokafka.record.default_records import DefaultRecordBatchBuilder
from crc32c import crc32c

from rafka.logstore import compression
from rafka.logstore.batch import (
    COMPRESSION_CODEC_MASK,
    CONTROL_FLAG_MASK,
    CRC_COVERAGE_START,
    DEFAULT_MAX_DECOMPRESSED_SIZE,
    HEADER_SIZE,
    LOG_OVERHEAD,
    MAGIC,
    TIMESTAMP_TYPE_MASK,
    BatchHeader,
    encode_batch,
    iter_batches,
    pack_header,
    read_header,
    unpack_entries,
)
from rafka.logstore.errors import CorruptRecordError, InvalidRecordError, RecordTooLargeError

# The smallest record: length, attributes, timestamp delta, offset delta, key length, value
# length and header count, one byte each (an empty record at offset delta 0).
MIN_RECORD_SIZE = 7
# The CRC (uint32) sits just before the bytes it covers.
_CRC_OFFSET = CRC_COVERAGE_START - 4
_CRC = struct.Struct(">I")
# The builder refuses a record that would take its batch past this size. Here the records are
# a stored batch already, so none may be refused.
_UNBOUNDED = sys.maxsize


class UnsupportedCompressionError(InvalidRecordError):
    """A codec id Kafka does not define (5 to 7): Kafka's UNSUPPORTED_COMPRESSION_TYPE."""


# --------------------------------------------------------------------------------- varints


def _read_varint(buffer: bytes, pos: int) -> tuple[int, int]:
    """A zigzag varint at `pos`: (value, position after it)."""
    shift = 0
    raw = 0
    while True:
        if pos >= len(buffer):
            raise CorruptRecordError("a record ends in the middle of a varint")
        byte = buffer[pos]
        pos += 1
        raw |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return (raw >> 1) ^ -(raw & 1), pos
        shift += 7
        if shift > 63:
            raise CorruptRecordError("a varint is longer than ten bytes")


def _read_bytes(buffer: bytes, pos: int) -> tuple[bytes | None, int]:
    byte = buffer[pos]
    if byte < 0x80:  # a one-byte length, as most are
        length, pos = (byte >> 1) ^ -(byte & 1), pos + 1
    else:
        length, pos = _read_varint(buffer, pos)
    if length < 0:
        return None, pos
    end = pos + length
    if end > len(buffer):
        raise CorruptRecordError("a record's key, value or header runs past its end")
    return buffer[pos:end], end


# ------------------------------------------------------------------------ Kafka -> rafka


def from_kafka(data: bytes | memoryview, max_message_bytes: int, *,
               require_keys: bool = False) -> bytes:
    """Kafka v2 batches, as a Kafka producer sends them, as rafka batches.

    Each batch is bounded by the topic's `max_message_bytes` before anything is decompressed
    or converted: its own size (Kafka's check), its record count (every record takes at least
    `MIN_RECORD_SIZE` bytes) and its decompressed records. A batch that says a million empty
    records is refused from its header, not after a million records were built.

    Every record is read, so the result holds what `rafka.logstore.batch.validate_batch`
    requires of a producer's batch (offset deltas 0..n-1, the largest timestamp in the header,
    keys where `require_keys`): the leader need not decode it again.

    Raises `RecordTooLargeError` (a bound), `CorruptRecordError` (a wrong CRC, a malformed
    record, a header that disagrees with its records), `InvalidRecordError` (a control batch,
    which only the transaction coordinator writes; a null key where keys are required) and
    `UnsupportedCompressionError`. A transactional producer's batches keep their flag.
    """
    view = memoryview(data)
    if not len(view):
        raise CorruptRecordError("a produce request needs at least one batch, got 0 bytes")
    converted = []
    pos = 0
    while pos < len(view):
        if len(view) - pos < HEADER_SIZE:
            raise CorruptRecordError(f"{len(view) - pos} bytes at the end are not a whole batch")
        header = read_header(view, pos)
        end = pos + header.size
        if header.magic != MAGIC:
            raise CorruptRecordError(
                f"record batch magic {header.magic}: rafka takes magic 2 (Kafka 0.11 and later)")
        if header.length < HEADER_SIZE - LOG_OVERHEAD or end > len(view):
            raise CorruptRecordError(f"batch at byte {pos} claims {header.length} bytes")
        _check_bounds(header, max_message_bytes)
        if crc32c(view[pos + CRC_COVERAGE_START:end]) != header.crc:
            raise CorruptRecordError(f"batch at byte {pos} fails its CRC-32C")
        if header.attributes & CONTROL_FLAG_MASK:
            raise InvalidRecordError(
                "a producer's batch may not be a control batch: only the transaction "
                "coordinator writes commit and abort markers")
        codec = header.attributes & COMPRESSION_CODEC_MASK
        records: bytes | memoryview = view[pos + HEADER_SIZE:end]
        if codec:
            if codec not in compression.CODEC_NAMES:
                raise UnsupportedCompressionError(
                    f"compression codec {codec} is not supported: use gzip, snappy, lz4 or zstd")
            records = compression.decompress(codec, records, max_message_bytes)
        entries = _read_records(records, header.record_count)
        _check_records(header, entries, require_keys)
        converted.append(encode_batch(entries, header))
        pos = end
    return b"".join(converted)


def check_bounds(data: bytes | memoryview, max_message_bytes: int) -> None:
    """Refuse (`RecordTooLargeError`) batches whose size or record count cannot fit
    `max_message_bytes`, reading their headers only: a broker's first look at a produce, before
    the records travel anywhere. What is not a whole batch is left to `from_kafka`."""
    view = memoryview(data)
    pos = 0
    while len(view) - pos >= HEADER_SIZE:
        header = read_header(view, pos)
        _check_bounds(header, max_message_bytes)
        if header.length < HEADER_SIZE - LOG_OVERHEAD:
            return
        pos += header.size


def from_idempotent_producer(data: bytes | memoryview) -> bool:
    """Whether `data` holds whole batches, every one with a producer id (an idempotent or
    transactional producer's), read from their headers alone. The leader appends such batches
    in their sequence order whichever order they reach it in, so a broker may work on several
    of them at once."""
    view = memoryview(data)
    pos = 0
    while len(view) - pos >= HEADER_SIZE:
        header = read_header(view, pos)
        if header.producer_id < 0 or header.length < HEADER_SIZE - LOG_OVERHEAD:
            return False
        pos += header.size
    return 0 < pos == len(view)


def _check_records(header: BatchHeader, entries: list[tuple[Any, ...]], require_keys: bool) -> None:
    """What a producer's batch must hold beyond well-formed records; checked over whole columns
    (C loops), as the leader's own validation does."""
    count = len(entries)
    if count < 1 or header.last_offset_delta != count - 1:
        raise CorruptRecordError(
            f"batch says {count} records but last_offset_delta {header.last_offset_delta}: a "
            "producer batch has at least one record and last_offset_delta == record_count - 1")
    if tuple(map(itemgetter(0), entries)) != tuple(range(count)):
        raise CorruptRecordError(f"record offset deltas are not 0..{count - 1}")
    if (not header.attributes & TIMESTAMP_TYPE_MASK
            and header.first_timestamp + max(map(itemgetter(1), entries))
            != header.max_timestamp):
        raise CorruptRecordError(
            f"max_timestamp {header.max_timestamp} is not the largest record timestamp")
    if require_keys and None in map(itemgetter(2), entries):
        raise InvalidRecordError(
            "a compacted topic cannot accept a record without a key: set a key on every record")


def _check_bounds(header: BatchHeader, max_message_bytes: int) -> None:
    """Refuse a batch whose size or record count cannot fit `max_message_bytes`, from its
    header alone."""
    if header.size > max_message_bytes:
        raise RecordTooLargeError(
            f"a batch of {header.size} bytes is larger than the topic's max.message.bytes="
            f"{max_message_bytes}: send smaller batches (batch.size) or raise max.message.bytes")
    if header.record_count * MIN_RECORD_SIZE > max_message_bytes:
        raise RecordTooLargeError(
            f"a batch of {header.record_count} records cannot fit the topic's max.message.bytes="
            f"{max_message_bytes} once decompressed (each record takes at least "
            f"{MIN_RECORD_SIZE} bytes): send fewer records per batch (batch.num.messages, "
            "batch.size) or raise max.message.bytes")


def _read_records(
    buffer: bytes | memoryview, count: int
) -> list[tuple[int, int, bytes | None, bytes | None, tuple[tuple[str, bytes | None], ...]]]:
    # bytes, not a memoryview: indexing and slicing them is faster, for one copy of the section.
    data = bytes(buffer)
    entries: list[
        tuple[int, int, bytes | None, bytes | None, tuple[tuple[str, bytes | None], ...]]] = []
    append = entries.append
    pos = 0
    # Every varint is read inline when it takes one or two bytes (below 8,192 once zigzagged:
    # record lengths, offset and timestamp deltas, keys and values up to 4 KiB), the rest by
    # `_read_varint`; a function call per field would cost a third of the conversion.
    try:
        for _ in range(count):
            byte = data[pos]
            if byte < 0x80:
                length, pos = (byte >> 1) ^ -(byte & 1), pos + 1
            elif data[pos + 1] < 0x80:
                raw = (byte & 0x7F) | (data[pos + 1] << 7)
                length, pos = (raw >> 1) ^ -(raw & 1), pos + 2
            else:
                length, pos = _read_varint(data, pos)
            end = pos + length
            if length < 1 or end > len(data):
                raise CorruptRecordError("a record's length runs past its batch")
            pos += 1  # the attributes, unused in v2
            byte = data[pos]
            if byte < 0x80:
                timestamp_delta, pos = (byte >> 1) ^ -(byte & 1), pos + 1
            elif data[pos + 1] < 0x80:
                raw = (byte & 0x7F) | (data[pos + 1] << 7)
                timestamp_delta, pos = (raw >> 1) ^ -(raw & 1), pos + 2
            else:
                timestamp_delta, pos = _read_varint(data, pos)
            byte = data[pos]
            if byte < 0x80:
                offset_delta, pos = (byte >> 1) ^ -(byte & 1), pos + 1
            elif data[pos + 1] < 0x80:
                raw = (byte & 0x7F) | (data[pos + 1] << 7)
                offset_delta, pos = (raw >> 1) ^ -(raw & 1), pos + 2
            else:
                offset_delta, pos = _read_varint(data, pos)
            if data[pos] == 1:  # a null key, as most are
                key, pos = None, pos + 1
            else:
                key, pos = _read_bytes(data, pos)
            # A value past the record's end is caught below, where its fields must fill it.
            byte = data[pos]
            if 2 <= byte < 0x80 and not byte & 1:  # shorter than 64 bytes
                pos += 1 + (byte >> 1)
                value: bytes | None = data[pos - (byte >> 1):pos]
            elif byte >= 0x80 and data[pos + 1] < 0x80 and not byte & 1:  # shorter than 4 KiB
                size = ((byte & 0x7F) | (data[pos + 1] << 7)) >> 1
                pos += 2 + size
                value = data[pos - size:pos]
            else:
                value, pos = _read_bytes(data, pos)
            if data[pos] == 0:  # no headers, as most records have
                headers: tuple[tuple[str, bytes | None], ...] = ()
                pos += 1
            else:
                headers, pos = _read_headers(data, pos)
            if pos != end:
                raise CorruptRecordError("a record's fields do not fill its length")
            append((offset_delta, timestamp_delta, key, value, headers))
    except IndexError:
        raise CorruptRecordError("a record ends past its batch") from None
    if pos != len(data):
        raise CorruptRecordError("a batch holds more bytes than its records")
    return entries


def _read_headers(data: bytes, pos: int) -> tuple[tuple[tuple[str, bytes | None], ...], int]:
    header_count, pos = _read_varint(data, pos)
    if header_count < 0:
        raise CorruptRecordError("a record has a negative header count")
    headers = []
    for _ in range(header_count):
        name, pos = _read_bytes(data, pos)
        if name is None:
            raise CorruptRecordError("a record header has a null name")
        header_value, pos = _read_bytes(data, pos)
        try:
            headers.append((name.decode(), header_value))
        except UnicodeDecodeError:
            raise CorruptRecordError("a record header name is not UTF-8") from None
    return tuple(headers), pos


# ------------------------------------------------------------------------ rafka -> Kafka


def to_kafka(data: bytes | memoryview) -> bytes:
    """rafka batches (a fetch's records) as Kafka v2 batches, offsets, epochs and every record's
    timestamp unchanged. A partial batch at the end (a fetch cut at its byte limit) is left out,
    as Kafka's consumers would skip it.

    The records are framed by aiokafka's record builder, compiled (Cython): every Kafka client's
    fetch runs through here, and the builder takes a third to a quarter of the time Python's
    bytecode took (bench/wire_codecs.py). Only rafka's own log reaches it, records the leader
    checked when it let them in, so no client's bytes are parsed by code outside rafka.
    """
    out = bytearray()
    no_headers: list[tuple[str, bytes]] = []
    for header, batch in iter_batches(data):
        # The leader bounded every stored batch when it let it in.
        entries = unpack_entries(batch, 0, header, DEFAULT_MAX_DECOMPRESSED_SIZE)
        # The builder counts every timestamp from its first record's. A stored batch's first
        # record may have another (the cleaner keeps a header when it drops records): that
        # batch goes out with its first record's time as its first timestamp, and every record
        # keeps its own.
        first_delta = entries[0][1] if entries else 0
        builder = DefaultRecordBatchBuilder(magic=MAGIC, compression_type=0,
                                            is_transactional=0, producer_id=-1,
                                            producer_epoch=-1, base_sequence=-1,
                                            batch_size=_UNBOUNDED)
        append = builder.append
        for offset_delta, timestamp_delta, key, value, headers in entries:
            append(offset_delta, timestamp_delta - first_delta, key, value,
                   list(headers) if headers else no_headers)
        records = memoryview(builder.build())[HEADER_SIZE:]
        codec = header.attributes & COMPRESSION_CODEC_MASK
        body = compression.compress(codec, records) if codec else records
        start = len(out)
        out += pack_header(header._replace(length=HEADER_SIZE - LOG_OVERHEAD + len(body), crc=0,
                                           first_timestamp=header.first_timestamp + first_delta))
        out += body
        _CRC.pack_into(out, start + _CRC_OFFSET,
                       crc32c(memoryview(out)[start + CRC_COVERAGE_START:]))
    return bytes(out)
