"""Topic ids (KIP-516) as Kafka clients meet them: CreateTopics v7 answers a new topic's id,
every broker's Metadata names it by the same id and finds it by id, Fetch v13 reads it by id,
DescribeTopicPartitions (KIP-966) pages through topics with their ids, DeleteTopics v6 deletes
by id, and a topic deleted and created again under its name is another id; a topic created
before topics had ids gets one from the controller."""

from __future__ import annotations

import uuid
from typing import Any

from kafka.protocol.admin import (
    CreateTopicsRequest,
    DeleteTopicsRequest,
    DescribeTopicPartitionsRequest,
)
from kafka.protocol.consumer import FetchRequest
from kafka.protocol.metadata import MetadataRequest
from kafka.record import MemoryRecords

from rafka import Cluster
from rafka.actors.errors import ErrorCode
from rafka.coordination import layout
from rafka.coordination.models import TopicAssignment, topic_config_json
from rafka.coordination.topic_ids import topic_id_text, topic_id_uuid
from tests.support.cluster import fresh
from tests.support.kafka_wire import KafkaWire
from tests.support.waiting import wait_until


def create(wire: KafkaWire, name: str, partitions: int) -> uuid.UUID:
    """CreateTopics v7: the new topic's id."""
    topic = CreateTopicsRequest.CreatableTopic(name=name, num_partitions=partitions,
                                               replication_factor=2, assignments=[],
                                               configs=[])
    [result] = wire.ask(CreateTopicsRequest(topics=[topic], timeout_ms=30_000,
                                            validate_only=False), 7).topics
    assert (result.name, result.error_code, result.num_partitions) == (name, 0, partitions)
    assert result.topic_id is not None
    return result.topic_id


def metadata_answer(wire: KafkaWire, *, names: list[str] = (),
                    ids: list[uuid.UUID] = ()) -> Any:
    """Metadata v12 of topics by name and by id: the whole answer."""
    asked = [MetadataRequest.MetadataRequestTopic(name=name, topic_id=None) for name in names]
    asked += [MetadataRequest.MetadataRequestTopic(name=None, topic_id=topic_id)
              for topic_id in ids]
    return wire.ask(MetadataRequest(topics=asked, allow_auto_topic_creation=False,
                                    include_topic_authorized_operations=False), 12)


def metadata(wire: KafkaWire, *, names: list[str] = (), ids: list[uuid.UUID] = ()) -> list:
    """Each topic's Metadata v12 answer."""
    return metadata_answer(wire, names=names, ids=ids).topics


def delete(wire: KafkaWire, *, name: str | None = None, topic_id: uuid.UUID | None = None):
    state = DeleteTopicsRequest.DeleteTopicState(name=name, topic_id=topic_id)
    [answer] = wire.ask(DeleteTopicsRequest(topics=[state], timeout_ms=30_000), 6).responses
    return answer


def test_a_topic_has_one_id_everywhere_and_another_once_made_again(
        kafka_cluster: Cluster) -> None:
    name = fresh("ids")
    servers = kafka_cluster.bootstrap_servers().split(",")
    with KafkaWire(servers[0]) as wire:
        first = create(wire, name, 3)
        assert kafka_cluster.describe_topic(name)["topic_id"] == topic_id_text(first)
        for server in servers:  # every broker's metadata cache has it from the controller
            with KafkaWire(server) as other:
                [answer] = metadata(other, names=[name])
                assert (answer.error_code, answer.topic_id) == (0, first)
        [by_id] = metadata(wire, ids=[first])
        assert (by_id.error_code, by_id.name, len(by_id.partitions)) == (0, name, 3)

        deleted = delete(wire, topic_id=first)
        assert (deleted.error_code, deleted.name, deleted.topic_id) == (0, name, first)
        [gone] = metadata(wire, ids=[first])
        assert (gone.error_code, gone.name, gone.topic_id) == (
            ErrorCode.UNKNOWN_TOPIC_ID, None, first)
        again = delete(wire, topic_id=first)
        assert (again.error_code, again.topic_id) == (ErrorCode.UNKNOWN_TOPIC_ID, first)

        second = create(wire, name, 1)  # the same name: another topic, another id
        assert second != first
        [answer] = metadata(wire, names=[name])
        assert answer.topic_id == second
        deleted = delete(wire, name=name)
        assert (deleted.error_code, deleted.topic_id) == (0, second)


