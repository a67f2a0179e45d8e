"""Kafka's requests and responses: the APIs and versions rafka serves, and their codecs.

The message schemas are kafka-python's (`kafka.protocol`, generated from Kafka's own JSON message
definitions). kio, the other maintained schema library, is somewhat faster at the schemas
(`bench/wire_codecs.py`), but both are under 1 % of what converting a request's records between
Kafka's format and rafka's costs, so speed did not decide: kafka-python knows every version of
every API back to 0 (kio leaves out those Kafka 4 removed, such as OffsetCommit v0-1, which older
clients still send), and its record codec and client are the reference the tests check against.
Produce is the exception: its requests and responses are read and written by hand
(`rafka.wire.produce`), because a producer sends one per batch and the schemas' generic
machinery cost the broker's event loop a quarter of its CPU per request.

A frame is a big-endian int32 length and that many bytes: a request header (api key, api
version, correlation id, client id; tagged fields in flexible versions) and the body. Record
batches stay opaque bytes here; `rafka.wire.records` converts them.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Any

from kafka.protocol.admin import (
    AlterClientQuotasRequest,
    AlterClientQuotasResponse,
    AlterConfigsRequest,
    AlterConfigsResponse,
    AlterPartitionReassignmentsRequest,
    AlterPartitionReassignmentsResponse,
    AlterReplicaLogDirsRequest,
    AlterReplicaLogDirsResponse,
    AlterUserScramCredentialsRequest,
    AlterUserScramCredentialsResponse,
    CreateAclsRequest,
    CreateAclsResponse,
    CreatePartitionsRequest,
    CreatePartitionsResponse,
    CreateTopicsRequest,
    CreateTopicsResponse,
    DeleteAclsRequest,
    DeleteAclsResponse,
    DeleteGroupsRequest,
    DeleteGroupsResponse,
    DeleteRecordsRequest,
    DeleteRecordsResponse,
    DeleteTopicsRequest,
    DeleteTopicsResponse,
    DescribeAclsRequest,
    DescribeAclsResponse,
    DescribeClientQuotasRequest,
    DescribeClientQuotasResponse,
    DescribeClusterRequest,
    DescribeClusterResponse,
    DescribeConfigsRequest,
    DescribeConfigsResponse,
    DescribeGroupsRequest,
    DescribeGroupsResponse,
    DescribeLogDirsRequest,
    DescribeLogDirsResponse,
    DescribeProducersRequest,
    DescribeProducersResponse,
    DescribeTopicPartitionsRequest,
    DescribeTopicPartitionsResponse,
    DescribeTransactionsRequest,
    DescribeTransactionsResponse,
    DescribeUserScramCredentialsRequest,
    DescribeUserScramCredentialsResponse,
    ElectLeadersRequest,
    ElectLeadersResponse,
    IncrementalAlterConfigsRequest,
    IncrementalAlterConfigsResponse,
    ListGroupsRequest,
    ListGroupsResponse,
    ListPartitionReassignmentsRequest,
    ListPartitionReassignmentsResponse,
    ListTransactionsRequest,
    ListTransactionsResponse,
)
from kafka.protocol.api_key import ApiKey
from kafka.protocol.consumer import (
    FetchRequest,
    FetchResponse,
    HeartbeatRequest,
    HeartbeatResponse,
    JoinGroupRequest,
    JoinGroupResponse,
    LeaveGroupRequest,
    LeaveGroupResponse,
    ListOffsetsRequest,
    ListOffsetsResponse,
    OffsetCommitRequest,
    OffsetCommitResponse,
    OffsetDeleteRequest,
    OffsetDeleteResponse,
    OffsetFetchRequest,
    OffsetFetchResponse,
    OffsetForLeaderEpochRequest,
    OffsetForLeaderEpochResponse,
    SyncGroupRequest,
    SyncGroupResponse,
)
from kafka.protocol.metadata import (
    ApiVersionsRequest,
    ApiVersionsResponse,
    FindCoordinatorRequest,
    FindCoordinatorResponse,
    MetadataRequest,
    MetadataResponse,
)
from kafka.protocol.producer import (
    AddOffsetsToTxnRequest,
    AddOffsetsToTxnResponse,
    AddPartitionsToTxnRequest,
    AddPartitionsToTxnResponse,
    EndTxnRequest,
    EndTxnResponse,
    InitProducerIdRequest,
    InitProducerIdResponse,
    ProduceRequest,
    ProduceResponse,
    TxnOffsetCommitRequest,
    TxnOffsetCommitResponse,
    WriteTxnMarkersRequest,
    WriteTxnMarkersResponse,
)
from kafka.protocol.sasl import (
    SaslAuthenticateRequest,
    SaslAuthenticateResponse,
    SaslHandshakeRequest,
    SaslHandshakeResponse,
)

from rafka.common.errors import RafkaError
from rafka.wire.consumer_group_messages import (
    ConsumerGroupDescribeRequest,
    ConsumerGroupDescribeResponse,
    ConsumerGroupHeartbeatRequest,
    ConsumerGroupHeartbeatResponse,
)
from rafka.wire.produce import ProduceFormatError, read_produce_request

# Kafka's error code for a version (or API) the broker does not serve.
UNSUPPORTED_VERSION = 35

_PREFIX = struct.Struct(">hhi")  # api_key, api_version, correlation_id
_CORRELATION_AND_ERROR = struct.Struct(">ih")


@dataclass(frozen=True)
class Api:
    """One API and the versions of it rafka serves."""

    key: ApiKey
    request: Any
    response: Any
    min_version: int
    max_version: int

    @property
    def name(self) -> str:
        name: str = self.key.name
        return name


# From the oldest version that carries v2 record batches (Produce 3, Fetch 4, ListOffsets 1) to
# the newest that asks nothing rafka lacks (Produce 13 names topics by id, which the produce
# path does not take yet; Fetch 14 and later carry tiered storage's errors and followers'
# states; FindCoordinator 4 and OffsetFetch 8 batch several groups, EndTxn 4 and
# TxnOffsetCommit 4 are KIP-890's transaction version 2; AddPartitionsToTxn 4-5 are served, as
# KIP-890's verification between brokers). OffsetCommit 9 (member epochs), ListGroups 5 (group
# types), ConsumerGroupHeartbeat and ConsumerGroupDescribe are KIP-848's consumer groups.
APIS: dict[int, Api] = {api.key: api for api in (
    Api(ApiKey.Produce, ProduceRequest, ProduceResponse, 3, 9),
    Api(ApiKey.Fetch, FetchRequest, FetchResponse, 4, 13),
    Api(ApiKey.ListOffsets, ListOffsetsRequest, ListOffsetsResponse, 1, 7),
    Api(ApiKey.Metadata, MetadataRequest, MetadataResponse, 0, 12),
    Api(ApiKey.OffsetCommit, OffsetCommitRequest, OffsetCommitResponse, 2, 9),
    Api(ApiKey.OffsetFetch, OffsetFetchRequest, OffsetFetchResponse, 1, 7),
    Api(ApiKey.FindCoordinator, FindCoordinatorRequest, FindCoordinatorResponse, 0, 3),
    Api(ApiKey.JoinGroup, JoinGroupRequest, JoinGroupResponse, 0, 9),
    Api(ApiKey.Heartbeat, HeartbeatRequest, HeartbeatResponse, 0, 4),
    Api(ApiKey.LeaveGroup, LeaveGroupRequest, LeaveGroupResponse, 0, 5),
    Api(ApiKey.SyncGroup, SyncGroupRequest, SyncGroupResponse, 0, 5),
    Api(ApiKey.DescribeGroups, DescribeGroupsRequest, DescribeGroupsResponse, 0, 5),
    Api(ApiKey.ListGroups, ListGroupsRequest, ListGroupsResponse, 0, 5),
    Api(ApiKey.ApiVersions, ApiVersionsRequest, ApiVersionsResponse, 0, 3),
    Api(ApiKey.CreateTopics, CreateTopicsRequest, CreateTopicsResponse, 0, 7),
    Api(ApiKey.DeleteTopics, DeleteTopicsRequest, DeleteTopicsResponse, 0, 6),
    Api(ApiKey.DescribeTopicPartitions, DescribeTopicPartitionsRequest,
        DescribeTopicPartitionsResponse, 0, 0),
    Api(ApiKey.InitProducerId, InitProducerIdRequest, InitProducerIdResponse, 0, 4),
    Api(ApiKey.AddPartitionsToTxn, AddPartitionsToTxnRequest, AddPartitionsToTxnResponse, 0, 5),
    Api(ApiKey.AddOffsetsToTxn, AddOffsetsToTxnRequest, AddOffsetsToTxnResponse, 0, 3),
    Api(ApiKey.EndTxn, EndTxnRequest, EndTxnResponse, 0, 3),
    Api(ApiKey.TxnOffsetCommit, TxnOffsetCommitRequest, TxnOffsetCommitResponse, 0, 3),
    Api(ApiKey.WriteTxnMarkers, WriteTxnMarkersRequest, WriteTxnMarkersResponse, 1, 1),
    Api(ApiKey.DescribeProducers, DescribeProducersRequest, DescribeProducersResponse, 0, 0),
    Api(ApiKey.DescribeTransactions, DescribeTransactionsRequest, DescribeTransactionsResponse,
        0, 0),
    Api(ApiKey.ListTransactions, ListTransactionsRequest, ListTransactionsResponse, 0, 1),
    Api(ApiKey.DescribeConfigs, DescribeConfigsRequest, DescribeConfigsResponse, 0, 3),
    Api(ApiKey.AlterConfigs, AlterConfigsRequest, AlterConfigsResponse, 0, 2),
    Api(ApiKey.IncrementalAlterConfigs, IncrementalAlterConfigsRequest,
        IncrementalAlterConfigsResponse, 0, 1),
    Api(ApiKey.CreatePartitions, CreatePartitionsRequest, CreatePartitionsResponse, 0, 3),
    Api(ApiKey.ElectLeaders, ElectLeadersRequest, ElectLeadersResponse, 0, 2),
    Api(ApiKey.DeleteRecords, DeleteRecordsRequest, DeleteRecordsResponse, 0, 2),
    Api(ApiKey.DeleteGroups, DeleteGroupsRequest, DeleteGroupsResponse, 0, 2),
    Api(ApiKey.ConsumerGroupHeartbeat, ConsumerGroupHeartbeatRequest,
        ConsumerGroupHeartbeatResponse, 0, 1),
    Api(ApiKey.ConsumerGroupDescribe, ConsumerGroupDescribeRequest,
        ConsumerGroupDescribeResponse, 0, 1),
    Api(ApiKey.OffsetDelete, OffsetDeleteRequest, OffsetDeleteResponse, 0, 0),
    Api(ApiKey.OffsetForLeaderEpoch, OffsetForLeaderEpochRequest, OffsetForLeaderEpochResponse,
        2, 4),
    Api(ApiKey.DescribeCluster, DescribeClusterRequest, DescribeClusterResponse, 0, 1),
    Api(ApiKey.DescribeLogDirs, DescribeLogDirsRequest, DescribeLogDirsResponse, 0, 4),
    Api(ApiKey.AlterReplicaLogDirs, AlterReplicaLogDirsRequest, AlterReplicaLogDirsResponse,
        1, 2),
    Api(ApiKey.AlterPartitionReassignments, AlterPartitionReassignmentsRequest,
        AlterPartitionReassignmentsResponse, 0, 1),
    Api(ApiKey.ListPartitionReassignments, ListPartitionReassignmentsRequest,
        ListPartitionReassignmentsResponse, 0, 0),
    Api(ApiKey.DescribeClientQuotas, DescribeClientQuotasRequest, DescribeClientQuotasResponse,
        0, 1),
    Api(ApiKey.AlterClientQuotas, AlterClientQuotasRequest, AlterClientQuotasResponse, 0, 1),
    Api(ApiKey.CreateAcls, CreateAclsRequest, CreateAclsResponse, 0, 3),
    Api(ApiKey.DescribeAcls, DescribeAclsRequest, DescribeAclsResponse, 0, 3),
    Api(ApiKey.DeleteAcls, DeleteAclsRequest, DeleteAclsResponse, 0, 3),
    Api(ApiKey.SaslHandshake, SaslHandshakeRequest, SaslHandshakeResponse, 0, 1),
    Api(ApiKey.SaslAuthenticate, SaslAuthenticateRequest, SaslAuthenticateResponse, 0, 2),
    Api(ApiKey.DescribeUserScramCredentials, DescribeUserScramCredentialsRequest,
        DescribeUserScramCredentialsResponse, 0, 0),
    Api(ApiKey.AlterUserScramCredentials, AlterUserScramCredentialsRequest,
        AlterUserScramCredentialsResponse, 0, 0),
)}
API_VERSIONS = APIS[ApiKey.ApiVersions]


class MalformedRequestError(RafkaError):
    """A frame that is not a request rafka can read: Kafka closes such a connection."""


class UnsupportedRequestError(RafkaError):
    """A request of an API or version rafka does not serve; answered, not fatal."""

    def __init__(self, api_key: int, api_version: int, correlation_id: int) -> None:
        super().__init__(f"api key {api_key} version {api_version} is not served")
        self.api_key = api_key
        self.api_version = api_version
        self.correlation_id = correlation_id


def read_request(frame: bytes | bytearray) -> tuple[Api, int, Any]:
    """`(api, version, request)` from one frame (without its length); `request.header` holds
    the correlation id and client id. Every field read is `bytes`, also from a `bytearray`."""
    if len(frame) < _PREFIX.size:
        raise MalformedRequestError(f"a {len(frame)}-byte frame holds no request header")
    key, version, correlation_id = _PREFIX.unpack_from(frame)
    api = APIS.get(key)
    if api is None or not api.min_version <= version <= api.max_version:
        raise UnsupportedRequestError(key, version, correlation_id)
    if key == ApiKey.Produce:  # every batch of a Kafka producer: read by hand (wire/produce.py)
        try:
            return api, version, read_produce_request(frame, version)
        except ProduceFormatError as error:
            raise MalformedRequestError(
                f"{api.name} v{version} request {correlation_id} does not decode: {error}"
            ) from None
    if type(frame) is not bytes:
        frame = bytes(frame)  # the schemas read only bytes (a rare large request: one copy)
    try:
        request = api.request.decode(frame, version=version, header=True)
    except Exception as error:  # the schema library raises what the bytes lead it to
        raise MalformedRequestError(
            f"{api.name} v{version} request {correlation_id} does not decode: {error!r}"
        ) from None
    _refuse_nulls(api.request._struct, request, version, f"{api.name} v{version}: ")
    return api, version, request


def _refuse_nulls(schema: Any, data: Any, version: int, where: str) -> None:
    """Kafka's parser refuses a null (length -1) in a field its schema does not let be null;
    kafka-python's decodes it to None, which no handler expects (found by
    tests/kafka_clients/test_kafka_fuzz.py)."""
    for name, field in schema.fields.items():
        if not field.for_version_q(version):
            continue
        value = getattr(data, name, None)
        if value is None:
            # kafka-python reads the zero uuid (Kafka's "no id") as None.
            if not field.nullable_for_version_q(version) and field.type_str != "uuid":
                raise MalformedRequestError(f"{where}{field.name} is null, which the request "
                                            f"does not allow")
        elif field.is_struct_array():
            for item in value:
                _refuse_nulls(field, item, version, f"{where}{field.name}.")
        elif field.is_struct():
            _refuse_nulls(field, value, version, f"{where}{field.name}.")
        elif field.is_array() and None in value:
            raise MalformedRequestError(f"{where}{field.name} holds a null")


def encode_response(api: Api, version: int, correlation_id: int, **fields: Any) -> bytes:
    """A framed response of `api` at `version`."""
    response = api.response(version=version, **fields)
    response.with_header(correlation_id=correlation_id)
    return bytes(response.encode(header=True, framed=True))


def api_versions_response(version: int, correlation_id: int) -> bytes:
    """What rafka serves. A version newer than rafka's gets UNSUPPORTED_VERSION in a v0
    response, which every client reads, and tries again at one rafka lists (KIP-511)."""
    error = 0
    if not API_VERSIONS.min_version <= version <= API_VERSIONS.max_version:
        version, error = 0, UNSUPPORTED_VERSION
    keys = [ApiVersionsResponse.ApiVersion(api_key=api.key, min_version=api.min_version,
                                           max_version=api.max_version)
            for api in APIS.values()]
    return encode_response(API_VERSIONS, version, correlation_id, error_code=error,
                           api_keys=keys, throttle_time_ms=0)


def unsupported_response(error: UnsupportedRequestError) -> bytes:
    """The answer to a request rafka does not serve: the correlation id and
    UNSUPPORTED_VERSION, so that the client hears why instead of losing its connection."""
    if error.api_key == API_VERSIONS.key:
        return api_versions_response(error.api_version, error.correlation_id)
    body = _CORRELATION_AND_ERROR.pack(error.correlation_id, UNSUPPORTED_VERSION)
    return struct.pack(">i", len(body)) + body
