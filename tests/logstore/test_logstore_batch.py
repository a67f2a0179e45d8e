"""Record batch codec: layout, round trips, validation of untrusted bytes, stamping."""

from __future__ import annotations

import struct
import time
import tracemalloc
import zlib
from collections import namedtuple
from dataclasses import dataclass

import msgpack
import pytest
from hypothesis import given
from hypothesis import strategies as st

from rafka.logstore.batch import (
    HEADER_SIZE,
    LOG_APPEND_TIME,
    Record,
    batch_size,
    build_batch,
    check_headers,
    decode_batches,
    decode_columns,
    decode_records,
    encode_batch,
    frame_whole_batches,
    iter_batches,
    new_header,
    read_header,
    split_batches,
    stamp_batch,
    validate_batch,
    validate_batches,
)
from rafka.logstore.errors import CorruptRecordError, InvalidRecordError, RecordTooLargeError
from tests.support.logstore import SMALL, T0, batch_of

CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]
MAX = 1 << 20

records_strategy = st.lists(
    st.tuples(
        st.none() | st.binary(max_size=40),
        st.none() | st.binary(max_size=200),
        st.integers(min_value=0, max_value=2**41),
        st.lists(st.tuples(st.text(max_size=8), st.binary(max_size=8)), max_size=3),
    ),
    min_size=1,
    max_size=60,
)


@SMALL
@given(records=records_strategy, codec=st.sampled_from(CODECS))
def test_round_trip_for_every_codec(records: list, codec: str) -> None:
    data = build_batch(
        records, compression=codec, producer_id=7, producer_epoch=2, base_sequence=40
    )
    header = validate_batch(data, MAX)
    assert header.record_count == len(records)
    assert header.last_offset_delta == len(records) - 1
    assert header.max_timestamp == max(r[2] for r in records)
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (7, 2, 40)
    assert header.last_sequence == 40 + len(records) - 1
    stamped = stamp_batch(data, 1000, 5)
    decoded = decode_records(stamped)
    assert decoded == [
        Record(1000 + i, ts, key, value, tuple(tuple(h) for h in headers))
        for i, (key, value, ts, headers) in enumerate(records)
    ]


def test_header_layout_is_exactly_the_design() -> None:
    data = build_batch([(b"k", b"v", T0, None), (None, b"w", T0 + 5, None)], compression="zstd")
    stamped = stamp_batch(data, 42, 3)
    fields = struct.unpack_from(">qiibIhiqqqhii", stamped)
    (base, length, epoch, magic, crc, attributes, last_delta, first_ts, max_ts, pid, pepoch,
     seq, count) = fields
    assert HEADER_SIZE == 61
    assert (base, length, epoch, magic) == (42, len(stamped) - 12, 3, 2)
    assert crc == zlib.crc32(stamped[21:])
    assert attributes & 0x07 == 4  # zstd, Kafka's codec id
    assert (last_delta, first_ts, max_ts, pid, pepoch, seq, count) == (
        1, T0, T0 + 5, -1, -1, -1, 2
    )
    records = msgpack.unpackb(__import__("zstandard").ZstdDecompressor().decompress(stamped[61:]))
    assert records == [[0, 0, b"k", b"v", []], [1, 5, None, b"w", []]]


def test_build_accepts_producer_record_objects_and_short_tuples() -> None:
    @dataclass
    class ProducerRecord:
        key: bytes | None
        value: bytes | None
        timestamp_ms: int | None = None
        headers: list | None = None

    data = build_batch([ProducerRecord(b"a", b"1", T0, [("h", b"x")]), ProducerRecord(None, b"2")])
    first, second = decode_records(data)
    assert (first.key, first.value, first.timestamp) == (b"a", b"1", T0)
    assert first.headers == (("h", b"x"),)
    assert second.timestamp > T0  # a missing timestamp means "now"
    assert decode_records(build_batch([(b"k", b"v")]))[0].value == b"v"