def test_describe_topic_partitions_pages_topics_in_name_order_by_its_cursor(
        kafka_cluster: Cluster) -> None:
    prefix = fresh("paged")
    names = [f"{prefix}-a", f"{prefix}-b"]
    with KafkaWire(kafka_cluster.bootstrap_servers()) as wire:
        ids = [create(wire, names[0], 3), create(wire, names[1], 2)]

        def page(limit: int, cursor: tuple[str, int] | None = None
                 ) -> tuple[list[tuple[str, list[int]]], tuple[str, int] | None]:
            request = DescribeTopicPartitionsRequest(
                topics=[DescribeTopicPartitionsRequest.TopicRequest(name=name)
                        for name in [*reversed(names), f"{prefix}-missing"]],
                response_partition_limit=limit,
                cursor=None if cursor is None else DescribeTopicPartitionsRequest.Cursor(
                    topic_name=cursor[0], partition_index=cursor[1]))
            answer = wire.ask(request, 0)
            for topic in answer.topics:
                if topic.name in names:
                    assert (topic.error_code, topic.topic_id) == (0, ids[names.index(
                        topic.name)])
                    assert all(len(p.replica_nodes) == 2 and p.leader_id in p.isr_nodes
                               for p in topic.partitions)
                else:
                    assert topic.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            after = answer.next_cursor
            return ([(t.name, [p.partition_index for p in t.partitions])
                     for t in answer.topics if t.name in names],
                    None if after is None else (after.topic_name, after.partition_index))

        assert page(2) == ([(names[0], [0, 1])], (names[0], 2))
        assert page(2, (names[0], 2)) == ([(names[0], [2]), (names[1], [0])], (names[1], 1))
        assert page(2, (names[1], 1)) == ([(names[1], [1])], None)
        assert page(100) == ([(names[0], [0, 1, 2]), (names[1], [0, 1])], None)


def test_a_topic_made_before_topics_had_ids_gets_one_from_the_controller(
        kafka_cluster: Cluster) -> None:
    """As an older rafka wrote it: the assignment without an id. The controller, finding
    the topic, gives it one, and the brokers answer it."""
    name = fresh("older")
    store = kafka_cluster.store
    store.create(layout.topic_config_path(name), topic_config_json({}))
    store.create(layout.topic_path(name),
                 TopicAssignment({0: (0, 1)}).to_json())
    found = wait_until(lambda: kafka_cluster.describe_topic(name)["topic_id"], 30,
                       "the controller to give the topic an id")
    with KafkaWire(kafka_cluster.bootstrap_servers()) as wire:
        def answered() -> bool:
            [answer] = metadata(wire, names=[name])
            return answer.error_code == 0 and answer.topic_id == topic_id_uuid(found)
        wait_until(answered, 30, "the brokers to answer the topic's id")


def test_a_fetch_by_topic_id_reads_the_topic_and_an_unknown_id_is_refused(
        kafka_cluster: Cluster) -> None:
    name = fresh("fetched")
    servers = kafka_cluster.bootstrap_servers().split(",")
    with KafkaWire(servers[0]) as wire:
        topic_id = create(wire, name, 1)
        producer = kafka_cluster.producer(acks="all")
        producer.send_batch(name, [b"v%d" % i for i in range(5)])
        producer.close()
        described = metadata_answer(wire, names=[name])
    leader = described.topics[0].partitions[0].leader_id
    broker = next(b for b in described.brokers if b.node_id == leader)

    def asked(asked_id: uuid.UUID) -> FetchRequest.FetchTopic:
        return FetchRequest.FetchTopic(topic_id=asked_id, partitions=[
            FetchRequest.FetchTopic.FetchPartition(
                partition=0, current_leader_epoch=-1, fetch_offset=0, last_fetched_epoch=-1,
                log_start_offset=-1, partition_max_bytes=1 << 20)])

    stranger = uuid.uuid4()
    with KafkaWire((broker.host, broker.port)) as wire:
        answer = wire.ask(FetchRequest(
            replica_id=-1, max_wait_ms=100, min_bytes=1, max_bytes=1 << 20, isolation_level=0,
            session_id=0, session_epoch=-1, topics=[asked(topic_id), asked(stranger)],
            forgotten_topics_data=[], rack_id=""), 13)
    found = {topic.topic_id: topic.partitions[0] for topic in answer.responses}
    assert (found[topic_id].error_code, found[topic_id].high_watermark) == (0, 5)
    records = MemoryRecords(found[topic_id].records)
    values = []
    while (batch := records.next_batch()) is not None:
        values += [record.value for record in batch]
    assert values == [b"v%d" % i for i in range(5)]
    assert found[stranger].error_code == ErrorCode.UNKNOWN_TOPIC_ID
