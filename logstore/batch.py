"""Record batch codec: the unit on disk and between actors (docs/storage.md, "Record batches").

Layout, big-endian, 61-byte header followed by the records::

    base_offset int64 | length int32 | leader_epoch int32 | magic int8 | crc uint32 |
    attributes int16 | last_offset_delta int32 | first_timestamp int64 | max_timestamp int64 |
    producer_id int64 | producer_epoch int16 | base_sequence int32 | record_count int32 | records

``length`` counts the bytes after itself; the CRC (zlib's CRC-32) covers every byte after the
crc field. ``base_offset`` and ``leader_epoch`` sit outside the CRC so a leader stamps them
without touching the records, as in Kafka's v2 batches. ``records`` is a msgpack array of
``[offset_delta, timestamp_delta, key, value, headers]``, compressed as a whole when the
attributes say so.

Who calls what:

* producers: :func:`build_batch`, or :func:`frame_batch` around records encoded from columns
  (:mod:`rafka.logstore.record_columns`);
* the leader, on bytes from outside the cluster: :func:`validate_batch` /
  :func:`validate_batches`, then :func:`stamp_batch` (done by ``Log.append_as_leader``);
* consumers: :func:`iter_batches`, :func:`decode_records`, :func:`decode_batches`;
* the log and its segments, on bytes they store: :func:`split_batches` (an append),
  :func:`batch_size` and :func:`check_batch` (recovery and lookups), :func:`frame_whole_batches`
  (a read cut at an arbitrary byte).

This module is the only one that knows the byte layout, with two for the records' msgpack:
:mod:`rafka.logstore.record_columns` encodes records from columns and
:mod:`rafka.logstore.record_check` checks them where their producer says they end. Everything
else asks them.

Nothing here ever unpickles: msgpack only.
"""

from __future__ import annotations

import gc
import struct
import zlib
from bisect import bisect_left
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from itertools import chain
from operator import itemgetter
from typing import Any, NamedTuple

import msgpack

from rafka.common.clock import wall_clock_ms
from rafka.common.sentinels import NO_PRODUCER_EPOCH, NO_PRODUCER_ID, NO_SEQUENCE
from rafka.common.sequences import increment_sequence
from rafka.logstore import compression as _compression
from rafka.logstore.errors import CorruptRecordError, InvalidRecordError, RecordTooLargeError
from rafka.logstore.record_check import records_end_where_claimed

MAGIC = 2
HEADER_SIZE = 61
# base_offset + length: the bytes that precede what ``length`` counts (Kafka's LOG_OVERHEAD).
LOG_OVERHEAD = 12
MIN_LENGTH = HEADER_SIZE - LOG_OVERHEAD
# Everything from the attributes field on is covered by the CRC.
CRC_COVERAGE_START = 21
RECORDS_START = HEADER_SIZE

# Attributes bits, as in Kafka.
COMPRESSION_CODEC_MASK = 0x07
TIMESTAMP_TYPE_MASK = 0x08
TRANSACTIONAL_FLAG_MASK = 0x10
CONTROL_FLAG_MASK = 0x20

CREATE_TIME = 0
LOG_APPEND_TIME = 1

NO_PARTITION_LEADER_EPOCH = -1
NO_TIMESTAMP = -1

INT32_MAX = 2**31 - 1

# How much larger than max.message.bytes decompressed records may be. Generous for real data
# (ratios above 10 are rare) and still a hard bound against compression bombs.
MAX_DECOMPRESSION_RATIO = 32
# The bound used by consumers, who do not know the topic's max.message.bytes.
DEFAULT_MAX_DECOMPRESSED_SIZE = MAX_DECOMPRESSION_RATIO * 1048588

_HEADER = struct.Struct(">qiibIhiqqqhii")
_FRAMING = struct.Struct(">qi")  # base_offset, length
_LAST_OFFSET_DELTA = struct.Struct(">i")
_LAST_OFFSET_DELTA_POS = CRC_COVERAGE_START + 2  # right after the int16 attributes
_STAMP = struct.Struct(">qii")  # base_offset, length, leader_epoch: the bytes a leader rewrites
_BEFORE_CRC_END = struct.Struct(">qiibI")  # the 21 bytes up to and including the crc
_AFTER_CRC = struct.Struct(">hiqqqhii")  # the 40 header bytes covered by the CRC
assert _HEADER.size == HEADER_SIZE

_tuple_new = tuple.__new__
_BYTES_TYPES = (bytes, bytearray, memoryview)
_KEY_TYPES = frozenset((bytes, type(None)))