@pytest.mark.parametrize(
    "record",
    [("k", b"v", T0, None), (b"k", "v", T0, None), (b"k", b"v", 1.5, None), (b"k", b"v", T0, [1])],
)
def test_build_refuses_wrong_types(record: tuple) -> None:
    with pytest.raises(TypeError):
        build_batch([record])


def test_build_refuses_empty_batch_and_unknown_codec() -> None:
    with pytest.raises(ValueError):
        build_batch([])
    with pytest.raises(ValueError, match="brotli"):
        build_batch([(b"k", b"v", T0, None)], compression="brotli")


def test_build_a_thousand_records_is_fast() -> None:
    records = [(None, b"x" * 100, T0 + i, None) for i in range(1000)]
    best = float("inf")
    for _ in range(5):
        started = time.perf_counter()
        build_batch(records)
        best = min(best, time.perf_counter() - started)
    # The brief asks for well under ~1 ms; allow slack for a loaded two-core machine.
    assert best < 0.005, f"building 1,000 records took {best * 1e3:.2f} ms"


# ------------------------------------------------------------------------------- validation


def _with_crc(buf: bytearray) -> bytes:
    struct.pack_into(">I", buf, 17, zlib.crc32(buf[21:]))
    return bytes(buf)


def test_validate_rejects_bad_crc_magic_and_lengths() -> None:
    good = batch_of(3)
    flipped = bytearray(good)
    flipped[-1] ^= 0x01
    with pytest.raises(CorruptRecordError, match="CRC"):
        validate_batch(bytes(flipped), MAX)
    bad_magic = bytearray(good)
    bad_magic[16] = 1
    with pytest.raises(CorruptRecordError, match="magic"):
        validate_batch(bytes(bad_magic), MAX)
    for length in (-1, 0, 48):
        bad = bytearray(good)
        struct.pack_into(">i", bad, 8, length)
        with pytest.raises(CorruptRecordError, match="length"):
            validate_batch(bytes(bad), MAX)
    with pytest.raises(CorruptRecordError, match="truncated"):
        validate_batch(good[:-1], MAX)
    with pytest.raises(CorruptRecordError, match="unexpected bytes"):
        validate_batch(good + b"\0", MAX)
    with pytest.raises(CorruptRecordError):
        validate_batch(good[:10], MAX)


def test_validate_rejects_too_large_against_max_message_bytes() -> None:
    data = batch_of(10, value_size=100)
    assert validate_batch(data, len(data)).size == len(data)
    with pytest.raises(RecordTooLargeError, match=r"max\.message\.bytes"):
        validate_batch(data, len(data) - 1)


def test_validate_rejects_inconsistent_counts() -> None:
    good = bytearray(batch_of(3))
    for field_pos, value in ((57, 4), (57, 0), (23, 5)):  # record_count, last_offset_delta
        bad = bytearray(good)
        struct.pack_into(">i", bad, field_pos, value)
        with pytest.raises(CorruptRecordError):
            validate_batch(_with_crc(bad), MAX)


def _raw_batch(entries: list, *, max_ts: int = T0, count: int | None = None) -> bytes:
    return encode_batch(entries, new_header(
        attributes=0, last_offset_delta=(count or len(entries)) - 1, first_timestamp=T0,
        max_timestamp=max_ts))


