"""Request and response codecs, checked against kafka-python's client side of the same schemas:
pure, no Ray, no ZooKeeper."""

from __future__ import annotations

import struct

import pytest
from kafka.protocol.metadata import ApiVersionsRequest, ApiVersionsResponse, MetadataRequest
from kafka.protocol.producer import ProduceResponse

from rafka.wire import protocol


def client_request(request, version: int, correlation_id: int = 11) -> bytes:
    request.with_header(correlation_id=correlation_id, client_id="test-client")
    return bytes(request.encode(version=version, header=True))


@pytest.mark.parametrize("version", [0, 4, 9, 12])
def test_a_clients_metadata_request_is_read_with_its_header(version: int) -> None:
    topics = [MetadataRequest.MetadataRequestTopic(name="orders")]
    frame = client_request(MetadataRequest(topics=topics, allow_auto_topic_creation=False),
                           version)
    # A large frame is read into a bytearray of its own (actors/kafka/connection.py).
    for given_frame in (frame, bytearray(frame)):
        api, read_version, request = protocol.read_request(given_frame)
        assert (api.name, read_version) == ("Metadata", version)
        assert [topic.name for topic in request.topics] == ["orders"]
        assert (request.header.correlation_id, request.header.client_id) == (11, "test-client")


def test_a_response_decodes_as_the_client_expects_it() -> None:
    produce = protocol.APIS[0]
    response = ProduceResponse.TopicProduceResponse
    frame = protocol.encode_response(produce, 9, 42, throttle_time_ms=0, responses=[response(
        name="orders", partition_responses=[response.PartitionProduceResponse(
            index=2, error_code=0, base_offset=17)])])
    assert struct.unpack_from(">i", frame)[0] == len(frame) - 4
    decoded = ProduceResponse.decode(frame[4:], version=9, header=True)
    assert decoded.header.correlation_id == 42
    assert decoded.responses[0].partition_responses[0].base_offset == 17


def test_api_versions_lists_what_is_served_and_answers_a_newer_version_at_v0() -> None:
    listed = ApiVersionsResponse.decode(protocol.api_versions_response(3, 5)[4:], version=3,
                                        header=True)
    assert listed.error_code == 0
    assert {(k.api_key, k.min_version, k.max_version) for k in listed.api_keys} == {
        (api.key, api.min_version, api.max_version) for api in protocol.APIS.values()}
    # A client newer than rafka asks at v4: KIP-511's answer is v0 with the error and the list.
    frame = client_request(ApiVersionsRequest(client_software_name="x",
                                              client_software_version="1"), 4)
    with pytest.raises(protocol.UnsupportedRequestError) as refused:
        protocol.read_request(frame)
    answer = ApiVersionsResponse.decode(protocol.unsupported_response(refused.value)[4:], version=0,
                                        header=True)
    assert answer.error_code == protocol.UNSUPPORTED_VERSION and answer.header.correlation_id == 11
    assert answer.api_keys


def test_an_api_not_served_is_answered_with_unsupported_version() -> None:
    frame = struct.pack(">hhi", 57, 0, 99) + b"\x00\x00"  # UpdateFeatures
    with pytest.raises(protocol.UnsupportedRequestError) as refused:
        protocol.read_request(frame)
    answer = protocol.unsupported_response(refused.value)
    assert struct.unpack(">iih", answer) == (6, 99, protocol.UNSUPPORTED_VERSION)


@pytest.mark.parametrize("frame", [b"", b"\x00\x03", struct.pack(">hhi", 3, 9, 1) + b"\xff" * 3])
def test_a_frame_that_is_no_request_is_malformed(frame: bytes) -> None:
    with pytest.raises(protocol.MalformedRequestError):
        protocol.read_request(frame)
