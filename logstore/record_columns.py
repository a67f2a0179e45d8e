"""Records encoded from Arrow columns of keys and values, with no Python object per record.

A Spark task or a Ray Data block holds its keys and values as Arrow binary (or string)
arrays. `encode_binary_records` turns such columns into batches' records
(:class:`rafka.logstore.batch.RecordsPayload`, framed by :func:`~rafka.logstore.batch.frame_batch`)
with Arrow's compute kernels, which run in C. The bytes are exactly those
:func:`~rafka.logstore.batch.build_batch` writes for the same records: msgpack's array of
``[offset_delta, timestamp_delta, key, value, headers]`` in its smallest encoding (what
``msgpack.packb`` writes), so no reader, leader or follower can tell the two apart.

Every record of one payload has the same timestamp.

How: a record is ``[0x95, offset_delta, 0x00] [key header] key [value header] value
[headers]``. The bracketed parts come from tables of every form they can take (the first part
by offset delta, a header by length), picked by Arrow's ``take``; then
``binary_join_element_wise`` joins each record's parts, and the joined strings' buffer is the
records, end to end. Without headers the last part is ``0x90`` (an empty array); with them
(Spark's ``array<struct<key, value>>`` column), each header is joined the same way as
``[0x92] [name header] name [value header] value``, and each record's headers by
``binary_join`` over the list, behind the array's header.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import cache

import msgpack
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from rafka.logstore.batch import RecordsPayload
from rafka.logstore.record_check import array_header

__all__ = ["binary_buffers", "binary_lengths", "check_headers_column", "encode_binary_records",
           "header_lengths", "is_binary_column", "is_binary_type", "is_headers_type"]

# Offset deltas and lengths below this are looked up in tables; larger ones (a batch of more
# than 65,536 records, a key or value above 64 KiB) are encoded one by one, and are too few
# per batch for that to cost anything.
_TABLE_SIZE = 1 << 16
_NIL_AT = _TABLE_SIZE  # the bin-header table's last entry: msgpack's nil, for a None
_NIL = msgpack.packb(None)
_RECORD_END = b"\x90"  # each record's headers: an empty array
_HEADER_START = b"\x92"  # a header: an array of its name and value


def is_binary_type(arrow_type: pa.DataType) -> bool:
    """Whether a column of ``arrow_type`` holds byte strings: binary or string, large or not."""
    return bool(pa.types.is_binary(arrow_type) or pa.types.is_large_binary(arrow_type)
                or pa.types.is_string(arrow_type) or pa.types.is_large_string(arrow_type))


def is_binary_column(column: object) -> bool:
    """Whether ``column`` is an Arrow array of byte strings: binary or string, large or not."""
    return isinstance(column, pa.Array) and is_binary_type(column.type)


def check_headers_column(column: object) -> None:
    """``TypeError`` unless ``column`` holds records' headers as Spark's Kafka sink takes them:
    an Arrow list of structs of a string ``key`` and a binary or string ``value``."""
    if not _is_headers_column(column):
        raise TypeError("headers must be an Arrow list of structs of a string key and a binary "
                        "or string value (Spark's array<struct<key, value>>), got "
                        f"{getattr(column, 'type', type(column).__name__)}")


def _is_headers_column(column: object) -> bool:
    return isinstance(column, pa.Array) and is_headers_type(column.type)


def is_headers_type(arrow_type: pa.DataType) -> bool:
    """Whether a column of ``arrow_type`` holds records' headers as ``check_headers_column``
    takes them."""
    if not (pa.types.is_list(arrow_type) or pa.types.is_large_list(arrow_type)):
        return False
    pair = arrow_type.value_type
    if not pa.types.is_struct(pair) or {pair.field(i).name for i in range(pair.num_fields)} != {
            "key", "value"}:
        return False
    key, value = pair.field("key").type, pair.field("value").type
    return bool((pa.types.is_string(key) or pa.types.is_large_string(key))
                and is_binary_type(value))


def header_lengths(headers: pa.Array, overhead_per_header: int = 0) -> np.ndarray:
    """The bytes of each record's headers (a column `check_headers_column` accepts): its names'
    and values' lengths, and ``overhead_per_header`` for each (int64)."""
    names, values, counts = _header_fields(headers)
    running = np.zeros(len(names) + 1, dtype=np.int64)
    np.cumsum(binary_lengths(names) + binary_lengths(values) + overhead_per_header,
              out=running[1:])
    ends = np.cumsum(counts)
    lengths: np.ndarray = running[ends] - running[ends - counts]
    return lengths


