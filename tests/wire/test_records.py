"""Record batches between Kafka's format and rafka's, checked against kafka-python's own record
codec (the one its producer writes and its consumer reads): pure, no Ray, no ZooKeeper."""

from __future__ import annotations

import struct

import cramjam
import pytest
from crc32c import crc32c
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder

from rafka.logstore.batch import (
    DEFAULT_MAX_DECOMPRESSED_SIZE,
    HEADER_SIZE,
    Record,
    decode_records,
    encode_batch,
    new_header,
    read_header,
    stamp_batch,
    validate_batches,
)
from rafka.logstore.errors import CorruptRecordError, InvalidRecordError, RecordTooLargeError
from rafka.logstore.transactions import ControlType, build_marker_batch
from rafka.wire.records import (
    UnsupportedCompressionError,
    check_bounds,
    from_idempotent_producer,
    from_kafka,
    to_kafka,
)

CODECS = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}
RECORDS = [
    (b"k0", b"v0", 1_700_000_000_000, [("trace", b"abc")]),
    (None, b"v1", 1_700_000_000_005, []),
    (b"k2", None, 1_699_999_999_990, [("a", b""), ("b", None)]),
]
# kafka-python's producer sends a batch uncompressed when compressing would not make it smaller.
COMPRESSIBLE = RECORDS + [(b"k", b"x" * 500, 1_700_000_000_010, [])] * 10


def kafka_batch(records=RECORDS, codec: int = 0, producer: tuple[int, int, int] = (-1, -1, -1),
                transactional: bool = False) -> bytes:
    """A batch as kafka-python's producer builds it."""
    builder = DefaultRecordBatchBuilder(magic=2, compression_type=codec,
                                        is_transactional=transactional, producer_id=producer[0],
                                        producer_epoch=producer[1], base_sequence=producer[2],
                                        batch_size=1 << 30)
    for delta, (key, value, timestamp, headers) in enumerate(records):
        builder.append(delta, timestamp, key, value, headers)
    return bytes(builder.build())


def as_consumer_sees(records, base_offset: int = 0) -> list[Record]:
    return [Record(base_offset + delta, timestamp, key, value, tuple(headers))
            for delta, (key, value, timestamp, headers) in enumerate(records)]


@pytest.mark.parametrize("codec", CODECS)
def test_a_kafka_producers_batch_becomes_a_rafka_batch_with_every_field(codec: str) -> None:
    converted = from_kafka(kafka_batch(COMPRESSIBLE, CODECS[codec], producer=(7, 2, 40)),
                           DEFAULT_MAX_DECOMPRESSED_SIZE)
    # The leader takes it as it takes any producer's batch.
    [header] = validate_batches(converted, 1 << 20, require_keys=False)
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (7, 2, 40)
    assert header.compression == CODECS[codec]
    assert header.max_timestamp == max(r[2] for r in COMPRESSIBLE)
    assert decode_records(stamp_batch(converted, 100, 3)) == as_consumer_sees(COMPRESSIBLE, 100)


@pytest.mark.parametrize("codec", CODECS)
def test_a_stored_batch_goes_to_a_kafka_consumer_with_its_offsets(codec: str) -> None:
    stored = stamp_batch(from_kafka(kafka_batch(COMPRESSIBLE, CODECS[codec]),
                                    DEFAULT_MAX_DECOMPRESSED_SIZE), 100, 3)
    [batch] = [DefaultRecordBatch(to_kafka(stored))]
    assert batch.validate_crc()
    assert (batch.base_offset, batch.leader_epoch, batch.compression_type) == (
        100, 3, CODECS[codec])
    read = [(r.offset, r.timestamp, r.key, r.value, list(r.headers)) for r in batch]
    assert read == [(100 + delta, ts, key, value, headers)
                    for delta, (key, value, ts, headers) in enumerate(COMPRESSIBLE)]