@pytest.mark.parametrize(
    "entries",
    [
        [(0, 0, b"k", "text value", ())],  # a str where bytes belong
        [(0, 0, b"k", b"v")],  # four fields
        [(1, 0, b"k", b"v", ())],  # offset delta not 0
        [(0, 0, b"k", b"v", ()), (0, 0, b"k", b"v", ())],  # repeated delta
        [(0, 0.5, b"k", b"v", ())],  # float timestamp delta
        [(0, 0, b"k", b"v", (("h", "not bytes"),))],
        # A good first record, then a malformed one: the leader used to look at the first only.
        [(0, 0, b"k", b"v", ()), (1, 0, 7, b"v", ())],  # an int key
        [(0, 0, b"k", b"v", ()), (1, 0, b"k", b"v")],  # four fields
        [(0, 0, b"k", b"v", ()), b"not a record"],
        [(0, 0, b"k", b"v", ()), (1, 0, b"k", b"v", (("h", b"v", b"extra"),))],
        [(0, 0, b"k", b"v", ()), (1, 0, b"k", b"v", "not an array")],
        [(0, 0, b"k", b"v", ()), (1, 0, b"k", b"v", ((b"bytes name", b"v"),))],
    ],
)
def test_validate_checks_every_record(entries: list) -> None:
    batch = _raw_batch(entries)
    with pytest.raises(CorruptRecordError):
        validate_batch(batch, MAX)


def _crc_valid_batch(payload: bytes, *, count: int = 1, codec: int = 0) -> bytes:
    """A batch whose header and CRC are right for ``count`` records, with ``payload`` as its
    records, whatever those bytes are (what a buggy or hostile client could send)."""
    tail = struct.pack(">hiqqqhii", codec, count - 1, T0, T0, -1, -1, -1, count)
    crc = zlib.crc32(payload, zlib.crc32(tail))
    return struct.pack(">qiibI", 0, 49 + len(payload), -1, 2, crc) + tail + payload


@pytest.mark.parametrize(
    ("payload", "count", "codec", "problem"),
    [
        (b"\xc1" * 40, 1, 0, "not valid msgpack"),  # not msgpack at all
        (b"\xa5hello" + bytes(20), 1, 0, "not valid msgpack"),  # a msgpack str, then junk
        (msgpack.packb([(0, 0, None, b"v", ())] * 2), 3, 0, "decode to 2"),  # count disagrees
        (msgpack.packb([(0, 0, None, b"v", ())] * 20), 21, 0, "decode to 20"),  # array 16
        (b"\xdd\x00\x01\x00\x00" + bytes(30), 65536, 0, "not valid msgpack"),  # claims 65536
        (b"\x91", 1, 0, "not valid msgpack"),  # an array header and nothing else
        (msgpack.packb([b"not a record"]), 1, 0, "every record is"),
        (msgpack.packb([(0, 0, None, b"v", ())]), 1, 1, "gzip"),  # says gzip, is not
        (b"\x1f\x8b" + bytes(10), 1, 3, "lz4"),  # gzip's magic, lz4 in the header
        (msgpack.packb([(0, 0, None, b"v", ())]), 1, 2, "snappy"),  # says snappy, is not
        (b"\x82SNAPPY\x00" + bytes(8) + b"\x00\x00\x01\x00x", 1, 2, "snappy"),  # cut block
        (b"", 1, 0, "not valid msgpack"),  # no records at all
    ],
)
def test_the_leaders_check_refuses_crc_valid_garbage(
    payload: bytes, count: int, codec: int, problem: str
) -> None:
    batch = _crc_valid_batch(payload, count=count, codec=codec)
    with pytest.raises(CorruptRecordError, match=problem):
        validate_batch(batch, MAX)


@SMALL
@given(records=records_strategy, codec=st.sampled_from(CODECS))
def test_the_leaders_check_accepts_every_batch_a_producer_builds(
    records: list, codec: str
) -> None:
    batch = build_batch(records, compression=codec)
    assert validate_batch(batch, MAX).record_count == len(records)


@SMALL
@given(records=records_strategy, codec=st.sampled_from(CODECS))
def test_records_the_producer_checked_encode_as_records_checked_by_the_encoder(
    records: list, codec: str
) -> None:
    """The producer checks each record in `send` and tells `build_batch` so: the bytes are the
    same as when the encoder checks them itself."""
    as_queued = [(key, value, timestamp, check_headers(headers) or None)
                 for key, value, timestamp, headers in records]
    assert (build_batch(as_queued, compression=codec, base_sequence=3, checked=True)
            == build_batch(records, compression=codec, base_sequence=3))


