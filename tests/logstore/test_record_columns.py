"""Records encoded from Arrow columns: byte for byte what `build_batch` writes for the same
records, so leaders, followers and consumers cannot tell the two apart; and the leader's check
of them where their producer says each ends, which must accept exactly what decoding them
accepts."""

from __future__ import annotations

import msgpack
import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rafka.logstore.batch import (
    RecordsPayload,
    build_batch,
    decode_records,
    frame_batch,
    validate_batch,
)
from rafka.logstore.errors import CorruptRecordError, InvalidRecordError
from rafka.logstore.record_check import records_end_where_claimed
from rafka.logstore.record_columns import (
    binary_lengths,
    check_headers_column,
    encode_binary_records,
    header_lengths,
)

# Lengths around msgpack's bin 8 / bin 16 boundaries, and empty and null strings.
maybe_bytes = st.one_of(
    st.none(),
    st.binary(max_size=3),
    st.integers(250, 260).map(lambda n: b"v" * n),
)


def expected_records(keys: list[bytes | None] | None, values: list[bytes | None],
                     start: int, end: int) -> bytes:
    return msgpack.packb([(i - start, 0, None if keys is None else keys[i], values[i], ())
                          for i in range(start, end)], use_bin_type=True)


@settings(max_examples=60, deadline=None)
@given(data=st.data(), count=st.integers(1, 300), keyed=st.booleans(),
       large=st.booleans())
def test_columns_encode_to_the_bytes_build_batch_writes(data, count, keyed, large) -> None:
    values = data.draw(st.lists(maybe_bytes, min_size=count, max_size=count))
    keys = data.draw(st.lists(maybe_bytes, min_size=count, max_size=count)) if keyed else None
    cuts = data.draw(st.sets(st.integers(1, count - 1), max_size=4)) if count > 1 else set()
    run_ends = sorted(cuts | {count})
    binary = pa.large_binary() if large else pa.binary()

    payloads = encode_binary_records(pa.array(values, binary),
                                     None if keys is None else pa.array(keys, pa.binary()),
                                     1_700_000_000_000, run_ends)

    assert [payload.count for payload in payloads] == [
        end - start for start, end in zip([0, *run_ends[:-1]], run_ends, strict=True)]
    start = 0
    for payload, end in zip(payloads, run_ends, strict=True):
        assert payload.data == expected_records(keys, values, start, end)
        records = [(None if keys is None else keys[i], values[i], 1_700_000_000_000, None)
                   for i in range(start, end)]
        framed = frame_batch(payload, producer_id=9, producer_epoch=0, base_sequence=start)
        assert framed == build_batch(records, producer_id=9, producer_epoch=0,
                                     base_sequence=start)
        start = end


def test_offset_deltas_and_lengths_past_one_byte_and_two() -> None:
    # 300 records (offset deltas 128 and 256 need uint 8 and uint 16), a value of 70,000 bytes
    # (bin 32, beyond the header table) and a null among them.
    values = [b"x" * (70_000 if i == 5 else i % 3) for i in range(300)]
    values[7] = None
    keys = [None if i % 2 else b"k%d" % i for i in range(300)]
    [payload] = encode_binary_records(pa.array(values), pa.array(keys), 5)
    assert payload.data == expected_records(keys, values, 0, 300)
    batch = frame_batch(payload)
    validate_batch(batch, 1 << 20)
    decoded = decode_records(batch)
    assert [(r.offset, r.key, r.value) for r in decoded] == [
        (i, keys[i], values[i]) for i in range(300)]


def test_sliced_string_columns_encode_their_own_rows() -> None:
    whole = pa.array(["zero", None, "двa", "", "four"])
    part = whole.slice(1, 3)  # a slice keeps its parent's buffers, from an offset
    [payload] = encode_binary_records(part, part, 5)
    assert payload.data == expected_records(
        [None, "двa".encode(), b""], [None, "двa".encode(), b""], 0, 3)
    assert binary_lengths(part).tolist() == [0, len("двa".encode()), 0]