def test_several_batches_and_a_partial_one_at_the_end() -> None:
    first = stamp_batch(from_kafka(kafka_batch(RECORDS[:1]), DEFAULT_MAX_DECOMPRESSED_SIZE), 0, 1)
    second = stamp_batch(from_kafka(kafka_batch(RECORDS[1:]), DEFAULT_MAX_DECOMPRESSED_SIZE), 1, 1)
    converted = to_kafka(first + second + second[:30])  # a fetch cut in the third batch
    offsets = []
    position = 0
    while position < len(converted):
        size = 12 + struct.unpack_from(">i", converted, position + 8)[0]
        offsets += [record.offset for record in DefaultRecordBatch(
            converted[position:position + size])]
        position += size
    assert offsets == [0, 1, 2]


HEADERS = st.lists(st.tuples(st.text(max_size=8), st.none() | st.binary(max_size=8)), max_size=3)


# Lengths of one varint byte and of two (64 bytes and more, read by their own inline path), and
# past two (8 KiB and more).
FIELDS = st.none() | st.binary(max_size=40) | st.binary(min_size=60, max_size=300) \
    | st.sampled_from([b"x" * 4095, b"y" * 4096, b"z" * 9000])


@settings(max_examples=60)
@given(st.lists(st.tuples(FIELDS, FIELDS, st.integers(0, 2**41), HEADERS),
                min_size=1, max_size=150))
def test_any_records_make_the_round_trip(records) -> None:
    stored = stamp_batch(from_kafka(kafka_batch(records), DEFAULT_MAX_DECOMPRESSED_SIZE), 5, 0)
    assert decode_records(stored) == as_consumer_sees(records, 5)
    back = [(r.offset, r.timestamp, r.key, r.value, list(r.headers))
            for r in DefaultRecordBatch(to_kafka(stored))]
    assert back == [(5 + d, ts, k, v, h) for d, (k, v, ts, h) in enumerate(records)]


@settings(max_examples=60)
@given(st.lists(st.tuples(FIELDS, FIELDS, st.integers(-2**40, 2**40), HEADERS),
                min_size=1, max_size=60),
       st.integers(0, 1_000), st.sampled_from(sorted(CODECS.values())))
def test_a_compacted_batch_reaches_a_kafka_consumer_with_each_records_own_offset_and_time(
        records, first_offset_delta, codec) -> None:
    """The cleaner keeps a batch's header and drops records: the first one left may be neither
    the batch's first offset nor its first timestamp. A Kafka consumer still reads each record
    at its own offset and timestamp."""
    first_timestamp = 1_700_000_000_000
    entries = [(first_offset_delta + 3 * index, delta, key, value, tuple(headers))
               for index, (key, value, delta, headers) in enumerate(records)]
    header = new_header(attributes=codec, last_offset_delta=entries[-1][0],
                        first_timestamp=first_timestamp,
                        max_timestamp=first_timestamp + max(entry[1] for entry in entries))
    stored = stamp_batch(encode_batch(entries, header), 1_000, 2)
    [batch] = [DefaultRecordBatch(to_kafka(stored))]
    assert batch.validate_crc()
    assert (batch.base_offset, batch.leader_epoch, batch.compression_type) == (1_000, 2, codec)
    assert [(r.offset, r.timestamp, r.key, r.value, list(r.headers)) for r in batch] == [
        (1_000 + offset_delta, first_timestamp + delta, key, value, list(headers))
        for offset_delta, delta, key, value, headers in entries]


def test_an_idempotent_producers_batches_are_told_from_their_headers() -> None:
    """What lets the listener work on several of a connection's produce requests at once."""
    idempotent = kafka_batch(producer=(7, 0, 0))
    transactional = kafka_batch(producer=(7, 0, 3), transactional=True)
    plain = kafka_batch()
    assert from_idempotent_producer(idempotent)
    assert from_idempotent_producer(idempotent + transactional)
    assert not from_idempotent_producer(plain)
    assert not from_idempotent_producer(idempotent + plain)
    assert not from_idempotent_producer(idempotent + idempotent[:30])  # a partial batch
    assert not from_idempotent_producer(idempotent[:-1])
    assert not from_idempotent_producer(b"")


# --------------------------------------------------------------------------- bad input


