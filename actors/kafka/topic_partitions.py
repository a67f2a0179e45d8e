"""DescribeTopicPartitions (KIP-966): topics and their partitions as Metadata describes them,
with their ids, a page at a time, for `kafka-topics.sh --describe` and admin clients of Kafka
3.8+.

Topics come in name order, their partitions in index order, from the request's cursor (a topic
and partition) on, at most `response_partition_limit` partitions in all (capped at Kafka's
`max.request.partition.size.limit`, 2,000); where partitions are left, `next_cursor` names
the first of them. A request naming no topic describes every topic the client may DESCRIBE;
one it names and may not describe is answered TOPIC_AUTHORIZATION_FAILED, one that does not
exist UNKNOWN_TOPIC_OR_PARTITION. The handler checks DESCRIBE itself (the listing of every
topic is paged after the check).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from rafka.actors.broker_view import BrokerView
from rafka.actors.errors import ErrorCode
from rafka.actors.kafka.topic_ids import uuid_of
from rafka.common.acl import TOPIC_AUTHORIZATION_FAILED
from rafka.coordination.topic_ids import NO_TOPIC_ID
from rafka.wire.protocol import Api

# Kafka's max.request.partition.size.limit.
MAX_PARTITIONS_PER_RESPONSE = 2000


class TopicPartitionsHandler:
    """`allowed(topic)`: whether the client may DESCRIBE it (None: no authorizer)."""

    def __init__(self, broker: BrokerView, internal_topics: frozenset[str],
                 allowed: Callable[[str], bool] | None) -> None:
        self.broker = broker
        self.internal_topics = internal_topics
        self.allowed = allowed

    async def describe_topic_partitions(self, api: Api, version: int, request: Any
                                        ) -> dict[str, Any]:
        response = api.response
        topic_entry = response.DescribeTopicPartitionsResponseTopic
        named = sorted({topic.name for topic in request.topics})
        metadata = await self.broker.metadata(named or None)
        live = set(metadata["brokers"])
        may = self.allowed or (lambda _name: True)
        names = named or [name for name in sorted(metadata["topics"]) if may(name)]
        cursor = request.cursor
        if cursor is not None:
            names = [name for name in names if name >= cursor.topic_name]
        budget = max(1, min(request.response_partition_limit, MAX_PARTITIONS_PER_RESPONSE))
        topics, next_cursor = [], None
        for name in names:
            if not may(name):
                topics.append(topic_entry(error_code=TOPIC_AUTHORIZATION_FAILED,
                                          name=name, topic_id=NO_TOPIC_ID, is_internal=False,
                                          partitions=[]))
                continue
            partitions = metadata["topics"].get(name)
            if partitions is None:
                topics.append(topic_entry(error_code=ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                                          name=name, topic_id=NO_TOPIC_ID, is_internal=False,
                                          partitions=[]))
                continue
            first = cursor.partition_index if cursor is not None \
                and name == cursor.topic_name else 0
            indexes = [index for index in sorted(partitions) if index >= first]
            if budget == 0 and indexes:
                next_cursor = response.Cursor(topic_name=name, partition_index=indexes[0])
                break
            shown, left = indexes[:budget], indexes[budget:]
            budget -= len(shown)
            topics.append(topic_entry(
                error_code=0, name=name, topic_id=uuid_of(metadata["topic_ids"], name),
                is_internal=name in self.internal_topics,
                partitions=[_partition(topic_entry, index, partitions[index], live)
                            for index in shown]))
            if left:
                next_cursor = response.Cursor(topic_name=name, partition_index=left[0])
                break
        return {"throttle_time_ms": 0, "topics": topics, "next_cursor": next_cursor}


def _partition(topic_entry: Any, index: int, state: dict[str, Any], live: set[int]) -> Any:
    leader = state["leader"]
    return topic_entry.DescribeTopicPartitionsResponsePartition(
        error_code=0 if leader >= 0 else ErrorCode.LEADER_NOT_AVAILABLE, partition_index=index,
        leader_id=leader, leader_epoch=state["leader_epoch"], replica_nodes=state["replicas"],
        isr_nodes=state["isr"], eligible_leader_replicas=[], last_known_elr=[],
        offline_replicas=[replica for replica in state["replicas"] if replica not in live])
