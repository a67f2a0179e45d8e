"""Kafka wire protocol codecs: the schema libraries compared, and rafka's batch conversion.

    python bench/wire_codecs.py [--repeats 5] [--records 5000]

Prints one JSON object, medians over ``--repeats`` runs:

* ``produce_request_decode_us``: a Produce request v9 of 6 partitions x 256 KiB of record bytes,
  decoded (what the listener does with every produce);
* ``fetch_response_encode_us``: a Fetch response v12 of 6 partitions x 1 MiB built and encoded;
  each by kafka-python's ``kafka.protocol`` (what rafka uses) and, when it is installed
  (``pip install kio``), by kio, the other maintained schema library;
* ``small_produce``: what the listener pays per request for a producer's usual one, a Produce
  v9 of one partition and a 100-byte batch: its request read and its response written, by the
  schemas and by ``rafka.wire.produce`` (rafka's own codec, which the listener uses);
* ``from_kafka_records_per_s`` and ``to_kafka_records_per_s``: ``rafka.wire.records`` converting
  batches of ``--records`` 100-byte records from Kafka's format to rafka's and back (the cost a
  Kafka client's records pay on the way in and out);
* ``reading``: what rafka's consumer and pipelines would pay to read the log if it held Kafka's
  format (storing a Kafka client's batches as they came would take the conversion out of its
  path): 20 such batches decoded into the consumer's records and into columns, by rafka's
  decoder from rafka's format and by aiokafka's compiled reader from Kafka's, each with the
  CRC checked and the garbage collector paused, as rafka's decoder runs.
"""

from __future__ import annotations

import argparse
import datetime
import gc
import io
import json
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from kafka.protocol.consumer import FetchResponse
from kafka.protocol.producer import ProduceRequest, ProduceResponse
from kafka.record.default_records import DefaultRecordBatchBuilder

from rafka.actors.clients.consumer import ConsumerRecord
from rafka.logstore.batch import (
    DEFAULT_MAX_DECOMPRESSED_SIZE,
    build_batch,
    decode_batches,
    decode_columns,
    stamp_batch,
)
from rafka.wire.produce import PartitionAnswer, produce_response, read_produce_request
from rafka.wire.protocol import APIS, encode_response
from rafka.wire.records import from_kafka, to_kafka


def _timed(function, repeats: int, inner: int) -> float:
    """Median microseconds per call over `repeats` runs of `inner` calls."""
    runs = []
    for _ in range(repeats):
        started = time.perf_counter()
        for _ in range(inner):
            function()
        runs.append((time.perf_counter() - started) / inner * 1e6)
    return round(statistics.median(runs), 1)


def kafka_python_figures(repeats: int) -> dict[str, float]:
    produce = ProduceRequest[9]
    topic = produce.TopicProduceData
    request = produce(transactional_id=None, acks=-1, timeout_ms=30000, topic_data=[topic(
        name="orders", partition_data=[topic.PartitionProduceData(
            index=p, records=os.urandom(256 * 1024)) for p in range(6)])])
    raw = bytes(request.encode())
    records = os.urandom(1024 * 1024)
    fetch = FetchResponse[12]
    part = fetch.FetchableTopicResponse.PartitionData

    def encode_fetch() -> bytes:
        return fetch(throttle_time_ms=0, error_code=0, session_id=0, responses=[
            fetch.FetchableTopicResponse(topic="orders", partitions=[part(
                partition_index=p, error_code=0, high_watermark=100, last_stable_offset=100,
                log_start_offset=0, aborted_transactions=[], preferred_read_replica=-1,
                records=records) for p in range(6)])]).encode()

    return {"produce_request_decode_us": _timed(lambda: produce.decode(raw), repeats, 200),
            "fetch_response_encode_us": _timed(encode_fetch, repeats, 50)}


def small_produce_figures(repeats: int) -> dict[str, float]:
    topic = ProduceRequest.TopicProduceData
    request = ProduceRequest(transactional_id=None, acks=-1, timeout_ms=30000, topic_data=[topic(
        name="orders", partition_data=[topic.PartitionProduceData(index=0,
                                                                  records=os.urandom(100))])])
    request.with_header(correlation_id=7, client_id="producer-1")
    frame = bytes(request.encode(version=9, header=True))
    answer = ProduceResponse.TopicProduceResponse
    produce_api = APIS[0]

    def schemas_response() -> bytes:
        return encode_response(produce_api, 9, 7, throttle_time_ms=0, responses=[answer(
            name="orders", partition_responses=[answer.PartitionProduceResponse(
                index=0, error_code=0, base_offset=41, log_append_time_ms=-1,
                log_start_offset=0, record_errors=[], error_message=None)])])

    def rafka_response() -> bytes:
        return produce_response(9, 7, [PartitionAnswer("orders", 0, 0, 41, -1, 0)])

    assert schemas_response() == rafka_response()
    return {
        "schemas_request_read_us": _timed(
            lambda: ProduceRequest.decode(frame, version=9, header=True), repeats, 2000),
        "rafka_request_read_us": _timed(lambda: read_produce_request(frame, 9), repeats, 2000),
        "schemas_response_write_us": _timed(schemas_response, repeats, 2000),
        "rafka_response_write_us": _timed(rafka_response, repeats, 2000),
    }


