"""Follower fetching for Kafka clients (KIP-392), on three brokers in three racks with Kafka's
RackAwareReplicaSelector: a consumer that names its rack reads from the replica in its rack,
the leader or a follower, every record once and in order; one that names none reads from the
leaders; a follower answers Fetch v11+ up to its high watermark and refuses older versions;
and a leader names the follower in the asker's rack."""

from __future__ import annotations

import json
import time
from typing import Any

import confluent_kafka
from kafka.protocol.consumer import FetchRequest

from rafka import Cluster
from rafka.actors.errors import ErrorCode
from tests.kafka_clients.test_kafka_answers import address_of
from tests.support.cluster import fresh, module_cluster
from tests.support.kafka_wire import KafkaWire
from tests.support.waiting import wait_until

RACKS = {0: "zone-a", 1: "zone-b", 2: "zone-c"}
PARTITIONS, RECORDS = 6, 200

racked = module_cluster(
    "follower-fetching", kafka_listeners="PLAINTEXT://127.0.0.1:0",
    broker_config={"replica.selector.class":
                   "org.apache.kafka.common.replica.RackAwareReplicaSelector"},
    broker_overrides={broker: {"broker.rack": rack} for broker, rack in RACKS.items()})


def written_topic(cluster: Cluster) -> tuple[str, dict[int, int]]:
    """A topic of PARTITIONS partitions (RF 3) holding RECORDS records each, every replica
    caught up; and each partition's leader."""
    topic = fresh("follower-reads")
    cluster.create_topic(topic, partitions=PARTITIONS, replication_factor=3,
                         config={"min.insync.replicas": "3"})
    producer = confluent_kafka.Producer({"bootstrap.servers": cluster.bootstrap_servers(),
                                         "acks": "all", "enable.idempotence": True})
    for partition in range(PARTITIONS):
        for index in range(RECORDS):
            producer.produce(topic, value=b"%d-%d" % (partition, index), partition=partition)
    assert producer.flush(60) == 0
    described = cluster.describe_topic(topic)["partitions"]
    # min.insync.replicas=3: every acknowledged record is on every replica; the followers
    # learn the high watermark on their next fetch.
    return topic, {p["partition"]: p["leader"] for p in described}


def read_all(cluster: Cluster, topic: str, rack: str | None
             ) -> tuple[dict[int, list[bytes]], dict[int, int]]:
    """Every record of `topic` as a confluent-kafka consumer in `rack` reads it, by
    partition; and, per partition, the broker it was fetching from at the end (librdkafka's
    statistics)."""
    fetched_from: dict[int, int] = {}

    def statistics(raw: str) -> None:
        for partition, state in json.loads(raw)["topics"].get(topic, {})["partitions"].items():
            if int(partition) >= 0 and state["broker"] >= 0:
                fetched_from[int(partition)] = state["broker"]

    config: dict[str, Any] = {
        "bootstrap.servers": cluster.bootstrap_servers(), "group.id": fresh("reader"),
        "auto.offset.reset": "earliest", "enable.auto.commit": False,
        "statistics.interval.ms": 200, "stats_cb": statistics}
    if rack is not None:
        config["client.rack"] = rack
    consumer = confluent_kafka.Consumer(config)
    consumer.assign([confluent_kafka.TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
    values: dict[int, list[bytes]] = {p: [] for p in range(PARTITIONS)}
    deadline = time.monotonic() + 60
    try:
        while sum(map(len, values.values())) < PARTITIONS * RECORDS:
            assert time.monotonic() < deadline, {p: len(v) for p, v in values.items()}
            message = consumer.poll(0.5)
            if message is not None:
                assert message.error() is None, message.error()
                values[message.partition()].append(message.value())
        # Statistics come through poll(); a round after the last record, then every partition.
        fetched_from.clear()
        wait_until(lambda: consumer.poll(0.2) is None and len(fetched_from) == PARTITIONS, 10,
                   "statistics of every partition")
    finally:
        consumer.close()
    return values, dict(fetched_from)


def expected(partition: int) -> list[bytes]:
    return [b"%d-%d" % (partition, index) for index in range(RECORDS)]


def test_a_consumer_reads_every_record_from_the_replica_in_its_rack(racked: Cluster) -> None:
    topic, leaders = written_topic(racked)
    for broker, rack in RACKS.items():
        values, fetched_from = read_all(racked, topic, rack)
        assert values == {p: expected(p) for p in range(PARTITIONS)}
        # Every partition has a replica on every broker: each is read in the consumer's rack,
        # from followers for the partitions led elsewhere.
        assert fetched_from == dict.fromkeys(range(PARTITIONS), broker), (rack, leaders)
    assert set(leaders.values()) == set(RACKS)  # so each consumer read from followers too


def test_a_consumer_without_a_rack_reads_from_the_leaders(racked: Cluster) -> None:
    topic, leaders = written_topic(racked)
    values, fetched_from = read_all(racked, topic, None)
    assert values == {p: expected(p) for p in range(PARTITIONS)}
    assert fetched_from == leaders


def fetch(wire: KafkaWire, topic: str, partition: int, version: int, rack: str) -> Any:
    """The partition's answer to a Fetch from offset 0 at `version` (v11+ names `rack`)."""
    part = FetchRequest.FetchTopic.FetchPartition(
        partition=partition, current_leader_epoch=-1, fetch_offset=0, last_fetched_epoch=-1,
        log_start_offset=-1, partition_max_bytes=1 << 20)
    fields: dict[str, Any] = {
        "replica_id": -1, "max_wait_ms": 0, "min_bytes": 0, "max_bytes": 1 << 20,
        "isolation_level": 0, "session_id": 0, "session_epoch": -1,
        "topics": [FetchRequest.FetchTopic(topic=topic, partitions=[part])],
        "forgotten_topics_data": []}
    if version >= 11:
        fields["rack_id"] = rack
    answer = wire.ask(FetchRequest(**fields), version)
    [topic_answer] = answer.responses
    [partition_answer] = topic_answer.partitions
    return partition_answer


def test_leaders_name_the_follower_in_the_askers_rack_and_followers_answer_v11(
        racked: Cluster) -> None:
    topic, leaders = written_topic(racked)
    leader = leaders[0]
    follower = next(broker for broker in RACKS if broker != leader)
    with KafkaWire(address_of(racked, leader)) as wire:
        sent_on = fetch(wire, topic, 0, 11, RACKS[follower])
        assert (sent_on.error_code, sent_on.preferred_read_replica) == (0, follower)
        assert not sent_on.records and sent_on.high_watermark == RECORDS
        own_rack = fetch(wire, topic, 0, 11, RACKS[leader])
        assert own_rack.preferred_read_replica == -1 and own_rack.records
    with KafkaWire(address_of(racked, follower)) as wire:
        assert fetch(wire, topic, 0, 10, "").error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER
        answered = wait_until(
            lambda: (found := fetch(wire, topic, 0, 11, RACKS[follower])).high_watermark
            == RECORDS and found, 10, "the follower's high watermark")
        assert answered.error_code == 0 and answered.preferred_read_replica == -1
        assert bytes(answered.records).count(b"0-") >= 1
