"""What each Kafka API needs the client's principal to be allowed, checked as Kafka's
`KafkaApis` checks it, around the handlers of `actors/kafka/apis.py`.

With `authorizer.class.name` set (`kafka.security.authorizer.AclAuthorizer`, or its older
name `kafka.security.auth.SimpleAclAuthorizer`), every request is checked against the
broker's copy of the cluster's ACLs (`AclCache`, kept current by a watch on ZooKeeper's change
notifications); unset, Kafka's default, everything is allowed and no handler is wrapped. A part
refused is answered with Kafka's *_AUTHORIZATION_FAILED code and never reaches the handler, so
nothing of it is stored; the rest of the request is answered as usual. The principal and the
host are the connection's (`CLIENT_CONNECTION`, set by the listener): read at each check, so a
principal set after the connection opened (SASL) is the one checked.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Iterable
from contextvars import ContextVar
from functools import partial
from typing import Any

from kafka.protocol.api_key import ApiKey

from rafka.actors.config import BrokerConfig
from rafka.actors.kafka.connection import KafkaConnection
from rafka.common.acl import (
    CLUSTER_AUTHORIZATION_FAILED,
    CLUSTER_NAME,
    GROUP_AUTHORIZATION_FAILED,
    TOPIC_AUTHORIZATION_FAILED,
    TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
    AclOperation,
    Authorizer,
    ResourceType,
)
from rafka.coordination.acls import AclStore, watch_acl_changes
from rafka.coordination.store import ClusterStore
from rafka.coordination.watches import Watch
from rafka.wire.principal import ANONYMOUS
from rafka.wire.protocol import Api

log = logging.getLogger(__name__)

# The connection a request came on: its principal and address are what ACLs are checked for.
CLIENT_CONNECTION: ContextVar[KafkaConnection | None] = ContextVar(
    "CLIENT_CONNECTION", default=None)

AUTHORIZER_NAMES = frozenset(("kafka.security.authorizer.AclAuthorizer",
                              "kafka.security.auth.SimpleAclAuthorizer"))

Handler = Callable[[Api, int, Any], Awaitable[Any]]
# What a client may send before anyone knows who it is (ApiVersions is answered before any
# handler; SASL's two authenticate the connection).
NEEDS_NO_AUTHORIZATION = frozenset((ApiKey.ApiVersions, ApiKey.SaslHandshake,
                                    ApiKey.SaslAuthenticate))
# Produce's answer is written by hand (wire/produce.py): its handler asks `refused_produce`.
# DescribeTopicPartitions pages the topics the client may describe: its handler asks
# `may_describe_topic` before it pages.
CHECKED_BY_HANDLER = frozenset((ApiKey.Produce, ApiKey.DescribeTopicPartitions))
READ, WRITE, CREATE, DELETE, ALTER, DESCRIBE = (
    AclOperation.READ, AclOperation.WRITE, AclOperation.CREATE, AclOperation.DELETE,
    AclOperation.ALTER, AclOperation.DESCRIBE)
TOPIC, GROUP, CLUSTER, TXN = (ResourceType.TOPIC, ResourceType.GROUP, ResourceType.CLUSTER,
                              ResourceType.TRANSACTIONAL_ID)


# The operations an ACL on the cluster can allow (Kafka's AclEntry.supportedOperations(CLUSTER)).
CLUSTER_OPERATIONS = (AclOperation.CREATE, AclOperation.CLUSTER_ACTION,
                      AclOperation.DESCRIBE_CONFIGS, AclOperation.ALTER_CONFIGS,
                      AclOperation.IDEMPOTENT_WRITE, ALTER, DESCRIBE)
def authorizer_from_config(config: BrokerConfig) -> Authorizer | None:
    """The broker's authorizer, None when `authorizer.class.name` is unset."""
    if not config.authorizer_class_name:
        return None
    super_users = [user.strip() for user in (config.super_users or "").split(";")
                   if user.strip()]
    return Authorizer(super_users, config.allow_everyone_if_no_acl_found)


class AclCache:
    """The broker's copy of the cluster's ACLs, in `authorizer`, read again on every change
    notification."""

    def __init__(self, authorizer: Authorizer) -> None:
        self.authorizer = authorizer
        self._watches: list[Watch[Any]] = []

    def start(self, store: ClusterStore) -> None:
        """Read the ACLs, then keep them current. The first read blocks, once, before the
        listener answers any request: until then a deny could not be known (Kafka's
        authorizer loads them all when it starts, too)."""
        self.authorizer.update(AclStore(store).read_all())
        # The store's event thread: `update` swaps the snapshot whole.
        self._watches = watch_acl_changes(store, self.authorizer.update)

    def close(self) -> None:
        for watch in self._watches:
            watch.cancel()