def kio_figures(repeats: int) -> dict[str, float] | None:
    try:
        from kio.schema.errors import ErrorCode
        from kio.schema.fetch.v12 import response as fetch
        from kio.schema.produce.v9 import request as produce
        from kio.serial import entity_reader, entity_writer
        from kio.static.primitive import i16, i32, i32Timedelta, i64
    except ImportError:
        return None
    request = produce.ProduceRequest(
        transactional_id=None, acks=i16(-1),
        timeout=i32Timedelta.parse(datetime.timedelta(seconds=30)),
        topic_data=(produce.TopicProduceData(name="orders", partition_data=tuple(
            produce.PartitionProduceData(index=i32(p), records=os.urandom(256 * 1024))
            for p in range(6))),))
    buffer = io.BytesIO()
    entity_writer(produce.ProduceRequest)(buffer, request)
    raw = buffer.getvalue()
    reader = entity_reader(produce.ProduceRequest)
    writer = entity_writer(fetch.FetchResponse)
    records = os.urandom(1024 * 1024)

    def encode_fetch() -> bytes:
        out = io.BytesIO()
        writer(out, fetch.FetchResponse(
            throttle_time=i32Timedelta.parse(datetime.timedelta(0)), error_code=ErrorCode.none,
            session_id=i32(0), responses=(fetch.FetchableTopicResponse(
                topic="orders", partitions=tuple(fetch.PartitionData(
                    partition_index=i32(p), error_code=ErrorCode.none, high_watermark=i64(100),
                    last_stable_offset=i64(100), log_start_offset=i64(0),
                    aborted_transactions=(), preferred_read_replica=i32(-1), records=records)
                    for p in range(6))),)))
        return out.getvalue()

    return {"produce_request_decode_us": _timed(lambda: reader(raw, 0), repeats, 200),
            "fetch_response_encode_us": _timed(encode_fetch, repeats, 50)}


def conversion_figures(repeats: int, count: int) -> dict[str, float]:
    builder = DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=False,
                                        producer_id=-1, producer_epoch=-1, base_sequence=-1,
                                        batch_size=1 << 30)
    for i in range(count):
        builder.append(i, 1_700_000_000_000 + i, None, os.urandom(100), [])
    kafka_batch = bytes(builder.build())
    stored = stamp_batch(from_kafka(kafka_batch, DEFAULT_MAX_DECOMPRESSED_SIZE), 0, 0)
    into = _timed(lambda: from_kafka(kafka_batch, DEFAULT_MAX_DECOMPRESSED_SIZE), repeats, 5)
    out = _timed(lambda: to_kafka(stored), repeats, 5)
    return {"from_kafka_records_per_s": round(count / into * 1e6),
            "to_kafka_records_per_s": round(count / out * 1e6)}


def reading_figures(repeats: int, count: int, batches: int = 20) -> dict[str, int]:
    from aiokafka.record._crecords import DefaultRecordBatch
    from aiokafka.record._crecords import DefaultRecordBatchBuilder as CompiledBuilder

    values = [os.urandom(100) for _ in range(count)]
    kafka_batches, rafka_log = [], b""
    for n in range(batches):
        builder = CompiledBuilder(magic=2, compression_type=0, is_transactional=0,
                                  producer_id=-1, producer_epoch=-1, base_sequence=-1,
                                  batch_size=1 << 30)
        for i, value in enumerate(values):
            builder.append(i, 1_700_000_000_000 + i, None, value, [])
        kafka_batches.append(bytes(builder.build()))
        rafka_log += stamp_batch(build_batch(
            [(None, value, 1_700_000_000_000 + i, None) for i, value in enumerate(values)]),
            n * count, 0)

    def kafka_records() -> list[ConsumerRecord]:
        out: list[ConsumerRecord] = []
        for data in kafka_batches:
            batch = DefaultRecordBatch(data)
            assert batch.validate_crc()
            out += [ConsumerRecord("t", 0, r.offset, r.timestamp, r.key, r.value, r.headers)
                    for r in batch]
        return out

    def kafka_columns() -> list[tuple]:
        out = []
        for data in kafka_batches:
            batch = DefaultRecordBatch(data)
            assert batch.validate_crc()
            records = list(batch)
            out.append(([r.offset for r in records], [r.timestamp for r in records],
                        [r.key for r in records], [r.value for r in records],
                        [r.headers for r in records]))
        return out

    def gc_paused(function):
        def run():
            gc.disable()
            try:
                return function()
            finally:
                gc.enable()
        return run

    cases = {
        "rafka_format_to_consumer_records": lambda: decode_batches(
            rafka_log, topic_partition=("t", 0), record_type=ConsumerRecord),
        "kafka_format_to_consumer_records": gc_paused(kafka_records),
        "rafka_format_to_columns": lambda: decode_columns(rafka_log),
        "kafka_format_to_columns": gc_paused(kafka_columns),
    }
    return {f"{name}_per_s": round(count * batches / _timed(function, repeats, 1) * 1e6)
            for name, function in cases.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--records", type=int, default=5000)
    args = parser.parse_args()
    print(json.dumps({
        "kafka_python": kafka_python_figures(args.repeats),
        "small_produce": small_produce_figures(args.repeats),
        "kio": kio_figures(args.repeats),
        "records": conversion_figures(args.repeats, args.records),
        "reading": reading_figures(args.repeats, args.records),
    }, indent=2))


if __name__ == "__main__":
    main()
