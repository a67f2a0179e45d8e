"""Kafka v2 record batches built byte by byte, for tests that send what no client library
would build: a million empty records in one zstd batch, a batch whose header lies."""

from __future__ import annotations

import struct

import zstandard
from crc32c import crc32c

from rafka.wire.produce import unsigned_varint

ZSTD = 4
# base_offset, length, partition_leader_epoch, magic, crc
_BEFORE_CRC = struct.Struct(">qiibI")
# attributes, last_offset_delta, first_timestamp, max_timestamp, producer_id, producer_epoch,
# base_sequence, record_count
_AFTER_CRC = struct.Struct(">hiqqqhii")


def _varint(value: int) -> bytes:
    """A record field's signed varint: zigzag, then the unsigned varint."""
    return unsigned_varint((value << 1) ^ (value >> 63))


def encoded_records(count: int, value: bytes | None = None) -> bytes:
    """`count` records without key or headers, each with `value` (None: null), at offset
    deltas 0..count-1."""
    value_field = b"\x01" if value is None else _varint(len(value)) + value
    out = bytearray()
    for delta in range(count):
        # attributes, timestamp delta 0, offset delta, null key, value, no headers
        body = b"\x00\x00" + _varint(delta) + b"\x01" + value_field + b"\x00"
        out += _varint(len(body))
        out += body
    return bytes(out)


def kafka_batch(records: bytes, count: int, *, codec: int = 0, timestamp: int = 0,
                claimed_count: int | None = None) -> bytes:
    """One batch of `count` encoded `records`, compressed with `codec` (0 or ZSTD), its CRC-32C
    right; `claimed_count` puts another record count in its header."""
    body = zstandard.ZstdCompressor().compress(records) if codec == ZSTD else records
    tail = _AFTER_CRC.pack(codec, count - 1, timestamp, timestamp, -1, -1, -1,
                           count if claimed_count is None else claimed_count) + body
    head = _BEFORE_CRC.pack(0, 4 + 1 + 4 + len(tail), -1, 2, crc32c(tail))
    return head + tail
