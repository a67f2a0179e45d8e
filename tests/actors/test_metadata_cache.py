"""A broker's metadata cache as the controller's updates leave it: no Ray, no ZooKeeper."""

from __future__ import annotations

from rafka.actors.messages import PartitionMetadata, UpdateMetadataRequest
from rafka.actors.metadata_cache import MetadataCache
from rafka.actors.naming import replica_host_name
from rafka.common.topic_partition import TopicPartition
from rafka.coordination.models import BrokerInfo


def broker(node_id: int, port: int | None = None) -> BrokerInfo:
    endpoints = (f"PLAINTEXT://10.0.0.{node_id}:{port}",) if port else ()
    return BrokerInfo(node_id, f"broker-{node_id}", f"10.0.0.{node_id}", replica_hosts=2,
                      endpoints=endpoints, rack="rack-a" if node_id == 0 else None)


def state(leader: int, epoch: int, version: int, isr=(0, 1, 2)) -> PartitionMetadata:
    return PartitionMetadata(leader, epoch, tuple(isr), (0, 1, 2), version)


BROKERS = {0: broker(0, 9092), 1: broker(1, 9093), 2: broker(2)}


def test_a_full_update_answers_metadata_as_the_broker_read_it_from_zookeeper() -> None:
    cache = MetadataCache()
    assert cache.apply(UpdateMetadataRequest(1, 3, BROKERS, {
        TopicPartition("orders", 0): state(1, 4, 7), TopicPartition("orders", 1): state(0, 2, 2),
        TopicPartition("audit", 0): state(2, 0, 0)}, full=True))
    answer = cache.metadata(["orders", "missing"])
    assert answer["brokers"] == [0, 1, 2] and answer["controller"] == 1
    assert answer["endpoints"] == {0: [("10.0.0.0", 9092)], 1: [("10.0.0.1", 9093)], 2: []}
    assert answer["racks"] == {0: "rack-a", 1: None, 2: None}  # Metadata's and DescribeCluster's
    assert set(answer["topics"]) == {"orders"}
    first = answer["topics"]["orders"][0]
    assert (first["leader"], first["leader_epoch"], first["isr"], first["replicas"]) == (
        1, 4, [0, 1, 2], [0, 1, 2])
    assert first["leader_host"] == replica_host_name(1, "orders", 0, 2)
    assert set(cache.metadata()["topics"]) == {"orders", "audit"}


def test_a_partition_never_goes_back_and_an_older_controller_is_refused() -> None:
    cache = MetadataCache()
    tp = TopicPartition("orders", 0)
    cache.apply(UpdateMetadataRequest(1, 3, BROKERS, {tp: state(1, 4, 7)}, full=True))
    # A late update of this controller with an older state of the partition changes nothing.
    cache.apply(UpdateMetadataRequest(1, 3, BROKERS, {tp: state(0, 3, 6)}))
    assert cache.metadata(["orders"])["topics"]["orders"][0]["leader"] == 1
    # The ISR shrinks under the same leader epoch: a newer znode version.
    cache.apply(UpdateMetadataRequest(1, 3, BROKERS, {tp: state(1, 4, 8, isr=(1,))}))
    assert cache.metadata(["orders"])["topics"]["orders"][0]["isr"] == [1]
    # A controller of an older epoch is not listened to.
    assert not cache.apply(UpdateMetadataRequest(0, 2, {}, {tp: state(0, 9, 9)}, full=True))
    assert cache.metadata()["brokers"] == [0, 1, 2]


def test_deleted_topics_go_and_a_full_update_forgets_what_it_does_not_name() -> None:
    cache = MetadataCache()
    cache.apply(UpdateMetadataRequest(1, 3, BROKERS, {
        TopicPartition("a", 0): state(0, 0, 0), TopicPartition("b", 0): state(1, 0, 0),
        TopicPartition("c", 0): state(2, 0, 0)}, full=True))
    cache.apply(UpdateMetadataRequest(1, 3, BROKERS, deleted_topics=("a",)))
    assert set(cache.metadata()["topics"]) == {"b", "c"}
    # A new controller's full update: "c" was deleted while this broker was away.
    cache.apply(UpdateMetadataRequest(2, 4, {1: BROKERS[1]},
                                      {TopicPartition("b", 0): state(1, 1, 1)}, full=True))
    answer = cache.metadata()
    assert set(answer["topics"]) == {"b"} and answer["brokers"] == [1]
    assert answer["controller"] == 2
    # The leader's broker is not live: no replica host to send to.
    cache.apply(UpdateMetadataRequest(2, 4, {1: BROKERS[1]},
                                      {TopicPartition("b", 0): state(0, 2, 2)}))
    assert cache.metadata(["b"])["topics"]["b"][0]["leader_host"] is None


def test_zookeepers_picture_at_start_fills_in_under_a_partial_update_that_came_first() -> None:
    """A restarted broker hears the controller's update of the partitions it changed before
    it has read ZooKeeper: the read must complete the topics, not be refused as older."""
    cache = MetadataCache()
    assert cache.apply(UpdateMetadataRequest(0, 5, BROKERS, {
        TopicPartition("orders", 1): state(2, 6, 9)}))
    cache.fill(UpdateMetadataRequest(-1, -1, BROKERS, {
        TopicPartition("orders", 0): state(0, 3, 4), TopicPartition("orders", 1): state(1, 5, 8),
        TopicPartition("orders", 2): state(1, 1, 1)}, full=True))
    partitions = cache.metadata(["orders"])["topics"]["orders"]
    assert sorted(partitions) == [0, 1, 2]
    assert (partitions[1]["leader"], partitions[1]["leader_epoch"]) == (2, 6)  # the newer kept
    assert cache.controller_epoch == 5


def test_topic_ids_come_with_their_topics_and_go_with_them() -> None:
    cache = MetadataCache()
    cache.apply(UpdateMetadataRequest(1, 3, BROKERS, {
        TopicPartition("a", 0): state(0, 0, 0), TopicPartition("b", 0): state(1, 0, 0)},
        full=True, topic_ids={"a": "id-of-a", "b": "id-of-b"}))
    assert cache.metadata(["a", "missing"])["topic_ids"] == {"a": "id-of-a"}
    cache.apply(UpdateMetadataRequest(1, 3, BROKERS, {TopicPartition("c", 0): state(2, 0, 0)},
                                      topic_ids={"c": "id-of-c"}))
    cache.apply(UpdateMetadataRequest(1, 3, BROKERS, deleted_topics=("a",)))
    assert cache.metadata()["topic_ids"] == {"b": "id-of-b", "c": "id-of-c"}
    # A full update replaces them; ZooKeeper's picture fills in what it lacks.
    cache.apply(UpdateMetadataRequest(2, 4, BROKERS, {TopicPartition("b", 0): state(1, 1, 1)},
                                      full=True, topic_ids={"b": "id-of-b"}))
    cache.fill(UpdateMetadataRequest(-1, -1, BROKERS, {
        TopicPartition("b", 0): state(1, 0, 0), TopicPartition("d", 0): state(0, 0, 0)},
        full=True, topic_ids={"b": "stale", "d": "id-of-d"}))
    assert cache.metadata()["topic_ids"] == {"b": "id-of-b", "d": "id-of-d"}