@SMALL
@given(garbage=st.binary(min_size=1, max_size=200), count=st.integers(1, 20))
def test_crc_valid_garbage_never_passes_as_records_a_consumer_cannot_decode(
    garbage: bytes, count: int
) -> None:
    """Whatever the leader's check lets through, a consumer decodes."""
    batch = _crc_valid_batch(garbage, count=count)
    try:
        validate_batch(batch, MAX)
    except CorruptRecordError:
        return
    assert len(decode_records(batch)) == count


def test_validate_checks_max_timestamp_and_record_count() -> None:
    with pytest.raises(CorruptRecordError, match="max_timestamp"):
        validate_batch(_raw_batch([(0, 0, b"k", b"v", ()), (1, 9, b"k", b"v", ())]), MAX)
    with pytest.raises(CorruptRecordError, match="records"):
        validate_batch(_raw_batch([(0, 0, b"k", b"v", ())], count=2), MAX)
    not_msgpack = bytearray(_raw_batch([(0, 0, b"k", b"v", ())]))
    not_msgpack[61:] = b"\xc1" * (len(not_msgpack) - 61)  # 0xc1 is never valid msgpack
    with pytest.raises(CorruptRecordError, match="msgpack"):
        validate_batch(_with_crc(not_msgpack), MAX)


def test_compacted_topics_require_keys() -> None:
    keyless = build_batch([(None, b"v", T0, None)])
    validate_batch(keyless, MAX)
    with pytest.raises(InvalidRecordError, match="key"):
        validate_batch(keyless, MAX, require_keys=True)
    validate_batch(batch_of(2), MAX, require_keys=True)


@pytest.mark.parametrize("codec", ["gzip", "lz4", "zstd"])
def test_decompression_is_bounded_against_bombs(codec: str) -> None:
    bomb = build_batch([(b"k", bytes(64 << 20), T0, None)], compression=codec)
    max_size = 300 << 10
    assert len(bomb) < max_size  # small on the wire (lz4 compresses zeros the least)...
    tracemalloc.start()
    try:
        with pytest.raises(RecordTooLargeError, match="decompressed"):
            validate_batch(bomb, max_size)  # ...but 64 MiB once decompressed: refused
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    # The bound is 32 x max.message.bytes = 9.4 MiB (zlib may grow its buffer to twice that);
    # nothing near the 64 MiB the bomb expands to was allocated.
    assert peak < 24 << 20, f"validation allocated {peak} bytes"
    with pytest.raises(RecordTooLargeError):
        decode_records(bomb, max_decompressed_size=1 << 20)


def test_a_snappy_block_claiming_more_than_the_bound_is_refused_unread() -> None:
    # Snappy compresses at most about 21:1, inside the bound of 32 x max.message.bytes, so its
    # bomb is a block whose length prefix lies: this one claims 4 GiB in 11 bytes.
    block = b"\xff\xff\xff\xff\x0f" + bytes(6)
    bomb = _crc_valid_batch(b"\x82SNAPPY\x00" + struct.pack(">iii", 1, 1, len(block)) + block,
                            codec=2)
    tracemalloc.start()
    try:
        with pytest.raises(RecordTooLargeError, match="decompressed"):
            validate_batch(bomb, MAX)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 1 << 20, f"validation allocated {peak} bytes"


def test_truncated_compressed_records_are_corrupt() -> None:
    for codec in ("gzip", "snappy", "lz4"):
        data = bytearray(batch_of(50, compression=codec))
        cut = bytearray(data[:-8])
        struct.pack_into(">i", cut, 8, len(cut) - 12)
        with pytest.raises(CorruptRecordError):
            validate_batch(_with_crc(cut), MAX)


def test_validate_batches_takes_several_and_refuses_a_partial_tail() -> None:
    a, b = batch_of(2), batch_of(3, start=2)
    headers = validate_batches(a + b, MAX)
    assert [h.record_count for h in headers] == [2, 3]
    with pytest.raises(CorruptRecordError):
        validate_batches(a + b[:30], MAX)
    with pytest.raises(CorruptRecordError):
        validate_batches(b"", MAX)