class BatchHeader(NamedTuple):
    """The 61-byte header of a batch, as read from the wire or the disk."""

    base_offset: int
    length: int
    leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    first_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    record_count: int

    @property
    def size(self) -> int:
        """Total bytes of the batch, header included."""
        return self.length + LOG_OVERHEAD

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        return self.base_offset + self.last_offset_delta + 1

    @property
    def compression(self) -> int:
        """Codec id (see :mod:`rafka.logstore.compression`)."""
        return self.attributes & COMPRESSION_CODEC_MASK

    @property
    def timestamp_type(self) -> int:
        """``CREATE_TIME`` (0) or ``LOG_APPEND_TIME`` (1)."""
        return 1 if self.attributes & TIMESTAMP_TYPE_MASK else 0

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & CONTROL_FLAG_MASK)

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & TRANSACTIONAL_FLAG_MASK)

    @property
    def last_sequence(self) -> int:
        """Sequence number of the last record (wraps at int32 max, as Kafka's do)."""
        if self.base_sequence == NO_SEQUENCE:
            return NO_SEQUENCE
        return increment_sequence(self.base_sequence, self.last_offset_delta)


class Record(NamedTuple):
    """One record as a consumer sees it: absolute offset and timestamp (ms)."""

    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...]


# ----------------------------------------------------------------------------------- building


def _normalise(records: Sequence[Any]) -> list[tuple[Any, Any, int, Any]]:
    """Turn tuples or ProducerRecord-like objects into checked (key, value, ts, headers)."""
    now_ms = None
    out = []
    for record in records:
        if isinstance(record, tuple):
            if len(record) == 4:
                key, value, timestamp, headers = record
            elif len(record) in (2, 3):
                key, value, timestamp, headers = (*record, None, None)[:4]
            else:
                raise ValueError(
                    "a record tuple is (key, value, timestamp_ms, headers), "
                    f"got {len(record)} items"
                )
        else:
            key = record.key
            value = record.value
            timestamp = getattr(record, "timestamp_ms", getattr(record, "timestamp", None))
            headers = getattr(record, "headers", None)
        if timestamp is None:
            if now_ms is None:
                now_ms = wall_clock_ms()
            timestamp = now_ms
        if type(timestamp) is not int:
            raise TypeError(f"record timestamp must be an int in ms, got {timestamp!r}")
        if key is not None and not isinstance(key, _BYTES_TYPES):
            raise TypeError(f"record key must be bytes or None, got {type(key).__name__}")
        if value is not None and not isinstance(value, _BYTES_TYPES):
            raise TypeError(f"record value must be bytes or None, got {type(value).__name__}")
        out.append((key, value, timestamp, check_headers(headers)))
    return out


# A record header: its name, and its value as given (None, as Kafka allows).
Header = tuple[str, bytes | bytearray | memoryview | None]


def check_headers(headers: Any) -> tuple[Header, ...]:
    """Record headers as a tuple of ``(str, bytes)`` pairs (a value may be None, as in
    Kafka); ``TypeError`` for anything else."""
    if headers is None:
        return ()
    if isinstance(headers, (str, *_BYTES_TYPES, Mapping)) or not isinstance(headers, Iterable):
        raise TypeError(f"record headers are a sequence of (str, bytes) pairs, got {headers!r}")
    return tuple(_check_header_pair(pair) for pair in headers)


def _check_header_pair(pair: Any) -> Header:
    try:
        name, value = pair
    except (TypeError, ValueError):
        raise TypeError(f"a record header is a (str, bytes) pair, got {pair!r}") from None
    if not isinstance(name, str) or not (value is None or isinstance(value, _BYTES_TYPES)):
        raise TypeError(f"a record header is a (str, bytes) pair, got {pair!r}")
    return name, value