def test_a_flipped_byte_fails_the_crc() -> None:
    batch = bytearray(kafka_batch())
    batch[-3] ^= 0xFF
    with pytest.raises(CorruptRecordError, match="CRC-32C"):
        from_kafka(bytes(batch), DEFAULT_MAX_DECOMPRESSED_SIZE)


@settings(max_examples=300)
@given(st.data())
def test_a_changed_byte_under_a_right_crc_is_refused_or_read_whole(data) -> None:
    """Whatever one byte of the records becomes (the CRC made right again, as a buggy client
    would send it), the batch is refused as corrupt or invalid, or read as whole records: never
    another error, and never records that run into each other."""
    records = [(None, b"v" * 100, 1_700_000_000_000 + 70 * i, []) for i in range(70)] + [
        (b"key", b"w" * 5000, 1_700_000_000_000, [("h", b"x")])]
    batch = bytearray(kafka_batch(records))
    where = data.draw(st.integers(61, len(batch) - 1))
    batch[where] = data.draw(st.integers(0, 255))
    struct.pack_into(">I", batch, 17, crc32c(bytes(batch[21:])))
    try:
        converted = from_kafka(bytes(batch), DEFAULT_MAX_DECOMPRESSED_SIZE)
    except (CorruptRecordError, InvalidRecordError):
        return
    assert len(decode_records(stamp_batch(converted, 0, 0))) == len(records)


def test_a_truncated_batch_a_lying_length_and_no_batch_are_refused() -> None:
    with pytest.raises(CorruptRecordError, match="at least one batch"):
        from_kafka(b"", DEFAULT_MAX_DECOMPRESSED_SIZE)
    batch = kafka_batch()
    with pytest.raises(CorruptRecordError):
        from_kafka(batch[:-5], DEFAULT_MAX_DECOMPRESSED_SIZE)
    with pytest.raises(CorruptRecordError):
        from_kafka(batch[:40], DEFAULT_MAX_DECOMPRESSED_SIZE)
    lying = bytearray(batch)
    struct.pack_into(">i", lying, 8, 2**31 - 1)
    with pytest.raises(CorruptRecordError):
        from_kafka(bytes(lying), DEFAULT_MAX_DECOMPRESSED_SIZE)


def test_an_old_message_format_is_refused() -> None:
    batch = bytearray(kafka_batch())
    batch[16] = 1  # magic
    with pytest.raises(CorruptRecordError, match="magic 1"):
        from_kafka(bytes(batch), DEFAULT_MAX_DECOMPRESSED_SIZE)


def test_a_transactional_batch_keeps_its_flag_and_a_marker_goes_to_kafka_as_it_is() -> None:
    converted = from_kafka(kafka_batch(producer=(7, 0, 0), transactional=True),
                           DEFAULT_MAX_DECOMPRESSED_SIZE)
    [header] = validate_batches(converted, 1 << 20, require_keys=False)
    assert header.is_transactional and not header.is_control
    marker = build_marker_batch(7, 0, ControlType.ABORT, coordinator_epoch=4,
                                timestamp_ms=1_700_000_000_000)
    kafka_marker = DefaultRecordBatch(to_kafka(marker))
    assert kafka_marker.validate_crc()
    assert kafka_marker.is_control_batch and kafka_marker.is_transactional
    [record] = list(kafka_marker)
    assert record.abort and record.value == b"\x00\x00\x00\x00\x00\x04"  # version, epoch


def test_a_producer_cannot_send_a_marker() -> None:
    batch = bytearray(kafka_batch(producer=(7, 0, 0), transactional=True))
    batch[22] |= 0x20  # attributes: control; the CRC must then be made right again
    struct.pack_into(">I", batch, 17, crc32c(bytes(batch[21:])))
    with pytest.raises(InvalidRecordError, match="coordinator"):
        from_kafka(bytes(batch), DEFAULT_MAX_DECOMPRESSED_SIZE)


