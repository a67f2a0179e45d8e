"""The checks around the Kafka handlers, without a broker: a refused part never reaches its
handler and is answered with Kafka's *_AUTHORIZATION_FAILED code, the rest as usual; the
principal is the connection's at the time of the check."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

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


def test_a_group_request_without_read_on_the_group_is_refused_unhandled() -> None:
    auth = checks(allow("mine", AclOperation.READ, ResourceType.GROUP))
    api = APIS[ApiKey.JoinGroup]
    handler = Recording(error_code=0)
    wrapped = auth.wrap({ApiKey.JoinGroup: handler})[ApiKey.JoinGroup]
    theirs = as_alice(lambda: wrapped(api, 5, JoinGroupRequest(group_id="theirs")))
    assert theirs["error_code"] == 30
    assert handler.requests == []
    assert as_alice(lambda: wrapped(api, 5, JoinGroupRequest(group_id="mine")))["error_code"] == 0