def build_batch(
    records: Sequence[Any],
    *,
    compression: str = "none",
    producer_id: int = NO_PRODUCER_ID,
    producer_epoch: int = NO_PRODUCER_EPOCH,
    base_sequence: int = NO_SEQUENCE,
    timestamp_type: int = CREATE_TIME,
    transactional: bool = False,
    checked: bool = False,
) -> bytes:
    """Encode records into one batch with ``base_offset`` 0 and ``leader_epoch`` -1.

    Each record is a tuple ``(key, value, timestamp_ms, headers)`` (``timestamp_ms`` None means
    now, ``headers`` None or a sequence of ``(str, bytes)``; ``(key, value)`` is accepted too), or
    an object with ``key``, ``value``, ``timestamp_ms`` and ``headers`` attributes. The leader
    stamps the real base offset and epoch on append. ``transactional`` marks a batch of a
    transactional producer's transaction. ``checked``: the records are such tuples, with an int
    timestamp, whose types the caller checked as they came (the producer does in ``send``), so
    they are not checked again (about a fifth of the encoding's time, for small records).
    """
    if not records:
        raise ValueError("a batch needs at least one record")
    codec = _codec(compression)
    if timestamp_type not in (CREATE_TIME, LOG_APPEND_TIME):
        raise ValueError(
            f"timestamp_type must be 0 (CreateTime) or 1 (LogAppendTime), got {timestamp_type!r}"
        )
    first = records[0]
    entries: list[tuple[Any, ...]] | None = None
    if type(first) is tuple and len(first) == 4:
        # Fast path: one pass, the types checked in bulk afterwards (C loops, not Python ones).
        try:
            first_ts = first[2]
            entries = [
                (i, ts - first_ts, k, v, h or ())
                for i, (k, v, ts, h) in enumerate(records)
            ]
        except (TypeError, ValueError):
            entries = None
        if entries is not None and not checked and not _entry_types_ok(entries):
            entries = None
    if entries is None:
        normalised = _normalise(records)
        first_ts = normalised[0][2]
        entries = [(i, ts - first_ts, k, v, h) for i, (k, v, ts, h) in enumerate(normalised)]
    max_ts = first_ts + max(map(itemgetter(1), entries))
    attributes = (codec | (TIMESTAMP_TYPE_MASK if timestamp_type else 0)
                  | (TRANSACTIONAL_FLAG_MASK if transactional else 0))
    return encode_batch(entries, new_header(
        attributes=attributes, last_offset_delta=len(entries) - 1, first_timestamp=first_ts,
        max_timestamp=max_ts, producer_id=producer_id, producer_epoch=producer_epoch,
        base_sequence=base_sequence))


def _entry_types_ok(entries: list[tuple[Any, ...]]) -> bool:
    _, timestamp_deltas, keys, values, headers = zip(*entries, strict=True)
    if set(map(type, timestamp_deltas)) != {int}:
        return False
    if not set(map(type, keys)) <= _KEY_TYPES or not set(map(type, values)) <= _KEY_TYPES:
        return False
    # Non-empty headers are rare: let the slow path check their shape.
    return not any(headers)


def _codec(name: str) -> int:
    return _compression.codec_id(name)


def new_header(
    *,
    attributes: int,
    last_offset_delta: int,
    first_timestamp: int,
    max_timestamp: int,
    base_offset: int = 0,
    leader_epoch: int = NO_PARTITION_LEADER_EPOCH,
    producer_id: int = NO_PRODUCER_ID,
    producer_epoch: int = NO_PRODUCER_EPOCH,
    base_sequence: int = NO_SEQUENCE,
) -> BatchHeader:
    """The header of a batch about to be encoded: a producer's by default (base offset 0, no
    leader epoch, no producer id). Its length, CRC and record count are the encoder's to fill
    in (:func:`encode_batch`)."""
    return BatchHeader(base_offset, 0, leader_epoch, MAGIC, 0, attributes, last_offset_delta,
                       first_timestamp, max_timestamp, producer_id, producer_epoch,
                       base_sequence, 0)


def encode_batch(entries: Sequence[Sequence[Any]], header: BatchHeader) -> bytes:
    """Low-level encoder: ``entries`` are ``(offset_delta, timestamp_delta, key, value, headers)``,
    under ``header`` (:func:`new_header`, or a batch's own header kept), whose length, CRC and
    record count are computed and whose attributes name the codec.

    Used by :func:`build_batch`, by the cleaner, which rebuilds batches keeping their
    original offset deltas, and by the Kafka-format reader, which keeps a batch's header.
    """
    return _framed(msgpack.packb(entries, use_bin_type=True), len(entries), header)


class RecordsPayload(NamedTuple):
    """A batch's records already encoded (the msgpack array, uncompressed) and waiting for
    the header a producer gives them when it sends them (:func:`frame_batch`): the records'
    bytes do not depend on the producer id, epoch or sequence numbers.

    Made from columns by :func:`rafka.logstore.record_columns.encode_binary_records`.
    """

    data: bytes | memoryview
    # Kafka's name for the field; it shadows tuple.count, which nothing here calls.
    count: int  # type: ignore[assignment]
    first_timestamp: int
    max_timestamp: int
    record_ends: bytes | None = None
    """Where each record ends in ``data`` (little-endian uint32s), for the leader's check
    (:func:`validate_batch`); None: unknown."""


def frame_batch(
    payload: RecordsPayload,
    *,
    compression: str = "none",
    producer_id: int = NO_PRODUCER_ID,
    producer_epoch: int = NO_PRODUCER_EPOCH,
    base_sequence: int = NO_SEQUENCE,
    transactional: bool = False,
) -> bytes:
    """One batch of already encoded records, as :func:`build_batch` would make it of the same
    records: ``base_offset`` 0, ``leader_epoch`` -1, CreateTime."""
    if not payload.count:
        raise ValueError("a batch needs at least one record")
    attributes = _codec(compression) | (TRANSACTIONAL_FLAG_MASK if transactional else 0)
    return _framed(payload.data, payload.count, new_header(
        attributes=attributes, last_offset_delta=payload.count - 1,
        first_timestamp=payload.first_timestamp, max_timestamp=payload.max_timestamp,
        producer_id=producer_id, producer_epoch=producer_epoch, base_sequence=base_sequence))


