"""Compression codecs of record batches, with decompression bounded against compression bombs.

Codec ids are Kafka's (attributes bits 0-2): 0 none, 1 gzip, 2 snappy, 3 lz4, 4 zstd.
Decompression never produces more than a caller-given number of bytes: a few KB of zstd can claim
gigabytes, and the leader decompresses bytes that came from outside the cluster.

Snappy is written as Kafka's Java clients write it: snappy-java's stream framing ("xerial": a
16-byte header, then blocks of at most 32 KiB, each a big-endian length and a raw snappy block).
It is read in that framing or as one raw snappy block, which is what librdkafka writes.
"""

from __future__ import annotations

import struct
import threading
import zlib
from typing import Any

import cramjam
import lz4.frame
import zstandard

from rafka.logstore.errors import CorruptRecordError, RecordTooLargeError

NONE = 0
GZIP = 1
SNAPPY = 2
LZ4 = 3
ZSTD = 4

CODEC_IDS: dict[str, int] = {"none": NONE, "gzip": GZIP, "snappy": SNAPPY, "lz4": LZ4,
                             "zstd": ZSTD}
CODEC_NAMES: dict[int, str] = {v: k for k, v in CODEC_IDS.items()}

# Kafka's defaults: gzip uses the Deflater default (6), zstd level 3, lz4 its default.
GZIP_LEVEL = 6
ZSTD_LEVEL = 3

# snappy-java's stream header: magic, then version 1 and the oldest compatible version 1.
XERIAL_MAGIC = b"\x82SNAPPY\x00"
XERIAL_HEADER = XERIAL_MAGIC + struct.pack(">ii", 1, 1)
XERIAL_BLOCK_SIZE = 32 * 1024  # snappy-java's default, which Kafka's producer keeps

# zstandard contexts are not safe to share between threads; an actor is single-threaded, but a
# client object may be used from several threads, so each thread gets its own pair.
_local = threading.local()


def codec_id(name: str) -> int:
    """The codec id for a compression name ("none", "gzip", "snappy", "lz4", "zstd")."""
    try:
        return CODEC_IDS[name]
    except (KeyError, TypeError):
        raise ValueError(
            f"unknown compression {name!r}: use one of {sorted(CODEC_IDS)}"
        ) from None


def _zstd_compressor() -> zstandard.ZstdCompressor:
    ctx = getattr(_local, "zstd_c", None)
    if ctx is None:
        # The content size goes in the frame header, so the reader can size its buffer once.
        ctx = _local.zstd_c = zstandard.ZstdCompressor(level=ZSTD_LEVEL, write_content_size=True)
    return ctx


def _zstd_decompressor() -> zstandard.ZstdDecompressor:
    ctx = getattr(_local, "zstd_d", None)
    if ctx is None:
        ctx = _local.zstd_d = zstandard.ZstdDecompressor()
    return ctx


def compress(codec: int, data: bytes | memoryview) -> bytes:
    """Compress ``data`` with the codec id ``codec`` (``NONE`` returns it unchanged, as bytes)."""
    if codec == NONE:
        return data if isinstance(data, bytes) else bytes(data)
    if codec == ZSTD:
        return _zstd_compressor().compress(data)
    if codec == LZ4:
        compressed: bytes = lz4.frame.compress(data, store_size=True)
        return compressed
    if codec == GZIP:
        compressor = zlib.compressobj(GZIP_LEVEL, zlib.DEFLATED, 31)  # wbits 31: gzip framing
        return compressor.compress(data) + compressor.flush()
    if codec == SNAPPY:
        return _snappy_compress(data)
    raise ValueError(f"unsupported compression codec id {codec}")


def _too_large(max_size: int) -> RecordTooLargeError:
    return RecordTooLargeError(
        f"decompressed records exceed {max_size} bytes, the bound derived from max.message.bytes "
        "(a compression bomb, or a batch that should have been split): send smaller batches"
    )


def decompress(codec: int, data: bytes | memoryview, max_size: int) -> bytes:
    """Decompress ``data``, refusing to produce more than ``max_size`` bytes.

    Raises :class:`RecordTooLargeError` when the output would exceed ``max_size`` (nothing larger
    than ``max_size + 1`` bytes is ever allocated for the output) and :class:`CorruptRecordError`
    when the stream is damaged, truncated or followed by extra bytes.
    """
    if codec == NONE:
        if len(data) > max_size:
            raise _too_large(max_size)
        return bytes(data)
    try:
        if codec == ZSTD:
            return _zstd_decompress(data, max_size)
        if codec == LZ4:
            return _lz4_decompress(data, max_size)
        if codec == GZIP:
            return _gzip_decompress(data, max_size)
        if codec == SNAPPY:
            return _snappy_decompress(data, max_size)
    except (zlib.error, zstandard.ZstdError, cramjam.DecompressionError, RuntimeError,
            ValueError) as exc:
        raise CorruptRecordError(
            f"cannot decompress {CODEC_NAMES.get(codec, codec)} records: {exc}"
        ) from exc
    raise CorruptRecordError(
        f"unsupported compression codec id {codec} (supported: {sorted(CODEC_NAMES)})"
    )


