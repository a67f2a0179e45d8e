"""The checks around the Kafka handlers, without a broker: a refused part never reaches its
handler and is answered with Kafka's *_AUTHORIZATION_FAILED code, the rest as usual; the
principal is the connection's at the time of the check."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

import pytest
from kafka.protocol.api_key import ApiKey
from kafka.protocol.consumer import FetchRequest, JoinGroupRequest
from kafka.protocol.metadata import MetadataRequest

from rafka.actors.config import BrokerConfig
from rafka.actors.kafka.authorization import (
    CLIENT_CONNECTION,
    RequestAuthorization,
    authorizer_from_config,
)
from rafka.common.acl import (
    AccessControlEntry,
    AclOperation,
    AclPermissionType,
    Authorizer,
    PatternType,
    ResourcePattern,
    ResourceType,
)
from rafka.wire.principal import KafkaPrincipal
from rafka.wire.produce import PartitionData, ProduceRequestData, RequestHeader, TopicData
from rafka.wire.protocol import APIS

ALICE = KafkaPrincipal("User", "alice")


def allow(name: str, operation: AclOperation, resource_type: ResourceType = ResourceType.TOPIC,
          pattern: PatternType = PatternType.LITERAL) -> dict[ResourcePattern, Any]:
    return {ResourcePattern(resource_type, name, pattern): frozenset([AccessControlEntry(
        str(ALICE), "*", operation, AclPermissionType.ALLOW)])}


def checks(acls: dict[ResourcePattern, Any]) -> RequestAuthorization:
    return RequestAuthorization(Authorizer(acls=acls), BrokerConfig())


def as_alice(call: Any) -> Any:
    """`call()` (a coroutine awaited) in a request of alice's connection."""
    async def run() -> Any:
        CLIENT_CONNECTION.set(SimpleNamespace(principal=ALICE,  # type: ignore[arg-type]
                                              peername=("10.0.0.1", 5000)))
        answer = call()
        return await answer if asyncio.iscoroutine(answer) else answer
    return asyncio.run(run())


class Recording:
    """A handler that keeps the request it was handed and answers `fields`."""

    def __init__(self, **fields: Any) -> None:
        self.fields = fields
        self.requests: list[Any] = []

    async def __call__(self, api: Any, version: int, request: Any) -> Any:
        self.requests.append(request)
        return dict(self.fields)


def test_no_authorizer_without_its_class_name() -> None:
    assert authorizer_from_config(BrokerConfig()) is None
    config = BrokerConfig.from_dict({
        "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
        "super.users": "User:admin; User:CN=ops", "allow.everyone.if.no.acl.found": "true"})
    authorizer = authorizer_from_config(config)
    assert authorizer is not None and authorizer.allow_if_no_acl
    assert authorizer.super_users == {"User:admin", "User:CN=ops"}


def test_produce_refuses_topics_without_write_and_all_of_a_refused_transactional_id() -> None:
    auth = checks({**allow("mine", AclOperation.WRITE), **allow("ro", AclOperation.READ)})
    request = ProduceRequestData(RequestHeader(0, 9, 1, None), None, -1, 1000, [
        TopicData("mine", [PartitionData(0, b"")]), TopicData("ro", [PartitionData(0, b""),
                                                                     PartitionData(1, b"")])])
    refused = as_alice(lambda: auth.refused_produce(request))
    assert {tp: code for tp, (code, _) in refused.items()} == {("ro", 0): 29, ("ro", 1): 29}
    transactional = ProduceRequestData(request.header, "txn", -1, 1000, request.topic_data)
    refused = as_alice(lambda: auth.refused_produce(transactional))
    assert {code for code, _ in refused.values()} == {53} and len(refused) == 3


def test_fetch_hands_on_only_the_topics_it_may_read() -> None:
    auth = checks({**allow("mine", AclOperation.READ), **allow("other", AclOperation.DESCRIBE)})
    api = APIS[ApiKey.Fetch]
    topic = FetchRequest.FetchTopic
    request = FetchRequest(topics=[
        topic(topic="mine", partitions=[topic.FetchPartition(partition=0)]),
        topic(topic="other", partitions=[topic.FetchPartition(partition=0)])])
    handler = Recording(throttle_time_ms=0, error_code=0, session_id=0, responses=[])
    fields = as_alice(lambda: auth.wrap({ApiKey.Fetch: handler})[ApiKey.Fetch](api, 12, request))
    assert [t.topic for t in handler.requests[0].topics] == ["mine"]
    assert [(t.topic, [p.error_code for p in t.partitions]) for t in fields["responses"]] == [
        ("other", [29])]


