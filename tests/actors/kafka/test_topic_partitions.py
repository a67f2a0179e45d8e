"""DescribeTopicPartitions' pages and checks, on a broker's metadata as the cache answers it
(pure: a stand-in broker answers `metadata`)."""

from __future__ import annotations

import asyncio
from typing import Any

from kafka.protocol.admin import DescribeTopicPartitionsRequest
from kafka.protocol.api_key import ApiKey

from rafka.actors.kafka.topic_partitions import TopicPartitionsHandler
from rafka.coordination.topic_ids import topic_id_uuid
from rafka.wire.protocol import APIS, encode_response

API = APIS[ApiKey.DescribeTopicPartitions]
IDS = {"team-a": "AAAAAAAAAAAAAAAAAAAAAg", "team-b": "AAAAAAAAAAAAAAAAAAAAAw",
       "secret": "AAAAAAAAAAAAAAAAAAAABA"}


class Broker:
    """Answers `metadata` as the metadata cache would: three topics, broker 2 down."""

    async def metadata(self, topics: list[str] | None = None) -> dict[str, Any]:
        counts = {"team-a": 2, "team-b": 1, "secret": 1}
        names = sorted(counts) if topics is None else [t for t in topics if t in counts]
        return {
            "brokers": [0, 1],
            "topics": {name: {index: {"leader": 0 if index else 1, "leader_epoch": 3,
                                      "isr": [0, 1], "replicas": [0, 1, 2]}
                              for index in range(counts[name])} for name in names},
            "topic_ids": {name: IDS[name] for name in names},
        }


def describe(names: list[str], limit: int = 100, cursor: tuple[str, int] | None = None,
             allowed: Any = None) -> Any:
    handler = TopicPartitionsHandler(Broker(), frozenset(), allowed)  # type: ignore[arg-type]
    request = DescribeTopicPartitionsRequest(
        topics=[DescribeTopicPartitionsRequest.TopicRequest(name=name) for name in names],
        response_partition_limit=limit,
        cursor=None if cursor is None else DescribeTopicPartitionsRequest.Cursor(
            topic_name=cursor[0], partition_index=cursor[1]))
    fields = asyncio.run(handler.describe_topic_partitions(API, 0, request))
    encoded = encode_response(API, 0, 7, **fields)  # what a client reads
    return API.response.decode(encoded[4:], version=0, header=True)


def test_every_topic_the_client_may_describe_in_name_order_with_its_id() -> None:
    answer = describe([], allowed=lambda name: name.startswith("team-"))
    assert [(t.name, t.error_code, t.topic_id) for t in answer.topics] == [
        ("team-a", 0, topic_id_uuid(IDS["team-a"])), ("team-b", 0, topic_id_uuid(IDS["team-b"]))]
    first = answer.topics[0].partitions[1]
    assert (first.partition_index, first.leader_id, first.leader_epoch, first.replica_nodes,
            first.isr_nodes, first.offline_replicas) == (1, 0, 3, [0, 1, 2], [0, 1], [2])
    assert answer.next_cursor is None


def test_named_topics_refused_or_unknown_are_answered_so() -> None:
    answer = describe(["secret", "nowhere", "team-b"], allowed=lambda name: name != "secret")
    assert [(t.name, t.error_code) for t in answer.topics] == [
        ("nowhere", 3), ("secret", 29), ("team-b", 0)]
    assert all(t.partitions == [] for t in answer.topics[:2])


def test_pages_follow_the_cursor_and_stop_at_the_limit() -> None:
    def page(limit: int, cursor: tuple[str, int] | None = None) -> tuple[list, Any]:
        answer = describe([], limit, cursor)
        after = answer.next_cursor
        return ([(t.name, [p.partition_index for p in t.partitions]) for t in answer.topics],
                after and (after.topic_name, after.partition_index))

    assert page(2) == ([("secret", [0]), ("team-a", [0])], ("team-a", 1))
    assert page(2, ("team-a", 1)) == ([("team-a", [1]), ("team-b", [0])], None)
    assert page(1, ("team-b", 0)) == ([("team-b", [0])], None)