def _zstd_decompress(data: bytes | memoryview, max_size: int) -> bytes:
    content_size = zstandard.frame_content_size(data)
    if content_size > max_size:
        raise _too_large(max_size)
    if content_size >= 0:
        # The declared size is within bounds, and zstd fails if the frame does not produce
        # exactly that many bytes, so this one-shot call allocates at most max_size.
        return _zstd_decompressor().decompress(data, allow_extra_data=False)
    # Unknown content size (streamed frame): read at most max_size + 1 bytes.
    with _zstd_decompressor().stream_reader(data, read_across_frames=False) as reader:
        out = reader.read(max_size + 1)
    if len(out) > max_size:
        raise _too_large(max_size)
    return out


def _lz4_decompress(data: bytes | memoryview, max_size: int) -> bytes:
    declared = lz4.frame.get_frame_info(data).get("content_size") or 0
    if declared > max_size:
        raise _too_large(max_size)
    decompressor = lz4.frame.LZ4FrameDecompressor()
    out: bytes = decompressor.decompress(data, max_length=max_size + 1)
    return _whole_stream(out, decompressor, max_size,
                         truncated="lz4 records are truncated (the frame has no end mark)",
                         trailing="unexpected bytes after the lz4 frame of the records")


def _gzip_decompress(data: bytes | memoryview, max_size: int) -> bytes:
    decompressor = zlib.decompressobj(31)
    out = decompressor.decompress(data, max_size + 1)
    return _whole_stream(out, decompressor, max_size,
                         truncated="gzip records are truncated (the stream has no end)",
                         trailing="unexpected bytes after the gzip stream of the records")


def _whole_stream(out: bytes, decompressor: Any, max_size: int, *, truncated: str,
                  trailing: str) -> bytes:
    """`out`, if the stream decompressed to at most `max_size` bytes, ended, and had nothing after
    its end; else the error that says which (`decompressor` is zlib's or lz4's, both with `eof`
    and `unused_data`)."""
    if len(out) > max_size:
        raise _too_large(max_size)
    if not decompressor.eof:
        raise CorruptRecordError(truncated)
    if decompressor.unused_data:
        raise CorruptRecordError(trailing)
    return out


def _snappy_compress(data: bytes | memoryview) -> bytes:
    view = memoryview(data)
    parts: list[bytes | cramjam.Buffer] = [XERIAL_HEADER]
    # At least one block, so that no reader takes a bare header for a raw block.
    for start in range(0, max(len(view), 1), XERIAL_BLOCK_SIZE):
        block = cramjam.snappy.compress_raw(view[start:start + XERIAL_BLOCK_SIZE])
        parts += (struct.pack(">i", len(block)), block)
    return b"".join(parts)


def _snappy_blocks(data: bytes | memoryview) -> list[memoryview]:
    """The raw snappy blocks of a stream: one, or those of snappy-java's framing."""
    view = memoryview(data)
    if bytes(view[:len(XERIAL_MAGIC)]) != XERIAL_MAGIC:
        return [view]
    if len(view) < len(XERIAL_HEADER):
        raise CorruptRecordError("snappy records are truncated (in the stream header)")
    blocks, position = [], len(XERIAL_HEADER)
    while position < len(view):
        if position + 4 > len(view):
            raise CorruptRecordError("snappy records are truncated (in a block's length)")
        (length,) = struct.unpack_from(">i", view, position)
        position += 4
        if length <= 0 or position + length > len(view):
            raise CorruptRecordError(
                f"a snappy block claims {length} bytes where {len(view) - position} are left")
        blocks.append(view[position:position + length])
        position += length
    return blocks


def _snappy_decompress(data: bytes | memoryview, max_size: int) -> bytes:
    blocks = _snappy_blocks(data)
    # Each raw block opens with its decompressed length: the whole bound is checked before any
    # block is decompressed, and the decompressor fails on a block that disagrees with it.
    if sum(cramjam.snappy.decompress_raw_len(block) for block in blocks) > max_size:
        raise _too_large(max_size)
    return b"".join(cramjam.snappy.decompress_raw(block) for block in blocks)