def _framed(payload: bytes | memoryview, record_count: int, header: BatchHeader) -> bytes:
    """The header and CRC around the records' bytes, compressed first when the header's
    attributes say."""
    base_offset, _, leader_epoch, _, _, attributes, *_ = header
    codec = attributes & COMPRESSION_CODEC_MASK
    if codec:
        payload = _compression.compress(codec, payload)
    try:
        # The header's fields from attributes to base_sequence, in the order the bytes after
        # the CRC hold them, then the count.
        tail = _AFTER_CRC.pack(*header[5:12], record_count)
        crc = zlib.crc32(payload, zlib.crc32(tail))
        head = _BEFORE_CRC_END.pack(base_offset, MIN_LENGTH + len(payload), leader_epoch, MAGIC,
                                    crc)
    except struct.error as exc:
        raise ValueError(f"a batch header field is out of range: {exc}") from None
    return b"".join((head, tail, payload))


# ------------------------------------------------------------------------------------ reading


def read_header(buf: bytes | bytearray | memoryview, pos: int = 0) -> BatchHeader:
    """The header of the batch starting at ``pos`` (no CRC or length check)."""
    try:
        return BatchHeader._make(_HEADER.unpack_from(buf, pos))
    except struct.error:
        raise CorruptRecordError(
            f"only {max(len(buf) - pos, 0)} bytes at position {pos}: a batch header is "
            f"{HEADER_SIZE} bytes"
        ) from None


def pack_header(header: BatchHeader) -> bytes:
    """The 61 bytes of `header` as given, its crc included: for a format that shares this
    header but computes its own CRC (Kafka's CRC-32C, see `rafka.wire.records`)."""
    return _HEADER.pack(*header)


def check_batch(
    view: memoryview, pos: int, *, verify_crc: bool, strict: bool
) -> BatchHeader:
    """Check the header of the (complete) batch at ``pos``; the framing was checked by the caller.

    ``strict`` is for batches built by a producer (offset deltas exactly 0..n-1, at least one
    record); batches already in a log may have gaps and may be empty after compaction.
    """
    header = BatchHeader._make(_HEADER.unpack_from(view, pos))
    if header.magic != MAGIC:
        raise CorruptRecordError(
            f"batch at offset {header.base_offset} has magic {header.magic}, expected {MAGIC}"
        )
    if verify_crc:
        actual = zlib.crc32(view[pos + CRC_COVERAGE_START : pos + header.length + LOG_OVERHEAD])
        if actual != header.crc:
            raise CorruptRecordError(
                f"batch at offset {header.base_offset} fails its CRC check "
                f"(stored {header.crc:#010x}, computed {actual:#010x}): the bytes were damaged"
            )
    if header.compression not in _compression.CODEC_NAMES:
        raise CorruptRecordError(
            f"batch at offset {header.base_offset} uses compression codec {header.compression}, "
            f"supported: {sorted(_compression.CODEC_NAMES.items())}"
        )
    count, delta = header.record_count, header.last_offset_delta
    if strict:
        if count < 1 or delta != count - 1:
            raise CorruptRecordError(
                f"batch says {count} records but last_offset_delta {delta}: a producer batch has "
                "at least one record and last_offset_delta == record_count - 1"
            )
    elif count < 0 or delta < 0 or count > delta + 1:
        raise CorruptRecordError(
            f"batch at offset {header.base_offset} says {count} records but last_offset_delta "
            f"{delta}"
        )
    return header


def batch_size(buf: bytes | bytearray | memoryview, pos: int = 0) -> int:
    """Total bytes of the batch at ``pos`` (header included), read from its length field alone.

    Raises :class:`CorruptRecordError` if the length is smaller than a header: the bytes there
    are not a batch. The caller makes sure the first ``LOG_OVERHEAD`` bytes are present.
    """
    length: int = _FRAMING.unpack_from(buf, pos)[1]
    if length < MIN_LENGTH:
        raise CorruptRecordError(
            f"batch at byte {pos} has length {length}, less than the {MIN_LENGTH}-byte header"
        )
    return length + LOG_OVERHEAD