def binary_buffers(column: pa.Array) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """A binary or string column's buffers as numpy, without a copy: each string's offsets
    (n + 1, into the data), the data's bytes, and which strings are not null (None: all)."""
    offsets: np.ndarray = np.frombuffer(column.buffers()[1], dtype=_offset_type(column.type),
                            count=len(column) + 1, offset=column.offset * _offset_size(column.type))
    data = column.buffers()[2]
    return (offsets, np.frombuffer(data, dtype=np.uint8) if data is not None
            else np.zeros(0, dtype=np.uint8), _valid(column) if column.null_count else None)


def binary_lengths(column: pa.Array) -> np.ndarray:
    """Each string's length in bytes (int64), 0 for a null: read from the offsets buffer,
    without a kernel call."""
    offsets, _data, valid = binary_buffers(column)
    lengths = np.diff(offsets).astype(np.int64, copy=False)
    if valid is not None:
        lengths = np.where(valid, lengths, 0)
    return lengths


def _valid(column: pa.Array) -> np.ndarray:
    """Which strings are not null (booleans), from the validity bitmap."""
    bits = np.unpackbits(np.frombuffer(column.buffers()[0], dtype=np.uint8), bitorder="little")
    return bits[column.offset:column.offset + len(column)].astype(bool)


def encode_binary_records(values: pa.Array, keys: pa.Array | None, timestamp_ms: int,
                          run_ends: Sequence[int] | None = None, *,
                          headers: pa.Array | None = None) -> list[RecordsPayload]:
    """The records ``(keys[i], values[i], headers[i])``, all stamped ``timestamp_ms``, encoded
    as :func:`~rafka.logstore.batch.build_batch` encodes them, one payload per run of records:
    records ``0 .. run_ends[0]``, then up to ``run_ends[1]``, and so on (None: one run of them
    all). Keys and values are Arrow binary or string arrays (None: no record has a key); a null
    is a None. Headers are a column `check_headers_column` accepts (None: no record has any; a
    null list: none for that record); a header's value may be null, its name may not.

    One call for many runs costs less than a call per run: each kernel call has a cost of its
    own, that of a few dozen records."""
    count = len(values)
    if count == 0:
        raise ValueError("a batch needs at least one record")
    if keys is not None and len(keys) != count:
        raise ValueError(f"{len(keys)} keys for {count} values")
    if headers is not None and len(headers) != count:
        raise ValueError(f"{len(headers)} records' headers for {count} values")
    if type(timestamp_ms) is not int:
        raise TypeError(f"timestamp_ms must be an int in ms, got {timestamp_ms!r}")
    ends = np.array([count] if run_ends is None else run_ends, dtype=np.int64)
    starts = np.concatenate(([0], ends[:-1]))
    if not len(ends) or ends[-1] != count or (ends <= starts).any():
        raise ValueError(f"run ends must rise to the record count ({count}), got {run_ends}")
    binary = pa.large_binary() if _is_large(values) or (
        keys is not None and _is_large(keys)) else pa.binary()
    values = _as(values, binary)
    offset_deltas = np.arange(count, dtype=np.int64) - np.repeat(starts, ends - starts)
    if keys is None:
        parts = [_as(_keyless_record_starts(offset_deltas), binary)]
    else:
        keys = _as(keys, binary)
        parts = [_as(_record_starts(offset_deltas), binary), _as(_bin_headers(keys), binary),
                 keys]
    record_headers = None if headers is None else _record_headers(headers, binary)
    parts += [_as(_bin_headers(values), binary), values,
              pa.scalar(_RECORD_END, binary) if record_headers is None else record_headers]
    # Each run's array header goes in front of its first record, so that a run's bytes lie
    # end to end in the joined buffer and are handed on without a copy.
    parts.insert(0, _run_headers(starts, ends, count, binary))
    joined = pc.binary_join_element_wise(*parts, pa.scalar(b"", binary),
                                         null_handling="replace", null_replacement=b"")
    record_offsets: np.ndarray = np.frombuffer(joined.buffers()[1], dtype=_offset_type(binary),
                                   count=count + 1, offset=joined.offset * _offset_size(binary))
    data = memoryview(joined.buffers()[2]).cast("B")
    payloads = []
    for start, end in zip(starts.tolist(), ends.tolist(), strict=True):
        first, last = int(record_offsets[start]), int(record_offsets[end])
        # The leader's check by record ends knows records without headers only.
        record_ends = None if record_headers is not None else (
            record_offsets[start + 1:end + 1] - first).astype("<u4").tobytes()
        payloads.append(RecordsPayload(data[first:last], end - start, timestamp_ms,
                                       timestamp_ms, record_ends))
    return payloads


