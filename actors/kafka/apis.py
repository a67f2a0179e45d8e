"""The handlers of Kafka's APIs for one broker, one `handle_<api>` per ApiKey, as Kafka's
`KafkaApis` beside its `SocketServer` (`actors/kafka/listener.py` reads the requests and
writes the answers; this answers them).

`handler_for(api_key)` is the one table every request is dispatched through, so what must
wrap every handler (authorization, say) has one place to do it. A Produce or Fetch goes to
the replica host of this broker's replica (the same calls rafka's own clients make), and a
partition this broker does not hold gets NOT_LEADER_OR_FOLLOWER, after which the client asks
for metadata again. Metadata comes from the broker's metadata cache (kept by the controller,
never read from ZooKeeper per request), with each broker's address from the `endpoints` of
its registration. A batch too large for its topic is refused from its header before it goes
anywhere. Record batches are converted between Kafka's format and rafka's by
`rafka.wire.records`, in the replica hosts that hold the partitions (the handlers only pass
bytes through); group requests go to the group coordinator (`actors/group/coordinator.py`),
topic administration to `actors/kafka/admin.py`, transactions to
`actors/kafka/transactions.py`, reassignments and log dirs to `actors/kafka/replica_admin.py`.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from functools import partial
from typing import Any

from kafka.protocol.api_key import ApiKey

from rafka.actors.config import TopicConfig
from rafka.actors.dataport import frames
from rafka.actors.dataport.async_client import HostConnections, RequestTooLarge
from rafka.actors.dataport.frames import (
    KAFKA_FETCH,
    KAFKA_PRODUCE,
    LIST_OFFSETS,
    OFFSETS_FOR_LEADER_EPOCH,
)
from rafka.actors.errors import ErrorCode, code_of, error_reply
from rafka.actors.group.coordinator import GroupCoordinator
from rafka.actors.kafka.acls import KafkaAclHandler
from rafka.actors.kafka.admin import KafkaAdminHandler
from rafka.actors.kafka.authorization import (
    CLUSTER_OPERATIONS,
    AclCache,
    RequestAuthorization,
    authorizer_from_config,
)
from rafka.actors.kafka.fetch_sessions import (
    FetchSessionLayer,
    KafkaFetchSessions,
    kept_in_session,
)
from rafka.actors.kafka.quota_admin import ClientQuotaAdmin
from rafka.actors.kafka.read_replicas import FollowerFetching
from rafka.actors.kafka.replica_admin import ReplicaAdminHandler
from rafka.actors.kafka.sasl import sasl_not_enabled
from rafka.actors.kafka.scram_admin import ScramAdminHandler
from rafka.actors.kafka.topic_ids import TopicIdResolver, uuid_of
from rafka.actors.kafka.topic_partitions import TopicPartitionsHandler
from rafka.actors.kafka.transactions import KafkaTransactionHandler
from rafka.actors.messages import (
    Appended,
    DeletedRecords,
    EpochEndOffset,
    EpochQuery,
    ErrorReply,
    FetchedRecords,
    ListedOffset,
    OffsetQuery,
    PartitionFetch,
    PartitionProduce,
    RecordsDeletion,
    TxnMarker,
)
from rafka.actors.offsets_topic import OFFSETS_TOPIC
from rafka.actors.txn.transaction_state import TRANSACTION_STATE_TOPIC
from rafka.actors.txn.view import TransactionalBrokerView
from rafka.common.sentinels import UNDEFINED_EPOCH, UNDEFINED_OFFSET
from rafka.common.topic_partition import TopicPartition
from rafka.coordination.topic_ids import NO_TOPIC_ID
from rafka.coordination.validation import is_valid_topic_name
from rafka.logstore.batch import NO_TIMESTAMP
from rafka.logstore.errors import RecordTooLargeError
from rafka.wire.produce import PartitionAnswer, produce_response
from rafka.wire.protocol import Api
from rafka.wire.records import check_bounds

log = logging.getLogger(__name__)

INTERNAL_TOPICS = frozenset((OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC))

# A handler returns its response's fields, the response already written (Produce), or None (none).
Handler = Callable[[Api, int, Any], Awaitable[dict[str, Any] | bytes | None]]
# How long a WriteTxnMarkers request waits for each marker to reach its partition's ISR (the
# request carries no timeout; Kafka's coordinator waits on its own request.timeout.ms).
_MARKER_TIMEOUT_MS = 30_000
# The most a replica host's answer over its data port may carry: a fetch's records beyond the
# client's max_bytes when its first batch is larger, as Kafka answers. The host is the
# cluster's own, token-checked; this bounds a stray answer, not a hostile one.
_MAX_HOST_ANSWER_BYTES = 1 << 30
# DescribeCluster's endpoint types: brokers (1); 2, controllers, is KRaft's.
_BROKER_ENDPOINTS = 1


class KafkaApis:
    """Answers the Kafka requests `broker` is sent, each by its ApiKey's handler."""

    def __init__(self, broker: TransactionalBrokerView) -> None:
        self.broker = broker
        # Calls to a replica host that raised or found the host gone (each answered
        # NOT_LEADER_OR_FOLLOWER): none while the hosts are healthy, whatever clients send.
        self.host_failures = 0
        config = broker.config
        # Each topic's max.message.bytes, and the config it was read from.
        self._topic_limits: dict[str, tuple[dict[str, Any], int]] = {}
        # Kafka clients' Produce, Fetch, ListOffsets and OffsetFetch go to the replica hosts
        # over connections kept to their data ports (kafka.listener.host.transport=tcp): an
        # actor call cost the listener more than the rest of a produce request's work, and
        # made OffsetFetch slower than Produce (docs/kafka-protocol.md).
        self._host_timeout_s = config.request_timeout_ms / 1000
        self._host_connections = HostConnections(
            self._host_timeout_s, config.socket_request_max_bytes, _MAX_HOST_ANSWER_BYTES,
        ) if config.kafka_listener_host_transport == "tcp" else None
        self.groups = GroupCoordinator(broker, self._call_host)
        self.transactions = KafkaTransactionHandler(broker.transactions)
        self.follower_fetching = FollowerFetching(broker)
        self.topics = KafkaAdminHandler(broker)
        self.replicas = ReplicaAdminHandler(broker)
        self.quotas = ClientQuotaAdmin.of(broker)
        self.scram = ScramAdminHandler(broker)
        self._handlers: dict[int, Handler] = {
            ApiKey.Produce: self.handle_produce,
            ApiKey.Fetch: self.handle_fetch,
            ApiKey.ListOffsets: self.handle_list_offsets,
            ApiKey.OffsetForLeaderEpoch: self.handle_offset_for_leader_epoch,
            ApiKey.Metadata: self.handle_metadata,
            ApiKey.OffsetCommit: self.groups.offset_commit,
            ApiKey.OffsetFetch: self.groups.offset_fetch,
            ApiKey.FindCoordinator: self.groups.find_coordinator,
            ApiKey.JoinGroup: self.groups.join_group,
            ApiKey.Heartbeat: self.groups.heartbeat,
            ApiKey.LeaveGroup: self.groups.leave_group,
            ApiKey.SyncGroup: self.groups.sync_group,
            ApiKey.DescribeGroups: self.groups.listing.describe_groups,
            ApiKey.ListGroups: self.groups.listing.list_groups,
            ApiKey.DeleteGroups: self.groups.delete_groups,
            ApiKey.OffsetDelete: self.groups.offset_delete,
            ApiKey.ConsumerGroupHeartbeat: self.groups.consumer_groups.heartbeat,
            ApiKey.ConsumerGroupDescribe: self.groups.consumer_groups.describe,
            ApiKey.DescribeCluster: self.handle_describe_cluster,
            ApiKey.CreateTopics: self.topics.create_topics,
            ApiKey.DeleteTopics: self.topics.delete_topics,
            ApiKey.InitProducerId: self.transactions.init_producer_id,
            ApiKey.AddPartitionsToTxn: self.transactions.add_partitions_to_txn,
            ApiKey.AddOffsetsToTxn: self.transactions.add_offsets_to_txn,
            ApiKey.EndTxn: self.transactions.end_txn,
            ApiKey.TxnOffsetCommit: self.groups.txn_offset_commit,
            ApiKey.ListTransactions: self.transactions.list_transactions,
            ApiKey.DescribeTransactions: self.transactions.describe_transactions,
            ApiKey.DescribeConfigs: self.topics.describe_configs,
            ApiKey.AlterConfigs: self.topics.alter_configs,
            ApiKey.IncrementalAlterConfigs: self.topics.incremental_alter_configs,
            ApiKey.CreatePartitions: self.topics.create_partitions,
            ApiKey.ElectLeaders: self.topics.elect_leaders,
            ApiKey.DeleteRecords: self.handle_delete_records,
            ApiKey.DescribeProducers: self.handle_describe_producers,
            ApiKey.WriteTxnMarkers: self.handle_write_txn_markers,
            ApiKey.DescribeLogDirs: self.replicas.describe_log_dirs,
            ApiKey.AlterReplicaLogDirs: self.replicas.alter_replica_log_dirs,
            ApiKey.AlterPartitionReassignments: self.replicas.alter_partition_reassignments,
            ApiKey.ListPartitionReassignments: self.replicas.list_partition_reassignments,
            ApiKey.DescribeClientQuotas: self.quotas.describe_client_quotas,
            ApiKey.AlterClientQuotas: self.quotas.alter_client_quotas,
            ApiKey.SaslHandshake: sasl_not_enabled,  # a SASL listener answers them itself
            ApiKey.SaslAuthenticate: sasl_not_enabled,
            ApiKey.DescribeUserScramCredentials: self.scram.describe_user_scram_credentials,
            ApiKey.AlterUserScramCredentials: self.scram.alter_user_scram_credentials,
        }
        # With an authorizer every handler is behind its API's checks (authorization.py).
        authorizer = authorizer_from_config(config)
        self._handlers.update(KafkaAclHandler(broker, authorizer is not None).handlers())
        self.acl_cache = None if authorizer is None else AclCache(authorizer)
        self.authorization = None if authorizer is None else RequestAuthorization(
            authorizer, config)
        self._handlers[ApiKey.DescribeTopicPartitions] = TopicPartitionsHandler(
            broker, INTERNAL_TOPICS, None if self.authorization is None
            else self.authorization.may_describe_topic).describe_topic_partitions
        if self.authorization is not None:
            self._handlers = self.authorization.wrap(self._handlers)
        # A fetch in a session is made whole before the checks see it (fetch_sessions.py).
        self.fetch_sessions = KafkaFetchSessions(config.max_incremental_fetch_session_cache_slots)
        self._handlers[ApiKey.Fetch] = FetchSessionLayer(
            self.fetch_sessions, broker.topic_name_of).wrap(self._handlers[ApiKey.Fetch])
        # Topics named by id get their names before the checks see them.
        self._handlers = TopicIdResolver(broker).wrap(self._handlers)

    def start(self) -> None:
        """Start the group coordinator's timers (sessions, rebalances), and the watch that
        keeps the ACLs current."""
        self.groups.start()
        if self.acl_cache is not None and self.broker.store is not None:
            self.acl_cache.start(self.broker.store)

    async def close(self) -> None:
        await self.groups.close()
        if self.acl_cache is not None:
            self.acl_cache.close()
        if self._host_connections is not None:
            self._host_connections.close()

    def handler_for(self, api_key: int) -> Handler:
        """The handler of the API `api_key` (one rafka serves: the request decoded)."""
        return self._handlers[api_key]

    @property
    def host_calls_over_data_ports(self) -> int:
        """How many calls to replica hosts were answered over their data ports."""
        return 0 if self._host_connections is None else self._host_connections.answered

    async def _call_host(self, host: Any, method: str, wait_ms: int, *arguments: Any) -> Any:
        """`host.<method>(*arguments)`, which may wait `wait_ms` on the host: over a kept
        connection to its data port if the port serves the method, else as an actor call."""
        if self._host_connections is not None and method in frames.REQUESTS:
            try:
                return await self._host_connections.call(
                    host, method, max(wait_ms, 0) / 1000 + self._host_timeout_s, *arguments)
            except RequestTooLarge:
                pass  # longer than the port takes: an actor call has no such bound
        return await getattr(host, method).remote(*arguments)

    async def _each_host(self, parts: list[Any], call: Callable[[Any, list[Any]], Any],
                         ) -> dict[tuple[str, int], Any]:
        """Hand each replica host of this broker its share of `parts` (each names a topic and
        a partition) in one `call`, and return every part's reply by (topic, partition), in
        the order asked; a partition this broker holds no replica of is NOT_LEADER_OR_FOLLOWER,
        so the client asks for metadata again."""
        replies: dict[tuple[str, int], Any] = {}
        by_host: dict[Any, list[Any]] = {}
        for part in parts:
            tp = (part.topic, part.partition)
            replies[tp] = _not_here(self.broker.broker_id, tp)
            host = self.broker.replica_host_for(*tp)
            if host is not None:
                by_host.setdefault(host, []).append(part)
        hosts = list(by_host)
        answers = await asyncio.gather(*(call(host, by_host[host]) for host in hosts),
                                       return_exceptions=True)
        self.host_failures += sum(isinstance(answer, BaseException) for answer in answers)
        for host, answer in zip(hosts, answers, strict=True):
            for part, reply in _each_reply(by_host[host], answer):
                replies[(part.topic, part.partition)] = reply
        return replies

    # ------------------------------------------------------------------------ metadata

    async def handle_metadata(self, api: Api, version: int, request: Any) -> dict[str, Any]:
        # v0 asks for every topic with an empty list; later versions with null. A topic asked
        # for by an id no topic has is left nameless (topic_ids.py).
        wanted = None if not request.topics and (version == 0 or request.topics is None) \
            else [topic.name for topic in request.topics or () if topic.name is not None]
        unknown_ids = [topic.topic_id for topic in request.topics or ()
                       if topic.name is None and version >= 10]
        invalid = {name for name in wanted or () if not is_valid_topic_name(name)}
        metadata = await self.broker.metadata(
            None if wanted is None else [name for name in wanted if name not in invalid])
        # Kafka creates a topic a client asks about, unless either side said not to (v4+ ask
        # whether to; older versions always may). Internal topics are never created so.
        may_create = self.broker.config.auto_create_topics_enable and (
            version < 4 or request.allow_auto_topic_creation)
        errors: dict[str, int] = {name: ErrorCode.INVALID_TOPIC_EXCEPTION for name in invalid}
        for name in wanted or ():
            if name not in invalid and name not in metadata["topics"]:
                errors[name] = (await self.topics.create_topic_for_metadata(name)
                                if may_create and not name.startswith("__") and (
                                    self.authorization is None
                                    or self.authorization.may_auto_create(name))
                                else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
        live = set(metadata["brokers"])
        response = api.response
        brokers = [response.MetadataResponseBroker(node_id=broker_id, host=host, port=port,
                                                   rack=rack)
                   for broker_id, host, port, rack in _advertised_brokers(metadata)]
        topics = []
        for name in wanted if wanted is not None else sorted(metadata["topics"]):
            partitions = metadata["topics"].get(name)
            if partitions is None:
                topics.append(response.MetadataResponseTopic(
                    error_code=errors.get(name, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION),
                    name=name, topic_id=NO_TOPIC_ID, is_internal=False, partitions=[]))
                continue
            topics.append(response.MetadataResponseTopic(
                error_code=0, name=name, topic_id=uuid_of(metadata["topic_ids"], name),
                is_internal=name in INTERNAL_TOPICS,
                partitions=[_partition_metadata(response, index, state, live)
                            for index, state in sorted(partitions.items())]))
        topics += [response.MetadataResponseTopic(
            error_code=ErrorCode.UNKNOWN_TOPIC_ID, name=None, topic_id=topic_id,
            is_internal=False, partitions=[]) for topic_id in unknown_ids]
        controller = metadata["controller"]
        # v8-10 may ask what the client may do on the cluster (KIP-430; v11 dropped it).
        asked_operations = 8 <= version <= 10 and request.include_cluster_authorized_operations
        return {"throttle_time_ms": 0, "brokers": brokers,
                "cluster_id": self.broker.cluster_name,
                "controller_id": -1 if controller is None else controller, "topics": topics,
                "authorized_operations": self._cluster_operations(asked_operations)}

    def _cluster_operations(self, asked: bool) -> set[int] | None:
        """What Metadata and DescribeCluster answer for the cluster's authorized operations
        (kafka-python's schemas name the field `authorized_operations`, the codes' bit field):
        those the client's principal may do, if asked (None, Kafka's INT32_MIN, if not);
        without an authorizer every one, as Kafka answers."""
        if not asked:
            return None
        if self.authorization is None:
            return {int(operation) for operation in CLUSTER_OPERATIONS}
        return self.authorization.cluster_operations()

    # ---------------------------------------------------------------- describe cluster

    async def handle_describe_cluster(self, api: Api, version: int, request: Any
                                      ) -> dict[str, Any]:
        """DescribeCluster (KIP-700): the cluster id, the controller and the brokers with
        their address on the client's listener and rack, from the metadata cache, as
        Metadata answers them. Endpoint type 2 (controllers, KRaft's) is refused with
        MISMATCHED_ENDPOINT_TYPE, as a Kafka broker refuses it."""
        endpoint_type = request.endpoint_type if version >= 1 else _BROKER_ENDPOINTS
        fields: dict[str, Any] = {
            "throttle_time_ms": 0, "error_code": 0, "error_message": None,
            "endpoint_type": endpoint_type, "cluster_id": self.broker.cluster_name,
            "controller_id": -1, "brokers": [], "authorized_operations": None}
        if endpoint_type != _BROKER_ENDPOINTS:
            fields.update(error_code=ErrorCode.MISMATCHED_ENDPOINT_TYPE,
                          error_message="the request was sent to a broker, not a controller")
            return fields
        metadata = await self.broker.metadata([])
        controller = metadata["controller"]
        broker = api.response.DescribeClusterBroker
        fields.update(
            controller_id=-1 if controller is None else controller,
            brokers=[broker(broker_id=broker_id, host=host, port=port, rack=rack)
                     for broker_id, host, port, rack in _advertised_brokers(metadata)],
            authorized_operations=self._cluster_operations(
                request.include_cluster_authorized_operations))
        return fields

    # ------------------------------------------------------------------------- produce

    async def handle_produce(self, api: Api, version: int, request: Any) -> bytes | None:
        # The leader verifies a transaction's first batch by the request's transactional id
        # (v3+) with the coordinator (KIP-890, `actors/server/txn_verification.py`).
        # The hosts convert each partition's batches: in parallel, and never on this loop,
        # where the controller and every other connection of this broker run. A batch too
        # large for its topic by its headers alone is refused here, without a trip to a host.
        parts: list[PartitionProduce] = []
        errors: dict[tuple[str, int], tuple[int, str]] = (
            {} if self.authorization is None else self.authorization.refused_produce(request))
        for topic in request.topic_data:
            for part in topic.partition_data:
                tp = (topic.name, part.index)
                if tp in errors:
                    continue  # refused: nothing of it is appended
                records = part.records or b""
                limit = self._max_message_bytes(*tp)
                try:
                    if limit is not None:
                        check_bounds(records, limit)
                except RecordTooLargeError as error:
                    errors[tp] = (ErrorCode.MESSAGE_TOO_LARGE, str(error))
                else:
                    parts.append(PartitionProduce(*tp, records))
        replies = await self._each_host(
            parts, lambda host, share: self._call_host(
                host, KAFKA_PRODUCE, request.timeout_ms, share, request.acks,
                request.timeout_ms, getattr(request, "transactional_id", None)))
        if request.acks == 0:
            return None
        return _produce_response(version, request.header.correlation_id, errors, replies)

    def _max_message_bytes(self, topic: str, partition: int) -> int | None:
        """The topic's max.message.bytes, from the config its replica here was given (None if
        this broker holds none); parsed once per config the controller sends."""
        state = self.broker.replica_states.get(TopicPartition(topic, partition))
        if state is None:
            return None
        cached = self._topic_limits.get(topic)
        if cached is None or cached[0] is not state.config:
            cached = self._topic_limits[topic] = (
                state.config, TopicConfig.from_dict(state.config).log.max_message_bytes)
        return cached[1]

    # --------------------------------------------------------------------------- fetch

    async def handle_fetch(self, api: Api, version: int, request: Any) -> dict[str, Any]:
        # v13+ names topics by id (topic_ids.py): one no topic has is nameless here.
        parts = [PartitionFetch(topic.topic, part.partition, part.fetch_offset,
                                part.partition_max_bytes)
                 for topic in request.topics if topic.topic for part in topic.partitions]
        read_committed = request.isolation_level == 1
        parts, refused = self.follower_fetching.served_here(version, parts)  # read_replicas.py
        replies = await self._each_host(
            parts, lambda host, share: self._call_host(
                host, KAFKA_FETCH, request.max_wait_ms, share, request.max_wait_ms,
                request.min_bytes, request.max_bytes, read_committed))
        replies.update(refused)
        preferred = await self.follower_fetching.preferred(
            version, getattr(request, "rack_id", ""), replies)
        replies = kept_in_session(replies, preferred)  # in a session, only what changed
        response = api.response
        topics: dict[str, list[Any]] = {}
        for tp, reply in replies.items():
            topics.setdefault(tp[0], []).append(_fetched_partition(
                response.FetchableTopicResponse.PartitionData, tp[1], reply, read_committed,
                preferred.get(tp, -1)))
        ids = {name: topic_id for name in topics
               if (topic_id := self.broker.topic_id_of(name)) is not None} if version >= 13 else {}
        return {"throttle_time_ms": 0, "error_code": 0, "session_id": 0, "responses": [
            response.FetchableTopicResponse(topic=name, topic_id=uuid_of(ids, name),
                                            partitions=answers)
            for name, answers in topics.items()] + [
            _unknown_topic_id(response, topic) for topic in request.topics if not topic.topic]}

    # -------------------------------------------------------------------- list offsets

    async def handle_list_offsets(self, api: Api, version: int, request: Any) -> dict[str, Any]:
        read_committed = version >= 2 and request.isolation_level == 1
        queries = [OffsetQuery(topic.name, part.partition_index, part.timestamp, read_committed)
                   for topic in request.topics for part in topic.partitions]
        replies = await self._each_host(
            queries, lambda host, share: self._call_host(host, LIST_OFFSETS, 0, share))
        response = api.response.ListOffsetsTopicResponse
        topics = _per_topic(replies, partial(_listed, response.ListOffsetsPartitionResponse))
        return {"throttle_time_ms": 0,
                "topics": [response(name=name, partitions=parts)
                           for name, parts in topics.items()]}

    async def handle_offset_for_leader_epoch(self, api: Api, version: int, request: Any
                                             ) -> dict[str, Any]:
        """Where each asked leader epoch ends in the leader's log (KIP-320): a consumer whose
        partition changed leader checks that the offset it reached is still in the log, and
        learns the truncation point if it is not. The leaders' hosts answer, as they answer
        their followers (KIP-101); a `current_leader_epoch` older or newer than the leader's
        is FENCED_LEADER_EPOCH or UNKNOWN_LEADER_EPOCH."""
        queries = [EpochQuery(topic.topic, part.partition, part.leader_epoch,
                              part.current_leader_epoch)
                   for topic in request.topics for part in topic.partitions]
        replies = await self._each_host(queries, lambda host, share: self._call_host(
            host, OFFSETS_FOR_LEADER_EPOCH, 0, share))
        response = api.response.OffsetForLeaderTopicResult
        topics = _per_topic(replies, partial(_epoch_ended, response.EpochEndOffset))
        return {"throttle_time_ms": 0, "topics": [response(topic=name, partitions=parts)
                                                  for name, parts in topics.items()]}

    # --------------------------------------------------------------- describe producers

    async def handle_describe_producers(self, api: Api, version: int, request: Any
                                  ) -> dict[str, Any]:
        """The producers each partition's leader knows (what `kafka-transactions.sh
        describe-producers` shows, to find a transaction left open), at the leader, as
        Kafka asks it there."""
        partitions = [TopicPartition(topic.name, index)
                      for topic in request.topics for index in topic.partition_indexes]
        replies = await self._each_host(
            partitions, lambda host, share: host.active_producers.remote(share))
        response = api.response.TopicResponse
        state = response.PartitionResponse.ProducerState
        topics = _per_topic(replies, lambda partition, reply: response.PartitionResponse(
            partition_index=partition, error_code=code_of(reply),
            error_message=reply.message if isinstance(reply, ErrorReply) else None,
            active_producers=[] if isinstance(reply, ErrorReply)
            else [state(**producer) for producer in reply["producers"]]))
        return {"throttle_time_ms": 0, "topics": [response(name=name, partitions=parts)
                                                  for name, parts in topics.items()]}

    async def handle_write_txn_markers(self, api: Api, version: int, request: Any
                                 ) -> dict[str, Any]:
        """Commit or abort markers written at the partitions' leaders, each answered once
        its ISR holds it. rafka's own coordinator writes its markers through Ray; this is
        for `kafka-transactions.sh abort`, which ends a transaction its coordinator lost by
        writing the marker itself. The leader refuses a producer epoch older than its
        producer's (INVALID_PRODUCER_EPOCH) and a coordinator epoch older than the
        producer's last marker there (TRANSACTION_COORDINATOR_FENCED), as Kafka's does."""

        async def write(entry: Any) -> Any:
            markers = [TxnMarker(topic.name, index, entry.producer_id, entry.producer_epoch,
                                 entry.transaction_result, entry.coordinator_epoch)
                       for topic in entry.topics for index in topic.partition_indexes]
            replies = await self._each_host(markers, lambda host, share: (
                host.write_txn_markers.remote(share, _MARKER_TIMEOUT_MS)))
            result = api.response.WritableTxnMarkerResult.WritableTxnMarkerTopicResult
            topics = _per_topic(replies, lambda partition, reply: (
                result.WritableTxnMarkerPartitionResult(partition_index=partition,
                                                        error_code=code_of(reply))))
            return api.response.WritableTxnMarkerResult(
                producer_id=entry.producer_id,
                topics=[result(name=name, partitions=parts) for name, parts in topics.items()])

        return {"markers": list(await asyncio.gather(*map(write, request.markers)))}

    # ------------------------------------------------------------------ delete records

    async def handle_delete_records(self, api: Api, version: int, request: Any) -> dict[str, Any]:
        """DeleteRecords, at each partition's leader (clients send it there, as Produce):
        answered once the leader's log start moved, with the new log start as the low
        watermark; the followers follow on their next fetch."""
        deletions = [RecordsDeletion(topic.name, part.partition_index, part.offset)
                     for topic in request.topics for part in topic.partitions]
        replies = await self._each_host(
            deletions, lambda host, share: host.delete_records.remote(share))
        response = api.response.DeleteRecordsTopicResult
        topics = _per_topic(replies, lambda partition, reply: (
            response.DeleteRecordsPartitionResult(
                partition_index=partition,
                low_watermark=reply.low_watermark if isinstance(reply, DeletedRecords) else -1,
                error_code=code_of(reply))))
        return {"throttle_time_ms": 0, "topics": [response(name=name, partitions=parts)
                                                  for name, parts in topics.items()]}


def _advertised_brokers(metadata: dict[str, Any]) -> list[tuple[int, str, int, str | None]]:
    """(id, host, port, rack) of each broker with an endpoint on the client's listener, by
    id; a broker without one is left out, as Kafka leaves it out."""
    racks = metadata.get("racks", {})
    return [(broker_id, *endpoints[0], racks.get(broker_id))
            for broker_id, endpoints in sorted(metadata["endpoints"].items()) if endpoints]


def _each_reply(parts: list[Any], answer: Any) -> list[tuple[Any, Any]]:
    """Pair each part of a call to a host with its reply; a host that died or raised answers
    NOT_LEADER_OR_FOLLOWER for all of them, so the client asks where they are now."""
    if isinstance(answer, BaseException):
        log.warning("a replica host did not answer: %r", answer)
        failed = error_reply(ErrorCode.NOT_LEADER_OR_FOLLOWER,
                             f"the replica host did not answer: {answer!r}")
        return [(part, failed) for part in parts]
    return list(zip(parts, answer, strict=True))


def _listed(answer: Any, partition: int, reply: ListedOffset | ErrorReply) -> Any:
    """ListOffsets' answer for one partition."""
    found = (reply if isinstance(reply, ListedOffset)
             else ListedOffset(None, NO_TIMESTAMP, UNDEFINED_EPOCH))
    return answer(partition_index=partition, error_code=code_of(reply),
                  timestamp=found.timestamp,
                  offset=UNDEFINED_OFFSET if found.offset is None else found.offset,
                  leader_epoch=found.leader_epoch)


def _epoch_ended(answer: Any, partition: int, reply: EpochEndOffset | ErrorReply) -> Any:
    """OffsetForLeaderEpoch's answer for one partition."""
    found = (reply if isinstance(reply, EpochEndOffset)
             else EpochEndOffset(UNDEFINED_EPOCH, UNDEFINED_OFFSET))
    return answer(error_code=code_of(reply), partition=partition,
                  leader_epoch=found.leader_epoch, end_offset=found.end_offset)


def _per_topic(replies: dict[tuple[str, int], Any],
               answer: Callable[[int, Any], Any]) -> dict[str, list[Any]]:
    """`answer(partition, reply)` for each partition's reply, grouped by topic, as responses
    nest them."""
    topics: dict[str, list[Any]] = {}
    for (topic, partition), reply in replies.items():
        topics.setdefault(topic, []).append(answer(partition, reply))
    return topics


def _fetched_partition(partition_data: Any, partition: int,
                       reply: FetchedRecords | ErrorReply, read_committed: bool,
                       preferred_read_replica: int) -> Any:
    """One partition's answer to a Fetch: its records, or its error (an out-of-range offset
    still says where the log stands); none where the consumer is sent to another replica."""
    aborted: list[Any] = []
    if isinstance(reply, FetchedRecords):
        error, high_watermark, log_start_offset, last_stable_offset = (
            0, reply.high_watermark, reply.log_start_offset, reply.last_stable_offset)
        records = reply.records if preferred_read_replica < 0 else b""
        aborted = [partition_data.AbortedTransaction(producer_id=producer_id,
                                                     first_offset=first_offset)
                   for producer_id, first_offset in reply.aborted_transactions]
    else:
        error, high_watermark, log_start_offset, records = (
            reply.code, reply.high_watermark, reply.log_start_offset, b"")
        last_stable_offset = -1
    return partition_data(
        partition_index=partition, error_code=error, high_watermark=high_watermark,
        last_stable_offset=last_stable_offset, log_start_offset=log_start_offset,
        aborted_transactions=aborted if read_committed else None,
        preferred_read_replica=preferred_read_replica, records=records)


def _not_here(broker_id: int, tp: tuple[str, int]) -> ErrorReply:
    return error_reply(ErrorCode.NOT_LEADER_OR_FOLLOWER,
                       f"broker {broker_id} holds no replica of {tp[0]}-{tp[1]}")


def _produce_response(version: int, correlation_id: int,
                      errors: dict[tuple[str, int], tuple[int, str]],
                      replies: dict[tuple[str, int], Appended | ErrorReply]) -> bytes:
    answers = []
    for tp in sorted({*errors, *replies}):
        reply = replies.get(tp)
        if isinstance(reply, Appended):
            answers.append(PartitionAnswer(*tp, 0, reply.base_offset, reply.log_append_time,
                                           reply.log_start_offset))
        else:
            message: str | None
            if tp in errors:
                code, message = errors[tp]
            else:
                assert reply is not None  # every partition asked has an error or a reply
                code, message = reply.code, reply.message
            answers.append(PartitionAnswer(*tp, code, error_message=message))
    return produce_response(version, correlation_id, answers)


def _unknown_topic_id(response: Any, topic: Any) -> Any:
    """Fetch's answer for a topic named by an id no topic has (v13+)."""
    return response.FetchableTopicResponse(topic_id=topic.topic_id, partitions=[
        response.FetchableTopicResponse.PartitionData(
            partition_index=part.partition, error_code=ErrorCode.UNKNOWN_TOPIC_ID,
            high_watermark=-1, records=b"") for part in topic.partitions])


def _partition_metadata(response: Any, index: int, state: dict[str, Any], live: set[int]) -> Any:
    leader = state["leader"]
    return response.MetadataResponseTopic.MetadataResponsePartition(
        error_code=0 if leader >= 0 else ErrorCode.LEADER_NOT_AVAILABLE,
        partition_index=index, leader_id=leader, leader_epoch=state["leader_epoch"],
        replica_nodes=state["replicas"], isr_nodes=state["isr"],
        offline_replicas=[r for r in state["replicas"] if r not in live])