def split_batches(
    buf: bytes | bytearray | memoryview, *, verify_crc: bool
) -> list[tuple[BatchHeader, memoryview]]:
    """Frame concatenated batches for an append: each header checked, a partial batch refused.

    Headers are checked as for batches already in a log (:func:`check_batch` with
    ``strict=False``); the records are not decoded.
    """
    view = buf if isinstance(buf, memoryview) else memoryview(buf)
    out = []
    pos = 0
    end = len(view)
    while pos < end:
        if end - pos < HEADER_SIZE:
            raise CorruptRecordError(f"{end - pos} bytes after the last whole batch")
        size = batch_size(view, pos)
        if pos + size > end:
            raise CorruptRecordError(
                f"batch at byte {pos} declares length {size - LOG_OVERHEAD}, but {end - pos} "
                "bytes remain"
            )
        header = check_batch(view, pos, verify_crc=verify_crc, strict=False)
        out.append((header, view[pos : pos + size]))
        pos += size
    return out


def frame_whole_batches(
    buf: bytes | bytearray | memoryview, max_offset: int | None = None
) -> tuple[int, int | None, bool]:
    """The whole batches at the start of ``buf`` whose last offset is below ``max_offset``.

    Returns ``(size, next_offset, stopped_by_max_offset)``: their total size in bytes, the
    offset after the last of them (None if there is none), and whether a batch at or past
    ``max_offset`` ended them (else the end of ``buf`` did). A plain tuple: this runs on every
    fetch.

    For bytes read from a log at a batch boundary and cut at an arbitrary byte: only each
    batch's base offset, length and last offset delta are read (the batches were checked when
    they were appended), which keeps a fetch's framing cheap.
    """
    end = len(buf)
    pos = 0
    next_offset = None
    while pos + HEADER_SIZE <= end:
        base, length = _FRAMING.unpack_from(buf, pos)
        size = length + LOG_OVERHEAD
        if pos + size > end:
            break
        last = base + _LAST_OFFSET_DELTA.unpack_from(buf, pos + _LAST_OFFSET_DELTA_POS)[0]
        if max_offset is not None and last >= max_offset:
            return pos, next_offset, True
        pos += size
        next_offset = last + 1
    return pos, next_offset, False


def validate_batch(
    buf: bytes | bytearray | memoryview,
    max_size: int,
    *,
    require_keys: bool = False,
    record_ends: bytes | None = None,
) -> BatchHeader:
    """Validate exactly one batch of untrusted bytes; return its header.

    Checks the framing (length not negative, not smaller than the header, not above
    ``max_size`` -- max.message.bytes -- and matching the buffer exactly), magic, CRC, the
    header's counts (no control batch: markers come from the coordinator), and every record
    (:func:`_verify_records`): decompressed within ``MAX_DECOMPRESSION_RATIO * max_size`` and
    decoded, each must be what a consumer can read.
    ``require_keys`` refuses records without a key (for compacted topics: ``LogConfig.compact``).
    ``record_ends``: where the producer says each record ends (``RecordsPayload.record_ends``);
    where the records are all there, they are checked without decoding them
    (:mod:`rafka.logstore.record_check`), else decoded as without it.

    Raises :class:`RecordTooLargeError`, :class:`CorruptRecordError` or
    :class:`InvalidRecordError`.
    """
    view = buf if isinstance(buf, memoryview) else memoryview(buf)
    if len(view) < LOG_OVERHEAD:
        raise CorruptRecordError(
            f"{len(view)} bytes is shorter than a batch's {LOG_OVERHEAD}-byte framing"
        )
    size = batch_size(view, 0)
    if size > max_size:
        raise RecordTooLargeError(
            f"batch of {size} bytes is larger than max.message.bytes={max_size}: "
            "send smaller batches or raise the topic's max.message.bytes"
        )
    if size > len(view):
        raise CorruptRecordError(
            f"batch declares {size} bytes but only {len(view)} arrived (truncated)"
        )
    if size < len(view):
        raise CorruptRecordError(
            f"{len(view) - size} unexpected bytes after the batch (it declares {size} bytes)"
        )
    header = check_batch(view, 0, verify_crc=True, strict=True)
    if header.is_control:
        raise InvalidRecordError(
            "a producer's batch may not be a control batch: only the transaction coordinator "
            "writes commit and abort markers"
        )
    if record_ends is None or not _records_end_where_claimed(view, header, record_ends,
                                                             require_keys):
        _verify_records(view, 0, header, MAX_DECOMPRESSION_RATIO * max_size, require_keys)
    return header


def _records_end_where_claimed(view: memoryview, header: BatchHeader, record_ends: bytes,
                               require_keys: bool) -> bool:
    """Whether the batch's records are, at the ends its producer claims, what
    :func:`_verify_records` accepts (see :mod:`rafka.logstore.record_check`)."""
    if header.attributes & COMPRESSION_CODEC_MASK:
        return False
    fits, max_timestamp_delta = records_end_where_claimed(
        view[RECORDS_START:header.size], header.record_count, record_ends,
        require_keys=require_keys)
    return fits and bool(
        header.attributes & TIMESTAMP_TYPE_MASK
        or header.first_timestamp + max_timestamp_delta == header.max_timestamp)


