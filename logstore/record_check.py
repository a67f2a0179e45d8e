"""Checking a batch's records where their producer says each one ends, with numpy.

A leader checks every record of every batch a producer sends (``batch.validate_batch``):
decoding them with msgpack makes a Python object of each key, value and record, and costs the
leader more than everything else it does with the batch. A producer that encodes from columns
(``record_columns``) knows where each record ends, and sends that beside the batch. This module
checks, for all records at once, that the bytes are at those places exactly what msgpack's
decoder would read as rafka's records -- the array of ``count`` items, then each item a
5-element array of an offset delta equal to its index, a timestamp delta, a key and a value
each bin or nil, and no headers -- and that every record ends where the next begins and the
last at the end of the bytes. A claim that does not hold proves nothing either way: the caller
then decodes the records with msgpack, which finds the real fault (or none).

Only the forms ``record_columns`` writes are recognised (an offset delta as positive fixint or
uint 8/16/32, a timestamp delta as positive fixint, bin 8/16/32 or nil, an empty headers
array); anything else falls back to decoding.
"""

from __future__ import annotations

import numpy as np

__all__ = ["array_header", "records_end_where_claimed"]

_FIXARRAY_5 = 0x95
_EMPTY_ARRAY = 0x90
_NIL = 0xC0
_POSITIVE_FIXINT_END = 0x80


def _width_table(widths: dict[int, int]) -> np.ndarray:
    """By a form's first byte, how many bytes of length or value follow it (-1: not a form
    recognised here). One lookup per record instead of a comparison per form."""
    table = np.full(256, -1, dtype=np.int64)
    for marker, width in widths.items():
        table[marker] = width
    return table


# Positive fixint (the value in the marker itself), uint 8, 16 and 32.
_UINT_WIDTHS = _width_table({**dict.fromkeys(range(_POSITIVE_FIXINT_END), 0),
                             0xCC: 1, 0xCD: 2, 0xCE: 4})
# nil, bin 8, 16 and 32.
_BIN_OR_NIL_WIDTHS = _width_table({_NIL: 0, 0xC4: 1, 0xC5: 2, 0xC6: 4})


def records_end_where_claimed(records: memoryview, count: int, record_ends: bytes, *,
                              require_keys: bool = False) -> tuple[bool, int]:
    """Whether ``records`` (a batch's msgpack array, uncompressed) holds ``count`` records
    without headers that end at ``record_ends`` (little-endian uint32 offsets into
    ``records``), each as a consumer reads it; and if so, the largest timestamp delta.

    ``require_keys``: and none of them lacks a key. ``(False, 0)`` when any of it does not
    hold."""
    # A claim of the wrong type or size is no claim: checked before any of it is read.
    if (count < 1 or not isinstance(record_ends, bytes | bytearray | memoryview)
            or len(record_ends) != 4 * count):
        return False, 0
    ends = np.frombuffer(record_ends, dtype="<u4").astype(np.int64)
    data = np.frombuffer(records, dtype=np.uint8)
    if not len(data) or ends[-1] != len(data):
        return False, 0
    header = array_header(count)
    if bytes(records[:len(header)]) != header:
        return False, 0
    starts = np.empty(count, dtype=np.int64)
    starts[0] = len(header)
    starts[1:] = ends[:-1]
    if (ends <= starts).any():
        return False, 0
    # Reads past a record stay inside the bytes; the chain of ends refuses such a record.
    last = len(data) - 1
    ok = data[starts] == _FIXARRAY_5
    offset_deltas, at, fits = _uint(data, starts + 1, last)
    ok &= fits & (offset_deltas == np.arange(count))
    timestamp_deltas = data[np.minimum(at, last)].astype(np.int64)
    ok &= timestamp_deltas < _POSITIVE_FIXINT_END
    key_is_nil = data[np.minimum(at + 1, last)] == _NIL
    at, fits = _bin_or_nil(data, at + 1, last)
    ok &= fits
    if require_keys:
        ok &= ~key_is_nil
    at, fits = _bin_or_nil(data, at, last)
    ok &= fits & (data[np.minimum(at, last)] == _EMPTY_ARRAY) & (at + 1 == ends)
    if not ok.all():
        return False, 0
    return True, int(timestamp_deltas.max())


def _uint(data: np.ndarray, at: np.ndarray, last: int) -> tuple[np.ndarray, np.ndarray,
                                                                    np.ndarray]:
    """The unsigned int at each position (positive fixint, uint 8, 16 or 32): its value,
    where it ends, and whether it is one of those forms."""
    marker = data[np.minimum(at, last)]
    widths = _UINT_WIDTHS[marker]
    value = np.where(widths == 0, marker, _big_endian(data, at + 1, widths, last))
    return value, at + 1 + np.maximum(widths, 0), widths >= 0


def _bin_or_nil(data: np.ndarray, at: np.ndarray, last: int) -> tuple[np.ndarray, np.ndarray]:
    """Where the bin or nil at each position ends, and whether it is one."""
    widths = _BIN_OR_NIL_WIDTHS[data[np.minimum(at, last)]]
    lengths = _big_endian(data, at + 1, widths, last)
    return at + 1 + np.maximum(widths, 0) + lengths, widths >= 0


def _big_endian(data: np.ndarray, at: np.ndarray, widths: np.ndarray,
                last: int) -> np.ndarray:
    """The unsigned big-endian int of ``widths`` bytes (0 to 4) at each position."""
    value = np.zeros(len(at), dtype=np.int64)
    for byte in range(int(widths.max(initial=0))):
        present = byte < widths
        value = np.where(present, (value << 8) | data[np.minimum(at + byte, last)], value)
    return value


def array_header(count: int) -> bytes:
    """msgpack's header of an array of ``count`` items."""
    if count < 16:
        return bytes((0x90 | count,))
    if count < 1 << 16:
        return b"\xdc" + count.to_bytes(2, "big")
    return b"\xdd" + count.to_bytes(4, "big")