def test_metadata_leaves_out_topics_it_may_not_describe() -> None:
    auth = checks(allow("team-", AclOperation.READ, pattern=PatternType.PREFIXED))
    api = APIS[ApiKey.Metadata]
    response = api.response.MetadataResponseTopic

    def topics(*names: str) -> list[Any]:
        return [response(error_code=0, name=name, partitions=[]) for name in names]

    handler = Recording(topics=topics("team-a", "secret"))
    wrapped = auth.wrap({ApiKey.Metadata: handler})[ApiKey.Metadata]
    fields = as_alice(lambda: wrapped(api, 9, MetadataRequest(topics=None)))
    assert [t.name for t in fields["topics"]] == ["team-a"]
    named = MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name="secret")])
    fields = as_alice(lambda: wrapped(api, 9, named))
    assert [(t.name, t.error_code) for t in fields["topics"]] == [("team-a", 0), ("secret", 29)]
    # A topic asked for by an id no topic has is answered UNKNOWN_TOPIC_ID, which names none.
    handler.fields["topics"] = [response(error_code=100, name=None, partitions=[])]
    fields = as_alice(lambda: wrapped(api, 12, named))
    assert [(t.name, t.error_code) for t in fields["topics"]] == [(None, 100)]


def test_a_group_request_without_read_on_the_group_is_refused_unhandled() -> None:
    auth = checks(allow("mine", AclOperation.READ, ResourceType.GROUP))
    api = APIS[ApiKey.JoinGroup]
    handler = Recording(error_code=0)
    wrapped = auth.wrap({ApiKey.JoinGroup: handler})[ApiKey.JoinGroup]
    theirs = as_alice(lambda: wrapped(api, 5, JoinGroupRequest(group_id="theirs")))
    assert theirs["error_code"] == 30
    assert handler.requests == []
    assert as_alice(lambda: wrapped(api, 5, JoinGroupRequest(group_id="mine")))["error_code"] == 0


def _one_of_each(api: Any) -> Any:
    """A request of `api` with one item in each list the checks look at."""
    request = api.request
    samples: dict[int, Any] = {
        ApiKey.DeleteRecords: lambda: request(topics=[request.DeleteRecordsTopic(
            name="t", partitions=[request.DeleteRecordsTopic.DeleteRecordsPartition(
                partition_index=0, offset=1)])], timeout_ms=1),
        ApiKey.CreatePartitions: lambda: request(topics=[request.CreatePartitionsTopic(
            name="t", count=2, assignments=None)], timeout_ms=1, validate_only=False),
        ApiKey.DescribeConfigs: lambda: request(resources=[
            request.DescribeConfigsResource(resource_type=2, resource_name="t",
                                            configuration_keys=None),
            request.DescribeConfigsResource(resource_type=4, resource_name="1",
                                            configuration_keys=None)]),
        ApiKey.AlterConfigs: lambda: request(resources=[request.AlterConfigsResource(
            resource_type=2, resource_name="t", configs=[])], validate_only=False),
        ApiKey.IncrementalAlterConfigs: lambda: request(resources=[
            request.AlterConfigsResource(resource_type=4, resource_name="1", configs=[])],
            validate_only=False),
        ApiKey.DescribeGroups: lambda: request(groups=["g"]),
        ApiKey.DeleteGroups: lambda: request(groups_names=["g"]),
        ApiKey.DescribeTransactions: lambda: request(transactional_ids=["x"]),
        ApiKey.DescribeProducers: lambda: request(topics=[request.TopicRequest(
            name="t", partition_indexes=[0])]),
        ApiKey.CreateTopics: lambda: request(topics=[request.CreatableTopic(
            name="t", num_partitions=1, replication_factor=1, assignments=[], configs=[])],
            timeout_ms=1),
        ApiKey.DeleteTopics: lambda: request(topic_names=["t"], timeout_ms=1),
        ApiKey.ListOffsets: lambda: request(replica_id=-1, topics=[request.ListOffsetsTopic(
            name="t", partitions=[request.ListOffsetsTopic.ListOffsetsPartition(
                partition_index=0, timestamp=-1)])]),
        ApiKey.OffsetForLeaderEpoch: lambda: request(replica_id=-1, topics=[
            request.OffsetForLeaderTopic(topic="t", partitions=[
                request.OffsetForLeaderTopic.OffsetForLeaderPartition(
                    partition=0, current_leader_epoch=-1, leader_epoch=0)])]),
        ApiKey.OffsetCommit: lambda: request(group_id="g", topics=[
            request.OffsetCommitRequestTopic(name="t", partitions=[
                request.OffsetCommitRequestTopic.OffsetCommitRequestPartition(
                    partition_index=0, committed_offset=1)])]),
        ApiKey.OffsetFetch: lambda: request(group_id="g", topics=None),
        ApiKey.FindCoordinator: lambda: request(key="g", key_type=0),
        ApiKey.InitProducerId: lambda: request(transactional_id="x", transaction_timeout_ms=1),
        ApiKey.EndTxn: lambda: request(transactional_id="x", producer_id=1, producer_epoch=0,
                                       committed=True),
        ApiKey.ElectLeaders: lambda: request(election_type=0, topic_partitions=None,
                                             timeout_ms=1),
        ApiKey.DescribeLogDirs: lambda: request(topics=None),
        ApiKey.DescribeAcls: lambda: request(resource_type_filter=1, resource_name_filter=None,
                                             pattern_type_filter=1, principal_filter=None,
                                             host_filter=None, operation=1, permission_type=1),
        ApiKey.ConsumerGroupHeartbeat: lambda: request(
            group_id="g", member_id="m", member_epoch=0, rebalance_timeout_ms=1,
            subscribed_topic_names=["t"], topic_partitions=[]),
        ApiKey.ConsumerGroupDescribe: lambda: request(group_ids=["g"],
                                                      include_authorized_operations=False),
    }
    return samples[api.key]()


