"""rafka's own Produce codec (wire/produce.py) against kafka-python's schemas, the reader and
writer it replaces: the same fields from the same bytes, the same bytes from the same fields,
at every version served. Pure: no Ray, no ZooKeeper."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.protocol.producer import ProduceRequest, ProduceResponse

from rafka.wire.produce import (
    PartitionAnswer,
    ProduceFormatError,
    produce_response,
    read_produce_request,
    with_throttle_time,
)
from rafka.wire.protocol import MalformedRequestError, read_request

VERSIONS = range(3, 10)
NAMES = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=20)
INT16 = st.integers(-(2**15), 2**15 - 1)
INT32 = st.integers(-(2**31), 2**31 - 1)
INT64 = st.integers(-(2**63), 2**63 - 1)

partitions = st.lists(st.tuples(INT32, st.none() | st.binary(max_size=300)), max_size=4)
topics = st.lists(st.tuples(NAMES, partitions), max_size=4)


def client_frame(version: int, transactional_id: str | None, acks: int, timeout_ms: int,
                 topic_data: list, correlation_id: int = 5,
                 client_id: str | None = "producer-1") -> bytes:
    """A Produce request as kafka-python's client writes it, without the length prefix."""
    request = ProduceRequest(
        transactional_id=transactional_id, acks=acks, timeout_ms=timeout_ms,
        topic_data=[ProduceRequest.TopicProduceData(name=name, partition_data=[
            ProduceRequest.TopicProduceData.PartitionProduceData(index=index, records=records)
            for index, records in parts]) for name, parts in topic_data])
    request.with_header(correlation_id=correlation_id, client_id=client_id)
    return bytes(request.encode(version=version, header=True))


@settings(max_examples=300, deadline=None)
@given(version=st.sampled_from(VERSIONS), transactional_id=st.none() | NAMES, acks=INT16,
       timeout_ms=INT32, topic_data=topics, correlation_id=INT32,
       client_id=st.none() | NAMES)
def test_a_produce_request_reads_as_the_schemas_read_it(version, transactional_id, acks,
                                                        timeout_ms, topic_data, correlation_id,
                                                        client_id) -> None:
    frame = client_frame(version, transactional_id, acks, timeout_ms, topic_data,
                         correlation_id, client_id)
    expected = ProduceRequest.decode(frame, version=version, header=True)
    got = read_produce_request(frame, version)
    # A large frame arrives in a bytearray of its own (actors/kafka/connection.py): the same
    # request, every field bytes.
    from_buffer = read_produce_request(bytearray(frame), version)
    assert from_buffer == got
    assert all(type(p.records) in (bytes, type(None))
               for t in from_buffer.topic_data for p in t.partition_data)
    assert got.header.correlation_id == expected.header.correlation_id == correlation_id
    assert got.header.client_id == expected.header.client_id
    assert (got.header.request_api_key, got.header.request_api_version) == (0, version)
    assert got.transactional_id == expected.transactional_id
    assert (got.acks, got.timeout_ms) == (expected.acks, expected.timeout_ms)
    assert [(t.name, [(p.index, p.records) for p in t.partition_data])
            for t in got.topic_data] == [
        (t.name, [(p.index, p.records) for p in t.partition_data])
        for t in expected.topic_data]


@pytest.mark.parametrize("version", VERSIONS)
def test_read_request_hands_produce_to_the_codec_and_refuses_what_does_not_decode(
        version: int) -> None:
    frame = client_frame(version, None, -1, 30_000, [("orders", [(0, b"batch")])])
    _api, read_version, request = read_request(frame)
    assert read_version == version
    assert request.topic_data[0].partition_data[0].records == b"batch"
    # Cut inside the records: the schemas read them short; rafka refuses the request.
    with pytest.raises(MalformedRequestError, match="does not decode"):
        read_request(frame[:-2])


@pytest.mark.parametrize("version", [3, 9])
def test_nulls_and_lying_counts_are_refused_with_what_is_wrong(version: int) -> None:
    flexible = version >= 9
    good = client_frame(version, None, -1, 30_000, [("t", [(0, b"x")])], client_id="c")
    # The body starts after the header: api key, version, correlation id, client id "c"
    # (int16 length), and for v9 an empty tagged-field section.
    body = 2 + 2 + 4 + 2 + 1 + (1 if flexible else 0)
    topics_at = body + (1 if flexible else 2) + 2 + 4  # null transactional id, acks, timeout
    null_array = b"\x00" if flexible else b"\xff\xff\xff\xff"
    frame = good[:topics_at] + null_array
    with pytest.raises(ProduceFormatError, match="topic_data is null"):
        read_produce_request(frame, version)
    huge = b"\xff\xff\xff\x7f" if flexible else b"\x7f\xff\xff\xff"
    frame = good[:topics_at] + huge + good[topics_at + len(null_array):]
    with pytest.raises(ProduceFormatError, match="claims"):
        read_produce_request(frame, version)
    null_name = b"\x00" if flexible else b"\xff\xff"
    count = 1 if flexible else 4
    frame = good[:topics_at + count] + null_name + good[topics_at + count + (1 if flexible else 3):]
    with pytest.raises(ProduceFormatError, match="name is null"):
        read_produce_request(frame, version)


answers = st.lists(st.builds(
    PartitionAnswer, topic=st.sampled_from(["a", "orders", "ünïcode"]), index=INT32,
    error_code=INT16, base_offset=INT64, log_append_time_ms=INT64, log_start_offset=INT64,
    error_message=st.none() | NAMES), max_size=6)


@settings(max_examples=300, deadline=None)
@given(version=st.sampled_from(VERSIONS), correlation_id=INT32, answers=answers,
       throttle_time_ms=INT32)
def test_a_produce_response_is_the_bytes_the_schemas_write(version, correlation_id, answers,
                                                           throttle_time_ms) -> None:
    topic_response = ProduceResponse.TopicProduceResponse
    by_topic: dict[str, list] = {}
    for answer in answers:
        by_topic.setdefault(answer.topic, []).append(
            topic_response.PartitionProduceResponse(
                index=answer.index, error_code=answer.error_code,
                base_offset=answer.base_offset, log_append_time_ms=answer.log_append_time_ms,
                log_start_offset=answer.log_start_offset, record_errors=[],
                error_message=answer.error_message))
    expected = ProduceResponse(version=version, throttle_time_ms=throttle_time_ms, responses=[
        topic_response(name=name, partition_responses=parts) for name, parts in by_topic.items()])
    expected.with_header(correlation_id=correlation_id)
    assert produce_response(version, correlation_id, answers, throttle_time_ms) == bytes(
        expected.encode(header=True, framed=True))


@settings(max_examples=100, deadline=None)
@given(version=st.sampled_from(VERSIONS), answers=answers, throttle_time_ms=INT32)
def test_a_throttle_time_set_afterwards_is_the_one_written_at_once(version, answers,
                                                                   throttle_time_ms) -> None:
    assert with_throttle_time(produce_response(version, 7, answers), version,
                              throttle_time_ms) == produce_response(version, 7, answers,
                                                                    throttle_time_ms)