# --------------------------------------------------------------------------------- stamping


def test_stamp_sets_offset_and_epoch_without_touching_the_crc() -> None:
    data = batch_of(4)
    before = read_header(data)
    stamped = stamp_batch(data, 123_456, 9)
    after = read_header(stamped)
    assert (after.base_offset, after.leader_epoch) == (123_456, 9)
    assert after.crc == before.crc
    assert stamped[16:] == data[16:]  # every byte from magic on is unchanged
    validate_batch(stamped, MAX)
    assert [r.offset for r in decode_records(stamped)] == [123_456 + i for i in range(4)]
    assert after.last_offset == 123_459 and after.next_offset == 123_460


def test_stamp_in_place_on_a_bytearray() -> None:
    buf = bytearray(batch_of(2))
    assert stamp_batch(buf, 77, 1) is buf
    assert read_header(buf).base_offset == 77


def test_stamp_log_append_time_recomputes_the_crc() -> None:
    data = batch_of(3, ts=T0)
    stamped = stamp_batch(data, 10, 2, log_append_time_ms=T0 + 999)
    header = validate_batch(stamped, MAX)
    assert header.timestamp_type == LOG_APPEND_TIME
    assert header.max_timestamp == T0 + 999
    assert header.crc != read_header(data).crc
    assert [r.timestamp for r in decode_records(stamped)] == [T0 + 999] * 3


# ---------------------------------------------------------------------------------- reading


def test_iter_batches_ignores_a_partial_trailing_batch() -> None:
    a, b, c = (stamp_batch(batch_of(2, start=i * 2), i * 2, 0) for i in range(3))
    whole = a + b + c
    assert [h.base_offset for h, _ in iter_batches(whole)] == [0, 2, 4]
    assert [h.base_offset for h, _ in iter_batches(whole[:-1])] == [0, 2]
    assert [h.base_offset for h, _ in iter_batches(whole[: len(a) + 20])] == [0]
    assert [bytes(v) for _, v in iter_batches(whole)] == [a, b, c]


def test_split_batches_frames_an_append_and_refuses_a_partial_batch() -> None:
    a, b = (bytes(stamp_batch(batch_of(2, start=i * 2), i * 2, 0)) for i in range(2))
    assert [(h.base_offset, bytes(v)) for h, v in split_batches(a + b, verify_crc=True)] == [
        (0, a),
        (2, b),
    ]
    assert split_batches(b"", verify_crc=True) == []
    for cut in (len(a) + 20, len(a) + HEADER_SIZE + 1, len(a + b) - 1):
        with pytest.raises(CorruptRecordError):
            split_batches((a + b)[:cut], verify_crc=False)
    damaged = bytearray(a)
    damaged[-1] ^= 1
    assert split_batches(bytes(damaged), verify_crc=False)  # only the framing and header
    with pytest.raises(CorruptRecordError, match="CRC"):
        split_batches(bytes(damaged), verify_crc=True)
    with pytest.raises(CorruptRecordError, match="length"):
        split_batches(struct.pack(">qi", 0, 3) + bytes(HEADER_SIZE), verify_crc=False)


def test_frame_whole_batches_stops_at_a_cut_or_at_max_offset() -> None:
    a, b, c = (bytes(stamp_batch(batch_of(2, start=i * 2), i * 2, 0)) for i in range(3))
    whole = a + b + c
    assert frame_whole_batches(whole) == (len(whole), 6, False)
    assert frame_whole_batches(whole[:-1]) == (len(a + b), 4, False)
    assert frame_whole_batches(whole, max_offset=3) == (len(a), 2, True)
    assert frame_whole_batches(whole, max_offset=1) == (0, None, True)
    assert frame_whole_batches(whole[:10]) == (0, None, False)
    assert batch_size(whole, len(a)) == len(b)