def validate_batches(
    buf: bytes | bytearray | memoryview,
    max_size: int,
    *,
    require_keys: bool = False,
    record_ends: bytes | None = None,
) -> list[BatchHeader]:
    """Validate a produce request that carries one or more concatenated batches.

    Each batch is checked as by :func:`validate_batch` (``max_size`` applies per batch, as
    Kafka's max.message.bytes does); a partial batch at the end is trailing garbage. rafka's
    producer sends one batch per partition per request, but several are accepted;
    ``record_ends`` is used only for a request of one batch.
    """
    view = buf if isinstance(buf, memoryview) else memoryview(buf)
    if not len(view):
        raise CorruptRecordError("a produce request needs at least one batch, got 0 bytes")
    headers = []
    pos = 0
    while pos < len(view):
        if len(view) - pos < LOG_OVERHEAD:
            raise CorruptRecordError(
                f"{len(view) - pos} unexpected bytes after the last whole batch"
            )
        size = batch_size(view, pos)
        headers.append(
            validate_batch(
                view[pos : pos + size] if pos + size <= len(view) else view[pos:],
                max_size,
                require_keys=require_keys,
                record_ends=record_ends if pos == 0 and size == len(view) else None,
            )
        )
        pos += size
    return headers


def unpack_entries(
    view: memoryview, pos: int, header: BatchHeader, max_decompressed_size: int
) -> Any:
    """The raw record entries ``(offset_delta, timestamp_delta, key, value, headers)`` of the
    batch at ``pos`` (decompressed within ``max_decompressed_size``); the count is checked."""
    payload: Any = view[pos + RECORDS_START : pos + header.length + LOG_OVERHEAD]
    codec = header.attributes & COMPRESSION_CODEC_MASK
    if codec:
        payload = _compression.decompress(codec, payload, max_decompressed_size)
    try:
        # use_list=False: tuples are cheaper to build, and entries are never mutated.
        entries = msgpack.unpackb(payload, use_list=False, raw=False)
    except (ValueError, TypeError, msgpack.UnpackException) as exc:
        raise CorruptRecordError(
            f"records of the batch at offset {header.base_offset} are not valid msgpack: {exc}"
        ) from None
    if type(entries) is not tuple or len(entries) != header.record_count:
        raise CorruptRecordError(
            f"batch at offset {header.base_offset} says {header.record_count} records but its "
            f"records decode to {len(entries) if type(entries) is tuple else type(entries)}"
        )
    return entries


def _verify_records(
    view: memoryview,
    pos: int,
    header: BatchHeader,
    max_decompressed_size: int,
    require_keys: bool,
) -> None:
    """Every record of the batch decodes to what a consumer expects; else the batch is refused.

    A leader runs this on every batch a producer sends: one malformed record would otherwise be
    stored, replicated, and fail every consumer that reads that far. The checks run over whole
    columns (``set(map(type, ...))``), not record by record in Python, which keeps them within a
    few times the cost of the msgpack decode (see ``bench/logstore_bench.py``).
    """
    entries = unpack_entries(view, pos, header, max_decompressed_size)
    where = f"batch at offset {header.base_offset}"
    if set(map(type, entries)) != {tuple} or set(map(len, entries)) != {5}:
        raise CorruptRecordError(
            f"{where}: every record is [offset_delta, timestamp_delta, key, value, headers]"
        )
    offset_deltas, timestamp_deltas, keys, values, headers = zip(*entries, strict=True)
    if offset_deltas != tuple(range(len(entries))):
        raise CorruptRecordError(f"{where}: record offset deltas are not 0..{len(entries) - 1}")
    if set(map(type, timestamp_deltas)) != {int}:
        raise CorruptRecordError(f"{where}: record timestamp deltas must be integers")
    if not set(map(type, keys)) <= _KEY_TYPES or not set(map(type, values)) <= _KEY_TYPES:
        raise CorruptRecordError(f"{where}: record keys and values must be bytes or nil")
    if set(map(type, headers)) != {tuple}:
        raise CorruptRecordError(f"{where}: record headers must be an array")
    if any(headers):
        pairs = tuple(chain.from_iterable(headers))
        if (set(map(type, pairs)) != {tuple} or set(map(len, pairs)) != {2}
                or set(map(type, map(itemgetter(0), pairs))) != {str}
                or not set(map(type, map(itemgetter(1), pairs))) <= _KEY_TYPES):
            raise CorruptRecordError(f"{where}: a record header is a [str, bytes] pair")
    if (
        not header.attributes & TIMESTAMP_TYPE_MASK
        and header.first_timestamp + max(timestamp_deltas) != header.max_timestamp
    ):
        raise CorruptRecordError(
            f"{where}: max_timestamp {header.max_timestamp} is not the largest record timestamp"
        )
    if require_keys and None in keys:
        raise InvalidRecordError(
            "a compacted topic cannot accept a record without a key: set a key on every record"
        )