def _run_headers(starts: np.ndarray, ends: np.ndarray, count: int,
                 binary: pa.DataType) -> pa.Array:
    """For each record, its run's array header if it is the run's first record, else empty."""
    headers = [array_header(run) for run in (ends - starts).tolist()]
    lengths = np.zeros(count, dtype=np.int64)
    lengths[starts] = [len(header) for header in headers]
    offsets: np.ndarray = np.zeros(count + 1, dtype=_offset_type(binary))
    np.cumsum(lengths, out=offsets[1:])
    return pa.Array.from_buffers(binary, count, [None, pa.py_buffer(offsets),
                                                 pa.py_buffer(b"".join(headers))])


def _record_headers(headers: pa.Array, binary: pa.DataType) -> pa.Array | None:
    """Each record's headers as msgpack writes them, an array of ``[name, value]`` arrays;
    None if no record has any (every record then ends with an empty array)."""
    check_headers_column(headers)
    names, values, counts = _header_fields(headers)
    if not len(names):
        return None
    if names.null_count:
        raise ValueError("a record header has no name (a null key): Kafka's headers are named")
    names, values = _as(names, binary), _as(values, binary)
    pairs = pc.binary_join_element_wise(
        pa.scalar(_HEADER_START, binary), _as(_str_headers(names), binary), names,
        _as(_bin_headers(values), binary), values, pa.scalar(b"", binary),
        null_handling="replace", null_replacement=b"")
    offsets: np.ndarray = np.zeros(len(counts) + 1, dtype=_offset_type(binary))
    np.cumsum(counts, out=offsets[1:])
    list_type = pa.large_list(binary) if _offset_type(binary) is np.int64 else pa.list_(binary)
    per_record = pa.Array.from_buffers(list_type, len(counts), [None, pa.py_buffer(offsets)],
                                       children=[pairs])
    joined = pc.binary_join(per_record, pa.scalar(b"", binary))
    return pc.binary_join_element_wise(_as(_array_headers(counts), binary), joined,
                                       pa.scalar(b"", binary))


def _header_fields(headers: pa.Array) -> tuple[pa.Array, pa.Array, np.ndarray]:
    """Every record's headers one after the other, as names and values, and how many each
    record has (a null list: none)."""
    counts = pc.list_value_length(headers).fill_null(0).to_numpy().astype(np.int64)
    # Both flatten()s heed a slice and nulls: a null list's items are left out, a null pair's
    # name and value are null.
    pairs = headers.flatten()
    fields = dict(zip([field.name for field in pairs.type], pairs.flatten(), strict=True))
    return fields["key"], fields["value"], counts


def _array_headers(counts: np.ndarray) -> pa.Array:
    """msgpack's header of an array of each count of items."""
    return _looked_up(counts, _array_header_table(), array_header)