class RequestAuthorization:
    """The checks of each API, for requests of the current connection."""

    def __init__(self, authorizer: Authorizer, config: BrokerConfig) -> None:
        self.authorizer = authorizer
        self.config = config

    # ------------------------------------------------------------------- deciding

    def allowed(self, operation: AclOperation, resource_type: ResourceType, name: str) -> bool:
        connection = CLIENT_CONNECTION.get()
        principal = connection.principal if connection is not None else ANONYMOUS
        peer = connection.peername if connection is not None else None
        host = str(peer[0]) if peer else ""
        return self.authorizer.authorize(str(principal), host, operation, resource_type, name)

    def cluster_allowed(self, operation: AclOperation) -> bool:
        return self.allowed(operation, CLUSTER, CLUSTER_NAME)

    def cluster_operations(self) -> set[int]:
        """The codes of the operations on the cluster the client may do, as Metadata and
        DescribeCluster answer them (KIP-430; the schemas write the codes as a bit field)."""
        return {int(op) for op in CLUSTER_OPERATIONS if self.cluster_allowed(op)}

    def may_describe_topic(self, name: str) -> bool:
        return self.allowed(DESCRIBE, TOPIC, name)

    def may_create_topic(self, name: str) -> bool:
        """CREATE on the cluster, else on the topic (Kafka's order)."""
        return self.cluster_allowed(CREATE) or self.allowed(CREATE, TOPIC, name)

    def may_auto_create(self, name: str) -> bool:
        """Whether a Metadata request may create the topic: one the client may DESCRIBE
        and CREATE."""
        return self.allowed(DESCRIBE, TOPIC, name) and self.may_create_topic(name)

    def refused_produce(self, request: Any) -> dict[tuple[str, int], tuple[int, str]]:
        """The partitions of a Produce not to append: all of a transactional id the client
        may not WRITE, else those of each topic it may not WRITE."""
        refused: dict[tuple[str, int], tuple[int, str]] = {}
        txn = request.transactional_id
        txn_refused = txn is not None and not self.allowed(WRITE, TXN, txn)
        for topic in request.topic_data:
            if txn_refused:
                answer = (TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
                          f"not authorized to WRITE transactional id {txn}")
            elif not self.allowed(WRITE, TOPIC, topic.name):
                answer = (TOPIC_AUTHORIZATION_FAILED,
                          f"not authorized to WRITE topic {topic.name}")
            else:
                continue
            for part in topic.partition_data:
                refused[(topic.name, part.index)] = answer
        return refused

    # ---------------------------------------------------------------- wrapping

    def wrap(self, handlers: dict[int, Handler]) -> dict[int, Handler]:
        """`handlers`, each behind its API's checks (Produce checks in its handler)."""
        checks: dict[int, Callable[[Handler, Api, int, Any], Awaitable[Any]]] = {
            ApiKey.Fetch: self._each_topic(READ, lambda topic: topic.topic, "responses",
                                           _fetch_refused),
            ApiKey.ListOffsets: self._each_topic(DESCRIBE, lambda topic: topic.name, "topics",
                                                 _list_offsets_refused),
            # DESCRIBE, as Kafka asks of a consumer's request (rafka's followers ask their
            # leaders over the data ports, not here).
            ApiKey.OffsetForLeaderEpoch: self._each_topic(
                DESCRIBE, lambda topic: topic.topic, "topics", _epoch_ends_refused),
            ApiKey.Metadata: self._metadata,
            ApiKey.CreateTopics: self._create_topics,
            ApiKey.DeleteTopics: partial(_delete_topics, self),
            ApiKey.OffsetCommit: self._offset_commit,
            ApiKey.OffsetFetch: self._offset_fetch,
            ApiKey.OffsetDelete: self._offset_delete,
            ApiKey.FindCoordinator: self._find_coordinator,
            ApiKey.JoinGroup: self._group_top_level(READ),
            ApiKey.Heartbeat: self._group_top_level(READ),
            ApiKey.LeaveGroup: self._group_top_level(READ),
            ApiKey.SyncGroup: self._group_top_level(READ),
            ApiKey.ConsumerGroupHeartbeat: partial(_consumer_group_heartbeat, self),
            ApiKey.ListGroups: self._list_groups,
            ApiKey.InitProducerId: self._init_producer_id,
            ApiKey.AddPartitionsToTxn: self._add_partitions_to_txn,
            ApiKey.AddOffsetsToTxn: self._add_offsets_to_txn,
            ApiKey.EndTxn: self._txn_top_level,
            ApiKey.TxnOffsetCommit: self._txn_offset_commit,
            ApiKey.ElectLeaders: self._cluster_top_level(ALTER),
            ApiKey.AlterPartitionReassignments: self._cluster_top_level(ALTER),
            ApiKey.ListPartitionReassignments: self._cluster_top_level(DESCRIBE),
            ApiKey.DescribeCluster: self._cluster_top_level(DESCRIBE, _cluster_refused),
            ApiKey.WriteTxnMarkers: self._write_txn_markers,
            **_admin_checks(self),
            ApiKey.ListTransactions: self._list_transactions,
            ApiKey.DescribeLogDirs: self._describe_log_dirs,
            ApiKey.AlterReplicaLogDirs: self._alter_replica_log_dirs,
            ApiKey.CreateAcls: self._cluster_top_level(ALTER, _acls_refused),
            ApiKey.DeleteAcls: self._cluster_top_level(ALTER, _acls_refused),
            ApiKey.DescribeAcls: self._cluster_top_level(DESCRIBE, _acls_refused),
            ApiKey.DescribeClientQuotas: self._cluster_top_level(
                AclOperation.DESCRIBE_CONFIGS, _client_quotas_refused),
            ApiKey.AlterClientQuotas: self._cluster_top_level(
                AclOperation.ALTER_CONFIGS, _client_quotas_refused),
            ApiKey.DescribeUserScramCredentials: self._cluster_top_level(
                DESCRIBE, _scram_credentials_refused),
            ApiKey.AlterUserScramCredentials: self._cluster_top_level(
                ALTER, _scram_credentials_refused),
        }
        # Secure by default: an API served without a check would be open to every principal.
        unchecked = set(handlers) - set(checks) - NEEDS_NO_AUTHORIZATION - CHECKED_BY_HANDLER
        if unchecked:
            raise ValueError(f"APIs {sorted(ApiKey(key).name for key in unchecked)} are served "
                             "without an authorization check: add theirs to "
                             "RequestAuthorization.wrap")
        return {key: _bound(checks[key], handler) if key in checks else handler
                for key, handler in handlers.items()}

    # ------------------------------------------------------------------ per API

    def _each_topic(self, operation: AclOperation, name_of: Callable[[Any], str], field: str,
                    refused_answer: Callable[[Any, Any], Any]
                    ) -> Callable[..., Awaitable[Any]]:
        """The check of an API whose request lists topics: those `operation` is refused on
        (each named by `name_of`) are taken out of the request and answered in the response's
        `field` by `refused_answer(api.response, topic)`, the rest handled."""

        async def check(handler: Handler, api: Api, version: int, request: Any) -> Any:
            # A topic named by an id no topic has is nameless: its handler answers it.
            refused = [topic for topic in request.topics if name_of(topic)
                       and not self.allowed(operation, TOPIC, name_of(topic))]
            if refused:
                request.topics = [topic for topic in request.topics if topic not in refused]
            fields = await handler(api, version, request)
            fields[field] += [refused_answer(api.response, topic) for topic in refused]
            return fields

        return check

    async def _metadata(self, handler: Handler, api: Api, version: int, request: Any) -> Any:
        # Metadata's handler creates topics only if `may_create_topic` (apis.py); here a
        # topic the client may not DESCRIBE is left out of a listing of all, and refused
        # when named, whether it exists or not (so its existence is not told).
        every_topic = not request.topics and (version == 0 or request.topics is None)
        fields = await handler(api, version, request)
        may_create = self.config.auto_create_topics_enable and (
            version < 4 or request.allow_auto_topic_creation)
        topics = []
        for topic in fields["topics"]:
            if topic.name is None:  # an id no topic has: UNKNOWN_TOPIC_ID tells nothing
                topics.append(topic)
                continue
            if not self.allowed(DESCRIBE, TOPIC, topic.name):
                if every_topic:
                    continue
                topic = api.response.MetadataResponseTopic(
                    error_code=TOPIC_AUTHORIZATION_FAILED, name=topic.name,
                    topic_id=topic.topic_id, is_internal=False, partitions=[])
            elif (may_create and topic.error_code == 3  # UNKNOWN_TOPIC_OR_PARTITION
                  and not topic.name.startswith("__") and not self.may_create_topic(topic.name)):
                topic.error_code = TOPIC_AUTHORIZATION_FAILED
            topics.append(topic)
        fields["topics"] = topics
        return fields

    async def _create_topics(self, handler: Handler, api: Api, version: int,
                             request: Any) -> Any:
        refused = [topic for topic in request.topics if not self.may_create_topic(topic.name)]
        if refused:
            request.topics = [topic for topic in request.topics if topic not in refused]
        fields = await handler(api, version, request)
        fields["topics"] += [api.response.CreatableTopicResult(
            name=topic.name, error_code=TOPIC_AUTHORIZATION_FAILED,
            error_message=f"not authorized to CREATE topic {topic.name}", num_partitions=-1,
            replication_factor=-1, configs=None) for topic in refused]
        return fields

    async def _offset_commit(self, handler: Handler, api: Api, version: int,
                             request: Any) -> Any:
        response = api.response.OffsetCommitResponseTopic
        if not self.allowed(READ, GROUP, request.group_id):
            return {"throttle_time_ms": 0, "topics": _each_partition(
                request.topics, response, GROUP_AUTHORIZATION_FAILED)}
        refused = [topic for topic in request.topics if not self.allowed(READ, TOPIC, topic.name)]
        if refused:
            request.topics = [topic for topic in request.topics if topic not in refused]
        fields = await handler(api, version, request)
        fields["topics"] += _each_partition(refused, response, TOPIC_AUTHORIZATION_FAILED)
        return fields

    async def _offset_fetch(self, handler: Handler, api: Api, version: int,
                            request: Any) -> Any:
        response = api.response.OffsetFetchResponseTopic
        if not self.allowed(DESCRIBE, GROUP, request.group_id):
            # v1 has no error of its own: each partition asked carries it.
            return {"throttle_time_ms": 0, "error_code": GROUP_AUTHORIZATION_FAILED,
                    "topics": [] if version >= 2 else [response(name=topic.name, partitions=[
                        response.OffsetFetchResponsePartition(
                            partition_index=index, committed_offset=-1, metadata="",
                            error_code=GROUP_AUTHORIZATION_FAILED)
                        for index in topic.partition_indexes]) for topic in request.topics or ()]}
        refused = [topic for topic in request.topics or ()
                   if not self.allowed(DESCRIBE, TOPIC, topic.name)]
        if refused:
            request.topics = [topic for topic in request.topics if topic not in refused]
        fields = await handler(api, version, request)
        if request.topics is None:  # every committed topic: only those it may describe
            fields["topics"] = [topic for topic in fields["topics"]
                                if self.allowed(DESCRIBE, TOPIC, topic.name)]
        fields["topics"] += [response(name=topic.name, partitions=[
            response.OffsetFetchResponsePartition(
                partition_index=index, committed_offset=-1, metadata="",
                error_code=TOPIC_AUTHORIZATION_FAILED)
            for index in topic.partition_indexes]) for topic in refused]
        return fields

    async def _offset_delete(self, handler: Handler, api: Api, version: int,
                             request: Any) -> Any:
        """DELETE on the group, then READ on each topic, as Kafka checks OffsetDelete; a
        group refused is answered with its error alone."""
        if not self.allowed(DELETE, GROUP, request.group_id):
            return {"throttle_time_ms": 0, "error_code": GROUP_AUTHORIZATION_FAILED,
                    "topics": []}
        refused = [topic for topic in request.topics if not self.allowed(READ, TOPIC, topic.name)]
        if refused:
            request.topics = [topic for topic in request.topics if topic not in refused]
        fields = await handler(api, version, request)
        if fields["error_code"] == 0:  # a group's error stands alone, as Kafka answers it
            fields["topics"] += _each_partition(refused, api.response.OffsetDeleteResponseTopic,
                                                TOPIC_AUTHORIZATION_FAILED)
        return fields

    async def _find_coordinator(self, handler: Handler, api: Api, version: int,
                                request: Any) -> Any:
        if version >= 1 and request.key_type == 1:
            allowed, code = self.allowed(DESCRIBE, TXN, request.key), \
                TRANSACTIONAL_ID_AUTHORIZATION_FAILED
        else:
            allowed, code = self.allowed(DESCRIBE, GROUP, request.key), \
                GROUP_AUTHORIZATION_FAILED
        if allowed:
            return await handler(api, version, request)
        return {"throttle_time_ms": 0, "error_code": code, "node_id": -1, "host": "",
                "port": -1, "error_message": "not authorized"}

    def _group_top_level(self, operation: AclOperation) -> Callable[..., Awaitable[Any]]:
        async def check(handler: Handler, api: Api, version: int, request: Any) -> Any:
            if self.allowed(operation, GROUP, request.group_id):
                return await handler(api, version, request)
            return {"throttle_time_ms": 0, "error_code": GROUP_AUTHORIZATION_FAILED}
        return check

    async def _list_groups(self, handler: Handler, api: Api, version: int,
                           request: Any) -> Any:
        fields = await handler(api, version, request)
        if not self.cluster_allowed(DESCRIBE):
            fields["groups"] = [group for group in fields["groups"]
                                if self.allowed(DESCRIBE, GROUP, group.group_id)]
        return fields

    async def _init_producer_id(self, handler: Handler, api: Api, version: int,
                                request: Any) -> Any:
        txn = request.transactional_id
        if txn is not None:
            if not self.allowed(WRITE, TXN, txn):
                return _refused_producer_id(TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
        elif not (self.cluster_allowed(AclOperation.IDEMPOTENT_WRITE)
                  or self._may_write_some_topic()):
            return _refused_producer_id(CLUSTER_AUTHORIZATION_FAILED)
        return await handler(api, version, request)

    def _may_write_some_topic(self) -> bool:
        """Kafka's `authorizeByResourceType(WRITE, TOPIC)`, approximately: an idempotent
        producer may start if it may WRITE some topic; checked on the topics the ACLs name
        (literal and prefixed alike) and, with allow.everyone.if.no.acl.found, on a topic
        none names."""
        names = {pattern.name for pattern in self.authorizer.acls
                 if pattern.resource_type == TOPIC}
        return any(self.allowed(WRITE, TOPIC, name) for name in names) or (
            self.authorizer.allow_if_no_acl and not any(
                pattern.name == "*" for pattern in self.authorizer.acls
                if pattern.resource_type == TOPIC))

    async def _add_partitions_to_txn(self, handler: Handler, api: Api, version: int,
                                     request: Any) -> Any:
        if version >= 4:  # between brokers (KIP-890), as Kafka checks it
            if self.cluster_allowed(AclOperation.CLUSTER_ACTION):
                return await handler(api, version, request)
            return {"throttle_time_ms": 0, "error_code": CLUSTER_AUTHORIZATION_FAILED,
                    "results_by_transaction": []}
        txn = request.v3_and_below_transactional_id
        topics = request.v3_and_below_topics
        if not self.allowed(WRITE, TXN, txn):
            code = TRANSACTIONAL_ID_AUTHORIZATION_FAILED
        elif any(not self.allowed(WRITE, TOPIC, topic.name) for topic in topics):
            code = TOPIC_AUTHORIZATION_FAILED
        else:
            return await handler(api, version, request)
        result = api.response.AddPartitionsToTxnTopicResult
        return {"throttle_time_ms": 0, "results_by_topic_v3_and_below": [
            result(name=topic.name, results_by_partition=[
                result.AddPartitionsToTxnPartitionResult(
                    partition_index=index, partition_error_code=(
                        code if code != TOPIC_AUTHORIZATION_FAILED
                        or not self.allowed(WRITE, TOPIC, topic.name)
                        else 55))  # OPERATION_NOT_ATTEMPTED
                for index in topic.partitions]) for topic in topics]}

    async def _add_offsets_to_txn(self, handler: Handler, api: Api, version: int,
                                  request: Any) -> Any:
        if not self.allowed(WRITE, TXN, request.transactional_id):
            return {"throttle_time_ms": 0, "error_code": TRANSACTIONAL_ID_AUTHORIZATION_FAILED}
        if not self.allowed(READ, GROUP, request.group_id):
            return {"throttle_time_ms": 0, "error_code": GROUP_AUTHORIZATION_FAILED}
        return await handler(api, version, request)

    async def _txn_top_level(self, handler: Handler, api: Api, version: int,
                             request: Any) -> Any:
        if self.allowed(WRITE, TXN, request.transactional_id):
            return await handler(api, version, request)
        return {"throttle_time_ms": 0, "error_code": TRANSACTIONAL_ID_AUTHORIZATION_FAILED}

    async def _txn_offset_commit(self, handler: Handler, api: Api, version: int,
                                 request: Any) -> Any:
        response = api.response.TxnOffsetCommitResponseTopic
        if not self.allowed(WRITE, TXN, request.transactional_id):
            code = TRANSACTIONAL_ID_AUTHORIZATION_FAILED
        elif not self.allowed(READ, GROUP, request.group_id):
            code = GROUP_AUTHORIZATION_FAILED
        else:
            refused = [topic for topic in request.topics
                       if not self.allowed(READ, TOPIC, topic.name)]
            if refused:
                request.topics = [topic for topic in request.topics if topic not in refused]
            fields = await handler(api, version, request)
            fields["topics"] += _each_partition(refused, response, TOPIC_AUTHORIZATION_FAILED)
            return fields
        return {"throttle_time_ms": 0,
                "topics": _each_partition(request.topics, response, code)}

    def per_item(self, asked: str, answered: str, allowed: Callable[[Any], bool],
                  refusal: Callable[[Api, Any], Any]) -> Callable[..., Awaitable[Any]]:
        """A check of each item of the request's list `asked`: those refused are taken out
        before the handler runs, and their `refusal` added to the response's list `answered`."""
        async def check(handler: Handler, api: Api, version: int, request: Any) -> Any:
            items = getattr(request, asked) or []
            refused = [item for item in items if not allowed(item)]
            if refused:
                setattr(request, asked, [item for item in items if item not in refused])
            fields = await handler(api, version, request)
            fields[answered] = [*fields[answered], *(refusal(api, item) for item in refused)]
            return fields
        return check

    def config_check(self, operation: AclOperation) -> Callable[[Any], bool]:
        """A topic's configs need `operation` on the topic, a broker's on the cluster."""
        def allowed(resource: Any) -> bool:
            if resource.resource_type == _TOPIC_CONFIG:
                return self.allowed(operation, TOPIC, resource.resource_name)
            return self.cluster_allowed(operation)
        return allowed

    async def _list_transactions(self, handler: Handler, api: Api, version: int,
                                 request: Any) -> Any:
        fields = await handler(api, version, request)
        fields["transaction_states"] = [
            state for state in fields["transaction_states"]
            if self.allowed(DESCRIBE, TXN, state.transactional_id)]
        return fields

    async def _describe_log_dirs(self, handler: Handler, api: Api, version: int,
                                 request: Any) -> Any:
        if self.cluster_allowed(DESCRIBE):
            return await handler(api, version, request)
        return {"throttle_time_ms": 0, "error_code": CLUSTER_AUTHORIZATION_FAILED,
                "results": []}

    async def _alter_replica_log_dirs(self, handler: Handler, api: Api, version: int,
                                      request: Any) -> Any:
        if self.cluster_allowed(ALTER):
            return await handler(api, version, request)
        result = api.response.AlterReplicaLogDirTopicResult
        return {"throttle_time_ms": 0, "results": [
            result(topic_name=topic.name, partitions=[
                result.AlterReplicaLogDirPartitionResult(
                    partition_index=index, error_code=CLUSTER_AUTHORIZATION_FAILED)
                for index in topic.partitions])
            for entry in request.dirs for topic in entry.topics]}

    def _cluster_top_level(self, operation: AclOperation,
                           refusal: Refusal | None = None) -> Callable[..., Awaitable[Any]]:
        """A check of `operation` on the cluster; a refused request is answered by `refusal`
        (its API's answer, each item refused), else by a top-level error."""
        async def check(handler: Handler, api: Api, version: int, request: Any) -> Any:
            if self.cluster_allowed(operation):
                return await handler(api, version, request)
            message = f"not authorized to {operation.name} the cluster"
            if refusal is not None:
                return refusal(api, request, message)
            return {"throttle_time_ms": 0, "error_code": CLUSTER_AUTHORIZATION_FAILED,
                    "error_message": message}
        return check

    async def _write_txn_markers(self, handler: Handler, api: Api, version: int,
                                 request: Any) -> Any:
        if self.cluster_allowed(AclOperation.CLUSTER_ACTION):
            return await handler(api, version, request)
        result = api.response.WritableTxnMarkerResult.WritableTxnMarkerTopicResult
        return {"markers": [api.response.WritableTxnMarkerResult(
            producer_id=entry.producer_id, topics=[result(name=topic.name, partitions=[
                result.WritableTxnMarkerPartitionResult(
                    partition_index=index, error_code=CLUSTER_AUTHORIZATION_FAILED)
                for index in topic.partition_indexes]) for topic in entry.topics])
            for entry in request.markers]}


# What a request refused on the cluster is answered, for the APIs whose answer has no top-level
# error or carries one per item.
Refusal = Callable[[Api, Any, str], dict[str, Any]]


def _client_quotas_refused(api: Api, request: Any, message: str) -> dict[str, Any]:
    if api.key == ApiKey.DescribeClientQuotas:
        return {"throttle_time_ms": 0, "error_code": CLUSTER_AUTHORIZATION_FAILED,
                "error_message": message, "entries": None}
    entry = api.response.EntryData
    return {"throttle_time_ms": 0, "entries": [
        entry(error_code=CLUSTER_AUTHORIZATION_FAILED, error_message=message, entity=[
            entry.EntityData(entity_type=part.entity_type, entity_name=part.entity_name)
            for part in asked.entity])
        for asked in request.entries]}


def _scram_credentials_refused(api: Api, request: Any, message: str) -> dict[str, Any]:
    if api.key == ApiKey.DescribeUserScramCredentials:
        return {"throttle_time_ms": 0, "error_code": CLUSTER_AUTHORIZATION_FAILED,
                "error_message": message, "results": []}
    users = dict.fromkeys(change.name for change in (*request.deletions, *request.upsertions))
    return {"throttle_time_ms": 0, "results": [
        api.response.AlterUserScramCredentialsResult(
            user=user, error_code=CLUSTER_AUTHORIZATION_FAILED, error_message=message)
        for user in users]}


def _fetch_refused(response: Any, topic: Any) -> Any:
    return response.FetchableTopicResponse(topic=topic.topic, topic_id=topic.topic_id, partitions=[
        response.FetchableTopicResponse.PartitionData(
            partition_index=part.partition, error_code=TOPIC_AUTHORIZATION_FAILED,
            high_watermark=-1, records=b"") for part in topic.partitions])


def _list_offsets_refused(response: Any, topic: Any) -> Any:
    result = response.ListOffsetsTopicResponse
    return result(name=topic.name, partitions=[result.ListOffsetsPartitionResponse(
        partition_index=part.partition_index, error_code=TOPIC_AUTHORIZATION_FAILED,
        timestamp=-1, offset=-1) for part in topic.partitions])


def _epoch_ends_refused(response: Any, topic: Any) -> Any:
    result = response.OffsetForLeaderTopicResult
    return result(topic=topic.topic, partitions=[result.EpochEndOffset(
        partition=part.partition, error_code=TOPIC_AUTHORIZATION_FAILED, leader_epoch=-1,
        end_offset=-1) for part in topic.partitions])


def _cluster_refused(api: Api, request: Any, message: str) -> dict[str, Any]:
    """DescribeCluster refused: its error, and no broker."""
    return {"throttle_time_ms": 0, "error_code": CLUSTER_AUTHORIZATION_FAILED,
            "error_message": message, "endpoint_type": 1, "cluster_id": "",
            "controller_id": -1, "brokers": [], "authorized_operations": None}


def _acls_refused(api: Api, request: Any, message: str) -> dict[str, Any]:
    if api.key == ApiKey.DescribeAcls:
        return {"throttle_time_ms": 0, "error_code": CLUSTER_AUTHORIZATION_FAILED,
                "error_message": message, "resources": []}
    if api.key == ApiKey.CreateAcls:
        return {"throttle_time_ms": 0, "results": [
            api.response.AclCreationResult(error_code=CLUSTER_AUTHORIZATION_FAILED,
                                           error_message=message)
            for _ in request.creations]}
    return {"throttle_time_ms": 0, "filter_results": [
        api.response.DeleteAclsFilterResult(error_code=CLUSTER_AUTHORIZATION_FAILED,
                                            error_message=message, matching_acls=[])
        for _ in request.filters]}


def _admin_checks(auth: RequestAuthorization) -> dict[int, Callable[..., Awaitable[Any]]]:
    """The checks of the admin APIs that check each item of a list on its own."""
    return {
        ApiKey.DeleteRecords: auth.per_item(
            "topics", "topics", lambda topic: auth.allowed(DELETE, TOPIC, topic.name),
            lambda api, topic: api.response.DeleteRecordsTopicResult(
                name=topic.name, partitions=[
                    api.response.DeleteRecordsTopicResult.DeleteRecordsPartitionResult(
                        partition_index=part.partition_index, low_watermark=-1,
                        error_code=TOPIC_AUTHORIZATION_FAILED)
                    for part in topic.partitions])),
        ApiKey.CreatePartitions: auth.per_item(
            "topics", "results", lambda topic: auth.allowed(ALTER, TOPIC, topic.name),
            lambda api, topic: api.response.CreatePartitionsTopicResult(
                name=topic.name, error_code=TOPIC_AUTHORIZATION_FAILED,
                error_message=f"not authorized to ALTER topic {topic.name}")),
        ApiKey.DescribeProducers: auth.per_item(
            "topics", "topics", lambda topic: auth.allowed(READ, TOPIC, topic.name),
            lambda api, topic: api.response.TopicResponse(name=topic.name, partitions=[
                api.response.TopicResponse.PartitionResponse(
                    partition_index=index, error_code=TOPIC_AUTHORIZATION_FAILED,
                    active_producers=[]) for index in topic.partition_indexes])),
        ApiKey.DescribeConfigs: auth.per_item(
            "resources", "results", auth.config_check(AclOperation.DESCRIBE_CONFIGS),
            lambda api, resource: api.response.DescribeConfigsResult(
                error_code=_config_refusal(resource), error_message="not authorized",
                resource_type=resource.resource_type,
                resource_name=resource.resource_name, configs=[])),
        ApiKey.AlterConfigs: auth.per_item(
            "resources", "responses", auth.config_check(AclOperation.ALTER_CONFIGS),
            _refused_config_change),
        ApiKey.IncrementalAlterConfigs: auth.per_item(
            "resources", "responses", auth.config_check(AclOperation.ALTER_CONFIGS),
            _refused_config_change),
        ApiKey.DescribeGroups: auth.per_item(
            "groups", "groups", lambda group: auth.allowed(DESCRIBE, GROUP, group),
            lambda api, group: api.response.DescribedGroup(
                error_code=GROUP_AUTHORIZATION_FAILED, group_id=group, group_state="",
                protocol_type="", protocol_data="", members=[])),
        ApiKey.ConsumerGroupDescribe: auth.per_item(
            "group_ids", "groups", lambda group: auth.allowed(DESCRIBE, GROUP, group),
            lambda api, group: api.response.DescribedGroup(
                error_code=GROUP_AUTHORIZATION_FAILED, group_id=group, group_state="",
                group_epoch=-1, assignment_epoch=-1, assignor_name="", members=[])),
        ApiKey.DeleteGroups: auth.per_item(
            "groups_names", "results", lambda group: auth.allowed(DELETE, GROUP, group),
            lambda api, group: api.response.DeletableGroupResult(
                group_id=group, error_code=GROUP_AUTHORIZATION_FAILED)),
        ApiKey.DescribeTransactions: auth.per_item(
            "transactional_ids", "transaction_states",
            lambda txn: auth.allowed(DESCRIBE, TXN, txn),
            lambda api, txn: api.response.TransactionState(
                error_code=TRANSACTIONAL_ID_AUTHORIZATION_FAILED, transactional_id=txn,
                transaction_state="", topics=[])),
    }


def _bound(check: Callable[[Handler, Api, int, Any], Awaitable[Any]],
           handler: Handler) -> Handler:
    async def checked(api: Api, version: int, request: Any) -> Any:
        fields = await check(handler, api, version, request)
        if not isinstance(fields, dict):
            return fields
        # A refusal names its error fields once for every version; keep those this one has.
        schema = api.response._struct.fields
        return {name: value for name, value in fields.items()
                if name in schema and schema[name].for_version_q(version)}
    return checked


def _each_partition(topics: Iterable[Any], response: Any, code: int) -> list[Any]:
    """`code` for every partition of `topics`, in an OffsetCommit-shaped response."""
    partition = next(value for name, value in vars(response).items()
                     if name.endswith("Partition") and isinstance(value, type))
    return [response(name=topic.name, partitions=[
        partition(partition_index=part.partition_index, error_code=code)
        for part in topic.partitions]) for topic in topics]


# DescribeConfigs' and AlterConfigs' resource type of a topic (4 is a broker's).
_TOPIC_CONFIG = 2


def _config_refusal(resource: Any) -> int:
    return (TOPIC_AUTHORIZATION_FAILED if resource.resource_type == _TOPIC_CONFIG
            else CLUSTER_AUTHORIZATION_FAILED)


def _refused_config_change(api: Api, resource: Any) -> Any:
    return api.response.AlterConfigsResourceResponse(
        error_code=_config_refusal(resource), error_message="not authorized",
        resource_type=resource.resource_type, resource_name=resource.resource_name)


def _refused_producer_id(code: int) -> dict[str, Any]:
    return {"throttle_time_ms": 0, "error_code": code, "producer_id": -1, "producer_epoch": -1}


async def _consumer_group_heartbeat(auth: RequestAuthorization, handler: Handler, api: Api,
                                    version: int, request: Any) -> Any:
    """READ on the group, and DESCRIBE on every topic subscribed to by name (Kafka's
    checks; topics a regex subscription finds are not checked, and their records still
    need READ to fetch)."""
    if not auth.allowed(READ, GROUP, request.group_id):
        return {"throttle_time_ms": 0, "error_code": GROUP_AUTHORIZATION_FAILED,
                "member_epoch": -1, "heartbeat_interval_ms": 0}
    refused = sorted(topic for topic in request.subscribed_topic_names or ()
                     if not auth.allowed(DESCRIBE, TOPIC, topic))
    if refused:
        return {"throttle_time_ms": 0, "error_code": TOPIC_AUTHORIZATION_FAILED,
                "error_message": f"not authorized to DESCRIBE topics {', '.join(refused)}",
                "member_epoch": -1, "heartbeat_interval_ms": 0}
    return await handler(api, version, request)


async def _delete_topics(auth: RequestAuthorization, handler: Handler, api: Api, version: int,
                         request: Any) -> Any:
    """DeleteTopics' check: DELETE on each topic. v6 topics named by an id no topic has are
    nameless (`topic_ids.py`): the handler answers them."""
    names = ([topic.name for topic in request.topics if topic.name is not None]
             if version >= 6 else list(request.topic_names))
    refused = [name for name in names if not auth.allowed(DELETE, TOPIC, name)]
    ids = {}
    if refused:
        if version >= 6:
            ids = {topic.name: topic.topic_id for topic in request.topics}
            request.topics = [topic for topic in request.topics if topic.name not in refused]
        else:
            request.topic_names = [name for name in names if name not in refused]
    fields = await handler(api, version, request)
    fields["responses"] += [api.response.DeletableTopicResult(
        name=name, topic_id=ids.get(name), error_code=TOPIC_AUTHORIZATION_FAILED,
        error_message=f"not authorized to DELETE topic {name}") for name in refused]
    return fields