def stamped_prefix(
    header: BatchHeader,
    view: memoryview,
    base_offset: int,
    leader_epoch: int,
    log_append_time_ms: int | None = None,
) -> bytes:
    """The bytes that replace the start of the batch ``view`` when a leader stamps it.

    Without ``log_append_time_ms`` that is the 16 bytes of base_offset, length and leader_epoch,
    outside the CRC. With it, the whole 61-byte header: the timestamp type becomes
    LogAppendTime, max_timestamp the append time, and the CRC is recomputed (the records are
    only read by zlib's CRC, never decoded).
    """
    if log_append_time_ms is None:
        return _STAMP.pack(base_offset, header.length, leader_epoch)
    tail = _AFTER_CRC.pack(
        header.attributes | TIMESTAMP_TYPE_MASK,
        header.last_offset_delta,
        header.first_timestamp,
        log_append_time_ms,
        header.producer_id,
        header.producer_epoch,
        header.base_sequence,
        header.record_count,
    )
    crc = zlib.crc32(view[RECORDS_START : header.size], zlib.crc32(tail))
    return _BEFORE_CRC_END.pack(base_offset, header.length, leader_epoch, MAGIC, crc) + tail


def stamp_batch(
    buf: bytes | bytearray,
    base_offset: int,
    leader_epoch: int,
    *,
    log_append_time_ms: int | None = None,
) -> bytes | bytearray:
    """Stamp the base offset and leader epoch of one batch, leaving the CRC as it is.

    A ``bytearray`` is stamped in place and returned; ``bytes`` are copied. With
    ``log_append_time_ms`` (topics with message.timestamp.type=LogAppendTime) the timestamp type
    and max_timestamp are set too and the CRC recomputed.
    """
    view = memoryview(buf)
    header = read_header(view)
    prefix = stamped_prefix(header, view, base_offset, leader_epoch, log_append_time_ms)
    if isinstance(buf, bytearray):
        buf[: len(prefix)] = prefix
        return buf
    return b"".join((prefix, view[len(prefix) :]))


def iter_batches(buf: bytes | bytearray | memoryview) -> Iterator[tuple[BatchHeader, memoryview]]:
    """Split concatenated batches (a fetch result) without decoding records.

    A partial batch at the end is ignored, as Kafka's consumers do when a fetch is cut by
    ``max_bytes``. Raises :class:`CorruptRecordError` on an impossible length or a wrong magic.
    """
    view = buf if isinstance(buf, memoryview) else memoryview(buf)
    end = len(view)
    pos = 0
    while end - pos >= HEADER_SIZE:
        size = batch_size(view, pos)
        if pos + size > end:
            return
        header = BatchHeader._make(_HEADER.unpack_from(view, pos))
        if header.magic != MAGIC:
            raise CorruptRecordError(
                f"batch at byte {pos} has magic {header.magic}, expected {MAGIC}"
            )
        yield header, view[pos : pos + size]
        pos += size


@contextmanager
def _gc_paused() -> Iterator[None]:
    """Pause the cyclic GC while decoding: a fetch allocates tens of thousands of record
    tuples, which trigger young-generation collections (measured: ~40 % of decode time) although
    records never form cycles. The previous state is restored, so a caller that disabled the
    GC keeps it disabled."""
    enabled = gc.isenabled()
    if enabled:
        gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _records(
    view: memoryview,
    pos: int,
    header: BatchHeader,
    max_decompressed_size: int,
    topic_partition: tuple[str, int] | None = None,
    record_type: type = Record,
) -> list[Any]:
    entries = unpack_entries(view, pos, header, max_decompressed_size)
    base = header.base_offset
    stamped = header.attributes & TIMESTAMP_TYPE_MASK
    first = header.first_timestamp
    ts = header.max_timestamp
    try:
        # tuple.__new__ builds the NamedTuple in C, skipping its Python-level __new__.
        if topic_partition is not None:
            topic, partition = topic_partition
            if stamped:
                return [_tuple_new(record_type, (topic, partition, base + od, ts, k, v, h))
                        for od, _, k, v, h in entries]
            return [_tuple_new(record_type, (topic, partition, base + od, first + td, k, v, h))
                    for od, td, k, v, h in entries]
        if stamped:
            return [_tuple_new(record_type, (base + od, ts, k, v, h))
                    for od, _, k, v, h in entries]
        return [_tuple_new(record_type, (base + od, first + td, k, v, h))
                for od, td, k, v, h in entries]
    except (TypeError, ValueError) as exc:
        raise CorruptRecordError(
            f"records of the batch at offset {base} have the wrong shape: {exc}"
        ) from None