def _empty_answer(api: Any, version: int) -> dict[str, Any]:
    """What a handler would answer had it nothing to say: every list of the response empty."""
    fields = {}
    for name, field in api.response._struct.fields.items():
        if field.for_version_q(version) and field.is_struct_array():
            fields[name] = []
    return fields


def test_every_refusal_is_a_response_clients_can_read() -> None:
    """Nobody may do anything: each API's refusals, encoded at its newest version rafka
    serves, carry an authorization error, and the handler saw none of what was refused."""
    from rafka.wire.protocol import encode_response

    auth = checks({})
    for key in (ApiKey.DeleteRecords, ApiKey.CreatePartitions, ApiKey.DescribeConfigs,
                ApiKey.AlterConfigs, ApiKey.IncrementalAlterConfigs, ApiKey.DescribeGroups,
                ApiKey.DeleteGroups, ApiKey.DescribeTransactions, ApiKey.DescribeProducers,
                ApiKey.CreateTopics, ApiKey.DeleteTopics, ApiKey.ListOffsets,
                ApiKey.OffsetForLeaderEpoch, ApiKey.OffsetCommit, ApiKey.OffsetFetch,
                ApiKey.FindCoordinator,
                ApiKey.InitProducerId, ApiKey.EndTxn, ApiKey.ElectLeaders,
                ApiKey.DescribeLogDirs, ApiKey.DescribeAcls, ApiKey.ConsumerGroupHeartbeat,
                ApiKey.ConsumerGroupDescribe):
        api = APIS[key]
        version = api.max_version if key != ApiKey.DeleteTopics else 5
        handler = Recording(**_empty_answer(api, version))
        wrapped = auth.wrap({key: handler})[key]
        request = _one_of_each(api)
        fields = as_alice(lambda w=wrapped, a=api, r=request, v=version: w(a, v, r))
        encoded = encode_response(api, version, 7, **fields)
        decoded = api.response.decode(encoded[4:], version=version, header=True)
        codes = set(_error_codes(decoded))
        assert codes & {29, 30, 31, 53}, (api.name, decoded)


def _error_codes(value: Any) -> list[int]:
    found = []
    for name in dir(value):
        if name.startswith("_"):
            continue
        item = getattr(value, name, None)
        if name.endswith("error_code") and isinstance(item, int):
            found.append(item)
        elif isinstance(item, list):
            for element in item:
                if hasattr(element, "__dict__") or hasattr(type(element), "_struct"):
                    found.extend(_error_codes(element))
    return found


def test_the_acl_apis_answer_security_disabled_without_an_authorizer() -> None:
    from rafka.actors.kafka.acls import KafkaAclHandler

    handler = KafkaAclHandler(SimpleNamespace(store=None), enabled=False)  # type: ignore[arg-type]
    describe = APIS[ApiKey.DescribeAcls]
    fields = asyncio.run(handler.describe_acls(describe, 1, _one_of_each(describe)))
    assert fields["error_code"] == 54
    create = APIS[ApiKey.CreateAcls]
    request = create.request(creations=[create.request.AclCreation(
        resource_type=2, resource_name="t", resource_pattern_type=3, principal="User:a",
        host="*", operation=3, permission_type=3)])
    fields = asyncio.run(handler.create_acls(create, 1, request))
    assert [result.error_code for result in fields["results"]] == [54]


def test_every_served_api_is_behind_a_check() -> None:
    async def answer(_api: Any, _version: int, _request: Any) -> Any:
        return {}
    served = {key: answer for key in APIS}
    wrapped = checks({}).wrap(served)
    assert set(wrapped) == set(served)
    unchecked = {ApiKey(key).name for key in served if wrapped[key] is answer}
    assert unchecked <= {"ApiVersions", "Produce", "SaslHandshake", "SaslAuthenticate",
                         "DescribeTopicPartitions"}, unchecked


def test_an_api_served_without_a_check_is_refused_at_start() -> None:
    async def answer(_api: Any, _version: int, _request: Any) -> Any:
        return {}
    with pytest.raises(ValueError, match=r"DescribeDelegationToken.*without an authorization"):
        checks({}).wrap({ApiKey.Fetch: answer, ApiKey.DescribeDelegationToken: answer})