def test_a_codec_kafka_does_not_define_is_refused_by_name() -> None:
    batch = bytearray(kafka_batch())
    batch[22] |= 5  # attributes: codec 5; the CRC must then be made right again
    struct.pack_into(">I", batch, 17, crc32c(bytes(batch[21:])))
    assert read_header(bytes(batch)).compression == 5
    with pytest.raises(UnsupportedCompressionError, match="gzip, snappy, lz4 or zstd"):
        from_kafka(bytes(batch), DEFAULT_MAX_DECOMPRESSED_SIZE)


def test_snappy_is_read_framed_as_javas_clients_write_it_and_raw_as_librdkafkas() -> None:
    plain = kafka_batch(COMPRESSIBLE)
    framed = kafka_batch(COMPRESSIBLE, CODECS["snappy"])  # kafka-python frames as Java does
    assert framed[HEADER_SIZE:HEADER_SIZE + 8] == b"\x82SNAPPY\x00"
    raw = bytearray(plain[:HEADER_SIZE]) + cramjam.snappy.compress_raw(plain[HEADER_SIZE:])
    raw[22] |= CODECS["snappy"]
    struct.pack_into(">i", raw, 8, len(raw) - 12)
    struct.pack_into(">I", raw, 17, crc32c(bytes(raw[21:])))
    for batch in (framed, bytes(raw)):
        converted = from_kafka(batch, DEFAULT_MAX_DECOMPRESSED_SIZE)
        assert read_header(converted).compression == CODECS["snappy"]
        assert decode_records(stamp_batch(converted, 0, 0)) == as_consumer_sees(COMPRESSIBLE)


def test_a_compression_bomb_is_refused() -> None:
    huge = [(None, bytes(1 << 20), 0, [])] * 4
    with pytest.raises(RecordTooLargeError):
        from_kafka(kafka_batch(huge, codec=CODECS["zstd"]), 1 << 20)


def test_a_batch_is_bounded_by_max_message_bytes_from_its_header() -> None:
    many = [(None, None, 0, [])] * 200  # 200 empty records: at least 7 bytes each
    batch = kafka_batch(many, codec=CODECS["zstd"])
    assert len(batch) < 1_000
    for check in (check_bounds, from_kafka):
        with pytest.raises(RecordTooLargeError, match="200 records"):
            check(batch, 200 * 7 - 1)
    check_bounds(batch, 200 * 7)  # the count alone could fit
    with pytest.raises(RecordTooLargeError, match=r"max\.message\.bytes=100:"):
        check_bounds(kafka_batch(), 100)  # the batch's own size
    # Two batches: the second is looked at too.
    with pytest.raises(RecordTooLargeError):
        check_bounds(kafka_batch() + batch, 200 * 7 - 1)


def test_a_batch_whose_header_disagrees_with_its_records_is_refused() -> None:
    """from_kafka checks what the leader's validation would, so the leader need not decode
    the converted batch again."""
    builder = DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=False,
                                        producer_id=-1, producer_epoch=-1, base_sequence=-1,
                                        batch_size=1 << 30)
    for delta in (1, 1):  # the last delta is count - 1, but the first is not 0
        builder.append(delta, 1_700_000_000_000, b"k", b"v", [])
    with pytest.raises(CorruptRecordError, match="offset deltas"):
        from_kafka(bytes(builder.build()), DEFAULT_MAX_DECOMPRESSED_SIZE)
    lying = bytearray(kafka_batch())
    struct.pack_into(">q", lying, 35, 1_800_000_000_000)  # max_timestamp
    struct.pack_into(">I", lying, 17, crc32c(bytes(lying[21:])))
    with pytest.raises(CorruptRecordError, match="max_timestamp"):
        from_kafka(bytes(lying), DEFAULT_MAX_DECOMPRESSED_SIZE)
    with pytest.raises(InvalidRecordError, match="without a key"):
        from_kafka(kafka_batch(), DEFAULT_MAX_DECOMPRESSED_SIZE, require_keys=True)
    keyed = [record for record in RECORDS if record[0] is not None]
    assert decode_records(from_kafka(kafka_batch(keyed), DEFAULT_MAX_DECOMPRESSED_SIZE,
                                     require_keys=True)) == as_consumer_sees(keyed)