def decode_records(
    batch: bytes | bytearray | memoryview,
    *,
    verify_crc: bool = True,
    max_decompressed_size: int = DEFAULT_MAX_DECOMPRESSED_SIZE,
) -> list[Record]:
    """Decode one batch into records with absolute offsets and timestamps."""
    view = batch if isinstance(batch, memoryview) else memoryview(batch)
    if len(view) < LOG_OVERHEAD:
        raise CorruptRecordError(f"{len(view)} bytes cannot hold a batch")
    size = batch_size(view, 0)
    if size > len(view):
        raise CorruptRecordError(f"batch declares {size} bytes but only {len(view)} are given")
    header = check_batch(view, 0, verify_crc=verify_crc, strict=False)
    with _gc_paused():
        return _records(view, 0, header, max_decompressed_size)


def decode_batches(
    buf: bytes | bytearray | memoryview,
    min_offset: int = 0,
    *,
    verify_crc: bool = True,
    max_decompressed_size: int = DEFAULT_MAX_DECOMPRESSED_SIZE,
    topic_partition: tuple[str, int] | None = None,
    record_type: type = Record,
) -> list[Any]:
    """Decode every whole batch of a fetch result, dropping records below ``min_offset``.

    A fetch returns whole batches, so the first one may start before the offset the consumer
    asked for. Control batches are skipped; a partial trailing batch is ignored.

    Records are ``Record``s, or, given ``topic_partition``, ``record_type(topic, partition,
    offset, timestamp, key, value, headers)``: a consumer's own record type, built once per
    record instead of converted from a ``Record``.
    """
    out: list[Any] = []
    with _gc_paused():
        for header, view in iter_batches(buf):
            if header.last_offset < min_offset or header.attributes & CONTROL_FLAG_MASK:
                continue
            if verify_crc:
                check_batch(view, 0, verify_crc=True, strict=False)
            records = _records(view, 0, header, max_decompressed_size, topic_partition,
                               record_type)
            if header.base_offset < min_offset:
                offset_of = itemgetter(0 if topic_partition is None else 2)
                records = records[bisect_left(records, min_offset, key=offset_of):]
            out += records
    return out



class BatchColumns(NamedTuple):
    """One batch's records column by column, as `decode_columns` returns them.

    Offsets and timestamps stay deltas from the batch's base, so whoever builds columnar data
    from them (an Arrow table, say) adds the base in bulk instead of once per record in Python.
    """

    base_offset: int
    first_timestamp: int
    timestamp_type: int
    """``LOG_APPEND_TIME``: every record's timestamp is ``max_timestamp``."""
    max_timestamp: int
    offset_deltas: tuple[int, ...]
    timestamp_deltas: tuple[int, ...]
    keys: tuple[bytes | None, ...]
    values: tuple[bytes | None, ...]
    headers: tuple[tuple[tuple[str, bytes | None], ...], ...]


def decode_columns(
    buf: bytes | bytearray | memoryview,
    min_offset: int = 0,
    max_offset: int | None = None,
    *,
    verify_crc: bool = True,
    max_decompressed_size: int = DEFAULT_MAX_DECOMPRESSED_SIZE,
) -> list[BatchColumns]:
    """The records of a fetch result with offsets in ``[min_offset, max_offset)``, one
    `BatchColumns` per batch that has any; control batches are skipped, a partial trailing
    batch is ignored (as `decode_batches`).

    The transposition is msgpack's and ``zip``'s, in C: no Python code runs per record.
    """
    out: list[BatchColumns] = []
    with _gc_paused():
        for header, view in iter_batches(buf):
            if header.last_offset < min_offset or header.attributes & CONTROL_FLAG_MASK:
                continue
            base = header.base_offset
            if max_offset is not None and base >= max_offset:
                break
            if verify_crc:
                check_batch(view, 0, verify_crc=True, strict=False)
            entries = unpack_entries(view, 0, header, max_decompressed_size)
            if not entries:
                continue
            try:
                columns = tuple(zip(*entries, strict=True))
            except (TypeError, ValueError):
                columns = ()
            if len(columns) != 5:
                raise CorruptRecordError(
                    f"records of the batch at offset {base} have the wrong shape: each must be "
                    f"[offset_delta, timestamp_delta, key, value, headers]")
            offset_deltas = columns[0]
            low = bisect_left(offset_deltas, min_offset - base) if base < min_offset else 0
            high = len(offset_deltas)
            if max_offset is not None and header.last_offset >= max_offset:
                high = bisect_left(offset_deltas, max_offset - base)
            if (low, high) != (0, len(offset_deltas)):
                columns = tuple(column[low:high] for column in columns)
            if not columns[0]:
                continue
            out.append(BatchColumns(base, header.first_timestamp, header.timestamp_type,
                                    header.max_timestamp, *columns))
    return out