def test_decode_batches_skips_records_below_min_offset() -> None:
    buf = stamp_batch(batch_of(5), 100, 0) + stamp_batch(batch_of(5, start=5), 105, 0)
    assert [r.offset for r in decode_batches(buf, 103)] == [103, 104, 105, 106, 107, 108, 109]
    assert [r.offset for r in decode_batches(buf, 106)] == [106, 107, 108, 109]
    assert decode_batches(buf, 110) == []
    assert decode_records(buf[: read_header(buf).size])[0].key == b"key-0"


def test_decode_verifies_the_crc_by_default() -> None:
    buf = bytearray(stamp_batch(batch_of(5), 0, 0))
    buf[70] ^= 0xFF
    with pytest.raises(CorruptRecordError, match="CRC"):
        decode_batches(bytes(buf))
    with pytest.raises(CorruptRecordError):
        decode_records(bytes(buf))


# A consumer's own record type.
Fetched = namedtuple("Fetched", "topic partition offset timestamp key value headers")


def test_decode_batches_builds_the_callers_record_type_with_topic_and_partition() -> None:
    first = stamp_batch(build_batch([(b"a", b"1", 1000, None), (None, b"2", 1005, None)]), 40, 3)
    second = stamp_batch(build_batch([(None, b"3", 1010, [("h", b"x")])]), 42, 3)
    plain = decode_batches(first + second, min_offset=41)
    typed = decode_batches(first + second, min_offset=41, topic_partition=("clicks", 7),
                           record_type=Fetched)
    assert [type(r) for r in typed] == [Fetched, Fetched]
    assert typed == [Fetched("clicks", 7, *record) for record in plain]
    assert [(r.offset, r.timestamp, r.value, r.headers) for r in typed] == [
        (41, 1005, b"2", ()), (42, 1010, b"3", (("h", b"x"),))]


@SMALL
@given(batches=st.lists(records_strategy, min_size=1, max_size=4),
       codec=st.sampled_from(CODECS), low=st.integers(0, 250), span=st.integers(0, 250),
       log_append_time=st.booleans())
def test_decode_columns_holds_what_decode_batches_decodes(
    batches: list, codec: str, low: int, span: int, log_append_time: bool
) -> None:
    buf, offset = b"", 0
    for records in batches:
        data = build_batch(records, compression=codec)
        buf += stamp_batch(data, offset, 0,
                           log_append_time_ms=T0 + offset if log_append_time else None)
        offset += len(records)
    high = low + span
    expected = [r for r in decode_batches(buf) if low <= r.offset < high]
    columns = decode_columns(buf, low, high)
    rebuilt = [
        Record(batch.base_offset + delta,
               batch.max_timestamp if batch.timestamp_type == LOG_APPEND_TIME
               else batch.first_timestamp + ts_delta, key, value, headers)
        for batch in columns
        for delta, ts_delta, key, value, headers in zip(
            batch.offset_deltas, batch.timestamp_deltas, batch.keys, batch.values,
            batch.headers, strict=True)
    ]
    assert rebuilt == expected
    assert all(batch.offset_deltas for batch in columns)  # no empty batches handed out


def test_decode_columns_refuses_records_of_the_wrong_shape() -> None:
    good = stamp_batch(batch_of(3), 0, 0)
    header = read_header(good)
    payload = msgpack.packb([[0, 0, None, b"v"], [1, 0, None, b"v"], [2, 0, None, b"v"]])
    body = struct.pack(">hiqqqhii", header.attributes, header.last_offset_delta,
                       header.first_timestamp, header.max_timestamp, -1, -1, -1, 3) + payload
    framed = struct.pack(">qiib", 0, len(body) + 9, 0, 2) + struct.pack(
        ">I", zlib.crc32(body)) + body
    with pytest.raises(CorruptRecordError, match="wrong shape"):
        decode_columns(framed)