def _str_headers(column: pa.Array) -> pa.Array:
    """msgpack's header of each string (a str of its length): a header's name."""
    return _looked_up(binary_lengths(column), _str_header_table(), _str_header)


def _looked_up(numbers: np.ndarray, table: pa.Array, encode: Callable[[int], bytes]) -> pa.Array:
    """``encode(n)`` for each of ``numbers``: picked from ``table`` (``encode`` of 0, 1, ...)
    when every one is in it, else encoded one by one (too rare to cost anything)."""
    if numbers.max(initial=0) >= len(table):
        return pa.array([encode(n) for n in numbers.tolist()], pa.binary())
    return table.take(pa.array(numbers))


def _is_large(column: pa.Array) -> bool:
    return bool(pa.types.is_large_binary(column.type) or pa.types.is_large_string(column.type))


def _as(column: pa.Array, binary: pa.DataType) -> pa.Array:
    """``column`` as ``binary`` (a string array's bytes are its UTF-8): a cast only if needed,
    since every kernel call costs."""
    return column if column.type == binary else column.cast(binary)


def _offset_type(type_: pa.DataType) -> type:
    large = pa.types.is_large_binary(type_) or pa.types.is_large_string(type_)
    return np.int64 if large else np.int32


def _offset_size(type_: pa.DataType) -> int:
    return np.dtype(_offset_type(type_)).itemsize


def _bin_headers(column: pa.Array) -> pa.Array:
    """msgpack's header of each string (a bin of its length), or nil for a null."""
    lengths = binary_lengths(column)
    valid = _valid(column) if column.null_count else None
    if lengths.max() >= _TABLE_SIZE:
        return pa.array([_bin_header(length) if valid is None or valid[i] else _NIL
                         for i, length in enumerate(lengths.tolist())], pa.binary())
    if valid is not None:
        lengths = np.where(valid, lengths, _NIL_AT)
    return _bin_header_table().take(pa.array(lengths))


def _record_starts(offset_deltas: np.ndarray) -> pa.Array:
    """Each record's first bytes: its 5-element array, offset delta and timestamp delta 0."""
    return _looked_up(offset_deltas, _record_start_table(), _record_start)


def _keyless_record_starts(offset_deltas: np.ndarray) -> pa.Array:
    """`_record_starts` followed by a nil key."""
    return _looked_up(offset_deltas, _keyless_record_start_table(),
                      lambda delta: _record_start(delta) + _NIL)


def _record_start(offset_delta: int) -> bytes:
    return b"\x95" + msgpack.packb(offset_delta) + b"\x00"


def _bin_header(length: int) -> bytes:
    """msgpack's header of a bin of ``length`` bytes."""
    if length < 1 << 8:
        return b"\xc4" + length.to_bytes(1, "big")
    if length < 1 << 16:
        return b"\xc5" + length.to_bytes(2, "big")
    return b"\xc6" + length.to_bytes(4, "big")


def _str_header(length: int) -> bytes:
    """msgpack's header of a str of ``length`` bytes."""
    if length < 32:
        return bytes((0xA0 | length,))
    if length < 1 << 8:
        return b"\xd9" + length.to_bytes(1, "big")
    if length < 1 << 16:
        return b"\xda" + length.to_bytes(2, "big")
    return b"\xdb" + length.to_bytes(4, "big")


@cache
def _str_header_table() -> pa.Array:
    return pa.array([_str_header(length) for length in range(_TABLE_SIZE)], pa.binary())


@cache
def _array_header_table() -> pa.Array:
    return pa.array([array_header(count) for count in range(16)], pa.binary())


@cache
def _record_start_table() -> pa.Array:
    return pa.array([_record_start(delta) for delta in range(_TABLE_SIZE)], pa.binary())


@cache
def _keyless_record_start_table() -> pa.Array:
    return pa.array([_record_start(delta) + _NIL for delta in range(_TABLE_SIZE)], pa.binary())


@cache
def _bin_header_table() -> pa.Array:
    return pa.array([*map(_bin_header, range(_TABLE_SIZE)), _NIL], pa.binary())