@pytest.mark.parametrize(("values", "keys", "timestamp", "run_ends", "error", "match"), [
    (pa.array([], pa.binary()), None, 5, None, ValueError, "at least one record"),
    (pa.array([b"a", b"b"]), pa.array([b"k"]), 5, None, ValueError, "1 keys for 2 values"),
    (pa.array([b"a"]), None, 5.0, None, TypeError, "timestamp_ms must be an int"),
    (pa.array([b"a", b"b"]), None, 5, [1], ValueError, "rise to the record count"),
    (pa.array([b"a", b"b"]), None, 5, [1, 1, 2], ValueError, "rise to the record count"),
])
def test_bad_input_is_refused_with_a_typed_error(values, keys, timestamp, run_ends, error,
                                                 match) -> None:
    with pytest.raises(error, match=match):
        encode_binary_records(values, keys, timestamp, run_ends)


# ----------------------------------------------------------------------------------- headers

SPARK_HEADERS = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))
# Names around msgpack's fixstr / str 8 / str 16 boundaries, multi-byte characters among them.
header_names = st.one_of(st.text(max_size=3), st.integers(28, 36).map(lambda n: "n" * n),
                         st.integers(250, 260).map(lambda n: "é" * (n // 2)))
record_headers = st.one_of(
    st.none(),
    st.lists(st.tuples(header_names, maybe_bytes), max_size=3),
    st.integers(14, 18).map(lambda n: [(f"h{i}", b"v") for i in range(n)]),  # fixarray's end
)


def headers_column(rows: list[list[tuple[str, bytes | None]] | None],
                   type_: pa.DataType = SPARK_HEADERS) -> pa.Array:
    return pa.array([None if row is None else [{"key": k, "value": v} for k, v in row]
                     for row in rows], type_)


@settings(max_examples=60, deadline=None)
@given(data=st.data(), count=st.integers(1, 40), keyed=st.booleans(), large=st.booleans(),
       sliced=st.booleans())
def test_records_with_headers_encode_to_the_bytes_build_batch_writes(data, count, keyed, large,
                                                                     sliced) -> None:
    values = data.draw(st.lists(maybe_bytes, min_size=count, max_size=count))
    keys = data.draw(st.lists(maybe_bytes, min_size=count, max_size=count)) if keyed else None
    rows = data.draw(st.lists(record_headers, min_size=count, max_size=count))
    cut = data.draw(st.integers(1, count)) if count > 1 else count
    binary = pa.large_binary() if large else pa.binary()
    column = headers_column(rows)
    if sliced:  # a slice of a longer column, as a Spark batch's rows picked for one partition
        column = headers_column([[("before", b"x")], *rows, None]).slice(1, count)

    payloads = encode_binary_records(pa.array(values, binary),
                                     None if keys is None else pa.array(keys, pa.binary()),
                                     1_700_000_000_000, sorted({cut, count}), headers=column)

    start = 0
    for payload, end in zip(payloads, sorted({cut, count}), strict=True):
        records = [(None if keys is None else keys[i], values[i], 1_700_000_000_000, rows[i])
                   for i in range(start, end)]
        assert frame_batch(payload) == build_batch(records)
        batch = frame_batch(payload)
        validate_batch(batch, 1 << 20, record_ends=payload.record_ends)
        assert [list(r.headers) for r in decode_records(batch)] == [
            list(rows[i] or ()) for i in range(start, end)]
        start = end
    assert header_lengths(column, 4).tolist() == [
        sum(len(name.encode()) + len(value or b"") + 4 for name, value in row or ())
        for row in rows]


def test_headers_with_string_values_and_none_at_all_encode_as_without() -> None:
    strings = pa.list_(pa.struct([("key", pa.string()), ("value", pa.string())]))
    [with_strings] = encode_binary_records(
        pa.array([b"a", b"b"]), None, 5, headers=headers_column([[("n", "é")], None], strings))
    assert with_strings.data == msgpack.packb(
        [(0, 0, None, b"a", [("n", "é".encode())]), (1, 0, None, b"b", ())], use_bin_type=True)
    assert with_strings.record_ends is None  # the leader decodes records with headers
    [empty] = encode_binary_records(pa.array([b"a", b"b"]), None, 5,
                                    headers=headers_column([[], None]))
    [without] = encode_binary_records(pa.array([b"a", b"b"]), None, 5)
    assert empty == without  # the same bytes, and the same claim of where records end


@pytest.mark.parametrize(("count", "headers", "error", "match"), [
    (1, pa.array([["k"]]), TypeError, "list of structs of a string key"),
    (1, pa.array([[{"key": 1, "value": b"v"}]]), TypeError, "list of structs of a string key"),
    (2, headers_column([[("k", b"v")]]), ValueError, "1 records' headers for 2 values"),
    (1, pa.array([[{"key": None, "value": b"v"}]], SPARK_HEADERS), ValueError, "no name"),
    (1, pa.array([[None]], SPARK_HEADERS), ValueError, "no name"),
])
def test_bad_headers_are_refused_with_a_typed_error(count, headers, error, match) -> None:
    with pytest.raises(error, match=match):
        encode_binary_records(pa.array([b"a"] * count), None, 5, headers=headers)


def test_only_spark_shaped_headers_columns_are_taken() -> None:
    check_headers_column(headers_column([[("k", b"v")]]))
    for column in (pa.array([b"k"]), [("k", b"v")], pa.array([[{"name": "k", "value": b"v"}]])):
        with pytest.raises(TypeError, match="Spark's array<struct<key, value>>"):
            check_headers_column(column)


# ----------------------------------------------------------------- the leader's check by ends


def outcome(check) -> str:
    """What a validation did: accepted, or which error it raised."""
    try:
        check()
    except (CorruptRecordError, InvalidRecordError) as error:
        return type(error).__name__
    return "accepted"


def test_records_are_checked_where_the_producer_says_they_end() -> None:
    values = [b"v" * (i % 300) for i in range(1000)]
    [payload] = encode_binary_records(pa.array(values), pa.array([b"k"] * 1000), 7)
    records = memoryview(payload.data)
    assert records_end_where_claimed(records, 1000, payload.record_ends) == (True, 0)
    assert records_end_where_claimed(records, 1000, payload.record_ends,
                                     require_keys=True) == (True, 0)
    ends = np.frombuffer(payload.record_ends, "<u4")
    wrong = [ends[:-1].tobytes(), (ends + 1).tobytes(), np.roll(ends, 1).tobytes(), b"",
             b"\0" * 4 * 10**6, "not bytes", list(ends)]
    for claim in wrong:
        assert records_end_where_claimed(records, 1000, claim) == (False, 0)
    [keyless] = encode_binary_records(pa.array([b"a", None]), pa.array([b"k", None]), 7)
    assert records_end_where_claimed(memoryview(keyless.data), 2, keyless.record_ends,
                                     require_keys=True) == (False, 0)


@settings(max_examples=300, deadline=None)
@given(data=st.data(), count=st.integers(1, 40), keyed=st.booleans(),
       require_keys=st.booleans())
def test_the_check_by_ends_accepts_exactly_what_decoding_accepts(data, count, keyed,
                                                                 require_keys) -> None:
    # A corrupt batch with a correct CRC (its producer's bug, or a hostile one) and claimed
    # ends right or wrong: the leader's answer is the same as when it decodes every record.
    values = data.draw(st.lists(maybe_bytes, min_size=count, max_size=count))
    keys = data.draw(st.lists(maybe_bytes, min_size=count, max_size=count)) if keyed else None
    [payload] = encode_binary_records(pa.array(values, pa.binary()),
                                      None if keys is None else pa.array(keys, pa.binary()), 9)
    records = bytearray(payload.data)
    for _ in range(data.draw(st.integers(0, 3))):
        at = data.draw(st.integers(0, len(records) - 1))
        records[at] = data.draw(st.sampled_from([0x00, 0x7F, 0x80, 0x90, 0x95, 0xC0, 0xC4,
                                                 0xC5, 0xC6, 0xCC, 0xCD, 0xCE, 0xD0, 0xA1,
                                                 0xFF, records[at] ^ 1]))
    if data.draw(st.booleans()):
        del records[data.draw(st.integers(0, len(records) - 1))]
    ends = np.frombuffer(payload.record_ends, "<u4").astype(np.int64)
    if data.draw(st.booleans()):
        ends[data.draw(st.integers(0, count - 1))] += data.draw(st.sampled_from([-2, -1, 1]))
    batch = frame_batch(RecordsPayload(bytes(records), count, 9, 9))

    def check(record_ends):
        return lambda: validate_batch(batch, 1 << 20, require_keys=require_keys,
                                      record_ends=record_ends)

    assert outcome(check(ends.clip(0).astype("<u4").tobytes())) == outcome(check(None))
