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
# Attributes bit 4: the batch belongs to a transaction (rafka has none).
TRANSACTIONAL_FLAG_MASK = 0x10
# The CRC (uint32) sits just before the bytes it covers.
_CRC_OFFSET = CRC_COVERAGE_START - 4
_CRC = struct.Struct(">I")


class UnsupportedCompressionError(InvalidRecordError):
    """A codec rafka cannot read (snappy): Kafka's UNSUPPORTED_COMPRESSION_TYPE."""


# --------------------------------------------------------------------------------- varints


def _read_varint(buffer: bytes | memoryview, pos: int) -> tuple[int, int]:
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


def _write_varint(value: int, out: bytearray) -> None:
    raw = (value << 1) ^ (value >> 63)
    while raw > 0x7F:
        out.append((raw & 0x7F) | 0x80)
        raw >>= 7
    out.append(raw)


def _read_bytes(buffer: bytes | memoryview, pos: int) -> tuple[bytes | None, int]:
    length, pos = _read_varint(buffer, pos)
    if length < 0:
        return None, pos
    end = pos + length
    if end > len(buffer):
        raise CorruptRecordError("a record's key, value or header runs past its end")
    return bytes(buffer[pos:end]), end


def _write_bytes(value: bytes | None, out: bytearray) -> None:
    if value is None:
        out.append(1)  # zigzag -1
        return
    _write_varint(len(value), out)
    out += value


# ------------------------------------------------------------------------ Kafka -> rafka


def from_kafka(data: bytes | memoryview, max_message_bytes: int) -> bytes:
    """Kafka v2 batches, as a Kafka producer sends them, as rafka batches.

    Each batch is bounded by the topic's `max_message_bytes` before anything is decompressed
    or converted: its own size (Kafka's check), its record count (every record takes at least
    `MIN_RECORD_SIZE` bytes) and its decompressed records. A batch that says a million empty
    records is refused from its header, not after a million records were built.

    Raises `RecordTooLargeError` (a bound), `CorruptRecordError` (a wrong CRC, a malformed
    record), `InvalidRecordError` (a transactional or control batch, which producers of rafka
    cannot send) and `UnsupportedCompressionError`. The leader then validates the result as it
    does any batch.
    """
    view = memoryview(data)
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
        if header.attributes & (TRANSACTIONAL_FLAG_MASK | CONTROL_FLAG_MASK):
            raise InvalidRecordError("transactional and control batches are not supported")
        codec = header.attributes & COMPRESSION_CODEC_MASK
        records: bytes | memoryview = view[pos + HEADER_SIZE:end]
        if codec:
            if codec not in compression.CODEC_NAMES:
                raise UnsupportedCompressionError(
                    f"compression codec {codec} is not supported: use gzip, lz4 or zstd")
            records = compression.decompress(codec, records, max_message_bytes)
        entries = _read_records(records, header.record_count)
        converted.append(encode_batch(
            entries,
            base_offset=header.base_offset,
            leader_epoch=header.leader_epoch,
            attributes=header.attributes,
            last_offset_delta=header.last_offset_delta,
            first_timestamp=header.first_timestamp,
            max_timestamp=header.max_timestamp,
            producer_id=header.producer_id,
            producer_epoch=header.producer_epoch,
            base_sequence=header.base_sequence,
            codec=codec,
        ))
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
    entries = []
    pos = 0
    for _ in range(count):
        length, pos = _read_varint(buffer, pos)
        end = pos + length
        if length < 1 or end > len(buffer):
            raise CorruptRecordError("a record's length runs past its batch")
        pos += 1  # attributes: unused in v2
        timestamp_delta, pos = _read_varint(buffer, pos)
        offset_delta, pos = _read_varint(buffer, pos)
        key, pos = _read_bytes(buffer, pos)
        value, pos = _read_bytes(buffer, pos)
        header_count, pos = _read_varint(buffer, pos)
        if header_count < 0:
            raise CorruptRecordError("a record has a negative header count")
        headers = []
        for _ in range(header_count):
            name, pos = _read_bytes(buffer, pos)
            if name is None:
                raise CorruptRecordError("a record header has a null name")
            header_value, pos = _read_bytes(buffer, pos)
            try:
                headers.append((name.decode(), header_value))
            except UnicodeDecodeError:
                raise CorruptRecordError("a record header name is not UTF-8") from None
        if pos != end:
            raise CorruptRecordError("a record's fields do not fill its length")
        entries.append((offset_delta, timestamp_delta, key, value, tuple(headers)))
    if pos != len(buffer):
        raise CorruptRecordError("a batch holds more bytes than its records")
    return entries


# ------------------------------------------------------------------------ rafka -> Kafka


def to_kafka(data: bytes | memoryview) -> bytes:
    """rafka batches (a fetch's records) as Kafka v2 batches, offsets and epochs unchanged.
    A partial batch at the end (a fetch cut at its byte limit) is left out, as Kafka's
    consumers would skip it."""
    out = bytearray()
    for header, batch in iter_batches(data):
        # The leader bounded every stored batch when it let it in.
        entries = unpack_entries(batch, 0, header, DEFAULT_MAX_DECOMPRESSED_SIZE)
        records = bytearray()
        for offset_delta, timestamp_delta, key, value, headers in entries:
            record = bytearray(b"\x00")  # attributes
            _write_varint(timestamp_delta, record)
            _write_varint(offset_delta, record)
            _write_bytes(key, record)
            _write_bytes(value, record)
            _write_varint(len(headers), record)
            for name, header_value in headers:
                _write_bytes(name.encode(), record)
                _write_bytes(header_value, record)
            _write_varint(len(record), records)
            records += record
        codec = header.attributes & COMPRESSION_CODEC_MASK
        body = compression.compress(codec, bytes(records)) if codec else records
        start = len(out)
        out += pack_header(header._replace(length=HEADER_SIZE - LOG_OVERHEAD + len(body), crc=0))
        out += body
        _CRC.pack_into(out, start + _CRC_OFFSET,
                       crc32c(memoryview(out)[start + CRC_COVERAGE_START:]))
    return bytes(out)
