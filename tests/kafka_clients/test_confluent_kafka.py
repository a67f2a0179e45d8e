"""confluent-kafka (librdkafka), unmodified, against rafka's Kafka listener: an idempotent
acks=all producer read back by rafka, rafka's records read by it, a group of two that
rebalances and resumes from its commits, and a partition leader killed under a producer that
sends all the while: nothing acknowledged is lost or written twice."""

from __future__ import annotations

import contextlib
import functools
import threading
import time

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ResourceType,
)

from rafka import Cluster
from rafka.coordination.broker_config import alter_broker_config
from rafka.logstore.batch import decode_records, iter_batches
from tests.support.cluster import log_bytes
from tests.support.kafka_clients import (
    BASE_TIMESTAMP_MS,
    PARTITIONS,
    MemberThread,
    group_scenario,
    new_topic,
    read_with_rafka,
    sample_records,
    write_with_rafka,
)
from tests.support.waiting import wait_until


def _producer(cluster: Cluster) -> Producer:
    return Producer({"bootstrap.servers": cluster.bootstrap_servers(), "acks": "all",
                     "enable.idempotence": True, "linger.ms": 5})


def read_with_confluent_kafka(cluster: Cluster, topic: str, count: int) -> list[tuple]:
    """`(partition, offset, key, value, timestamp, headers)` of the first `count` records, read
    by an assigned consumer from the start of each partition."""
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap_servers(),
                         "group.id": "unused-assign-only", "enable.auto.commit": False})
    read: list[tuple] = []
    try:
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(PARTITIONS)])

        def consume() -> bool:
            for message in consumer.consume(num_messages=count, timeout=0.5):
                if message.error() is None:
                    read.append((message.partition(), message.offset(), message.key(),
                                 message.value(), message.timestamp()[1],
                                 list(message.headers() or ())))
            return len(read) >= count
        wait_until(consume, 60, f"{count} records")
    finally:
        consumer.close()
    return sorted(read)


def test_confluent_kafka_produces_and_rafka_reads_the_same_records(
    kafka_cluster: Cluster,
) -> None:
    topic = new_topic(kafka_cluster, "from-confluent-kafka")
    producer = _producer(kafka_cluster)
    sent: list[tuple] = []
    failed: list[str] = []

    def delivered(headers, error, message) -> None:
        # A delivery report carries no headers: the ones sent are checked against the log.
        if error is not None:
            failed.append(str(error))
            return
        sent.append((message.partition(), message.offset(), message.key(), message.value(),
                     message.timestamp()[1], headers))

    for key, value, timestamp, headers in sample_records(300):
        producer.produce(topic, key=key, value=value, timestamp=timestamp, headers=headers,
                         on_delivery=functools.partial(delivered, headers))
    assert producer.flush(60) == 0
    assert not failed, failed[:3]
    assert {partition for partition, *_ in sent} == set(range(PARTITIONS))
    assert read_with_rafka(kafka_cluster, topic, len(sent)) == sorted(sent)


def test_confluent_kafka_reads_what_rafkas_producer_wrote(kafka_cluster: Cluster) -> None:
    topic = new_topic(kafka_cluster, "to-confluent-kafka")
    written = write_with_rafka(kafka_cluster, topic, sample_records(240))
    assert read_with_confluent_kafka(kafka_cluster, topic, len(written)) == written


def test_every_codec_goes_both_ways_and_is_stored_as_it_came(kafka_cluster: Cluster) -> None:
    """librdkafka writes snappy as one raw block, where Kafka's Java clients use snappy-java's
    framing (that kind is read in tests/wire): rafka reads each codec librdkafka writes, stores
    the batch with it, and librdkafka reads back those and rafka's own snappy batches."""
    topic = new_topic(kafka_cluster, "codecs-confluent-kafka")
    codecs = {"gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}
    sent: list[tuple] = []
    failed: list[str] = []

    def delivered(error, message) -> None:
        if error is not None:
            failed.append(str(error))
            return
        sent.append((message.partition(), message.offset(), message.key(), message.value(),
                     message.timestamp()[1], []))

    for n, codec in enumerate(codecs):
        producer = Producer({"bootstrap.servers": kafka_cluster.bootstrap_servers(),
                             "acks": "all", "enable.idempotence": True, "linger.ms": 20,
                             "compression.type": codec})
        for i in range(60):
            # Repetitive values, so that every codec makes the batch smaller and is kept.
            producer.produce(topic, key=b"%s-%d" % (codec.encode(), i),
                             value=b"%s record %d " % (codec.encode(), i) * 20,
                             timestamp=BASE_TIMESTAMP_MS + 100 * n + i, on_delivery=delivered)
        assert producer.flush(60) == 0
    assert not failed, failed[:3]
    written = write_with_rafka(
        kafka_cluster, topic,
        [(b"rafka-%d" % i, b"rafka snappy %d " % i * 20, BASE_TIMESTAMP_MS + 1000 + i, [])
         for i in range(60)],
        compression_type="snappy", linger_ms=20)
    expected = sorted(sent + written)

    # Which codec each writer's batches were stored with, read from the replicas' files.
    stored = {(header.compression, record.key.split(b"-")[0])
              for directory in kafka_cluster.data_dir.glob(f"broker-*/{topic}-*")
              for header, batch in iter_batches(log_bytes(directory))
              for record in decode_records(batch)}
    assert stored == {*((codec_id, name.encode()) for name, codec_id in codecs.items()),
                      (codecs["snappy"], b"rafka")}
    assert read_with_rafka(kafka_cluster, topic, len(expected)) == expected
    assert read_with_confluent_kafka(kafka_cluster, topic, len(expected)) == expected


class ConfluentMember(MemberThread):
    def consume(self, stop: threading.Event) -> None:
        consumer = Consumer({"bootstrap.servers": self.bootstrap, "group.id": self.group,
                             "auto.offset.reset": "earliest", "enable.auto.commit": False,
                             "session.timeout.ms": 10_000, "heartbeat.interval.ms": 1_000})
        consumer.subscribe([self.topic])
        try:
            while not stop.is_set():
                message = consumer.poll(0.3)
                if message is not None and message.error() is None:
                    self.read.append(message.value())
                    # A rebalance may have taken the partition: then it is read again.
                    with contextlib.suppress(KafkaException):
                        consumer.commit(message=message, asynchronous=False)
                self.owned = {tp.partition for tp in consumer.assignment()}
        finally:
            consumer.close()  # leaves the group


def test_a_confluent_kafka_group_shares_rebalances_and_resumes_from_its_commits(
    kafka_cluster: Cluster,
) -> None:
    group_scenario(kafka_cluster, new_topic(kafka_cluster, "confluent-group"),
                   "confluent-group", ConfluentMember)


def test_a_leader_killed_under_a_confluent_producer_loses_nothing(start_cluster) -> None:
    cluster = start_cluster(3, kafka_listeners="PLAINTEXT://127.0.0.1:0")
    topic = new_topic(cluster, "leader-moves")
    producer = _producer(cluster)
    acknowledged: dict[bytes, tuple[int, int]] = {}
    failed: list[str] = []

    def delivered(error, message) -> None:
        if error is not None:
            failed.append(str(error))
        else:
            acknowledged[message.value()] = (message.partition(), message.offset())

    stop = threading.Event()

    def send() -> None:
        sequence = 0
        while not stop.is_set():
            for _ in range(50):
                producer.produce(topic, value=f"r-{sequence}".encode(), on_delivery=delivered)
                sequence += 1
            producer.poll(0)
            time.sleep(0.05)

    sender = threading.Thread(target=send, daemon=True)
    sender.start()
    try:
        wait_until(lambda: len(acknowledged) >= 500, 60, "writes before the fault")
        leader = cluster.describe_topic(topic)["partitions"][0]["leader"]
        cluster.kill_broker(leader)
        before = len(acknowledged)
        wait_until(lambda: len(acknowledged) >= before + 1500, 90,
                   "writes acknowledged after the leader was killed")
    finally:
        stop.set()
        sender.join(30)
    assert producer.flush(60) == 0
    assert not failed, failed[:3]
    total = sum(p["high_watermark"] for p in cluster.describe_topic(topic)["partitions"])
    records = read_with_rafka(cluster, topic, total)
    stored = {value: (partition, offset) for partition, offset, _k, value, _t, _h in records}
    assert len(stored) == len(records) == total, "a record was written twice"
    lost = {value for value, where in acknowledged.items() if stored.get(value) != where}
    assert not lost, sorted(lost)[:5]


def test_confluent_kafkas_admin_client_changes_a_topics_config_live(
    kafka_cluster: Cluster,
) -> None:
    """IncrementalAlterConfigs: SET and DELETE reach the replicas while the topic is in use;
    a value rafka would refuse, and a broker's settings, are refused with Kafka's errors."""
    topic = new_topic(kafka_cluster, "altered-by-confluent")
    admin = AdminClient({"bootstrap.servers": kafka_cluster.bootstrap_servers()})
    producer = _producer(kafka_cluster)

    def send(value: bytes) -> str | None:
        outcome: list[str | None] = []
        producer.produce(topic, value=value, partition=0,
                         on_delivery=lambda error, _m: outcome.append(
                             None if error is None else error.name()))
        assert producer.flush(60) == 0
        return outcome[0]

    def alter(*entries: ConfigEntry) -> None:
        resource = ConfigResource(ResourceType.TOPIC, topic, incremental_configs=list(entries))
        admin.incremental_alter_configs([resource])[resource].result(timeout=30)

    big = b"b" * 4000
    assert send(big) is None
    alter(ConfigEntry("max.message.bytes", "1000",
                      incremental_operation=AlterConfigOpType.SET))
    assert kafka_cluster.describe_topic(topic)["config"] == {
        "min.insync.replicas": "2", "max.message.bytes": "1000"}
    wait_until(lambda: send(big) == "MSG_SIZE_TOO_LARGE", 30,
               "the leader to refuse a record over max.message.bytes=1000")
    assert send(b"small") is None
    alter(ConfigEntry("max.message.bytes", None,
                      incremental_operation=AlterConfigOpType.DELETE))
    assert kafka_cluster.describe_topic(topic)["config"] == {"min.insync.replicas": "2"}
    wait_until(lambda: send(big) is None, 30, "the default max.message.bytes back")

    with pytest.raises(KafkaException) as refused:
        alter(ConfigEntry("min.insync.replicas", "4",
                          incremental_operation=AlterConfigOpType.SET))
    assert refused.value.args[0].name() == "INVALID_CONFIG"
    assert "replication factor 3" in refused.value.args[0].str()
    broker = ConfigResource(ResourceType.BROKER, "1", incremental_configs=[ConfigEntry(
        "replica.lag.time.max.ms", "1", incremental_operation=AlterConfigOpType.SET)])
    with pytest.raises(KafkaException, match="while a broker runs"):
        admin.incremental_alter_configs([broker])[broker].result(timeout=30)
    assert kafka_cluster.describe_topic(topic)["config"] == {"min.insync.replicas": "2"}

    # AlterConfigs, the older API, replaces the overrides: min.insync.replicas goes back to 1.
    replaced = ConfigResource(ResourceType.TOPIC, topic, set_config={"retention.ms": "3600000"})
    with pytest.warns(DeprecationWarning, match="incremental_alter_configs"):
        future = admin.alter_configs([replaced])[replaced]
    future.result(timeout=30)
    assert kafka_cluster.describe_topic(topic)["config"] == {"retention.ms": "3600000"}


def test_a_brokers_advertised_listener_changes_while_it_runs(kafka_cluster: Cluster) -> None:
    """advertised.listeners is a per-broker dynamic setting (KIP-226): set on one broker, every
    broker's Metadata soon names the new address, DescribeConfigs says where it came from, and
    clients reach the broker there; deleted, the broker advertises the address it started with.
    Another setting, and a value that is no listener, are refused."""
    admin = AdminClient({"bootstrap.servers": kafka_cluster.bootstrap_servers()})
    brokers = admin.list_topics(timeout=30).brokers
    broker_id = min(brokers)
    started_with = (brokers[broker_id].host, brokers[broker_id].port)
    moved = ("localhost", started_with[1])
    assert moved != started_with
    moved_listener = f"PLAINTEXT://localhost:{started_with[1]}"

    def change(name: str, value: str | None) -> None:
        operation = AlterConfigOpType.SET if value is not None else AlterConfigOpType.DELETE
        resource = ConfigResource(ResourceType.BROKER, str(broker_id), incremental_configs=[
            ConfigEntry(name, value, incremental_operation=operation)])
        admin.incremental_alter_configs([resource])[resource].result(timeout=30)

    def advertised_everywhere(address: tuple[str, int]) -> bool:
        """Whether every broker's Metadata names `address` for the broker changed."""
        for other in brokers.values():
            client = AdminClient({"bootstrap.servers": f"{other.host}:{other.port}"})
            found = client.list_topics(timeout=10).brokers[broker_id]
            if (found.host, found.port) != address:
                return False
        return True

    def described() -> tuple[str, bool, str]:
        resource = ConfigResource(ResourceType.BROKER, str(broker_id))
        entry = admin.describe_configs([resource])[resource].result(timeout=30)[
            "advertised.listeners"]
        return entry.value, entry.is_read_only, entry.source

    try:
        change("advertised.listeners", moved_listener)
        wait_until(lambda: advertised_everywhere(moved), 30,
                   "every broker's metadata naming the new address")
        assert described() == (moved_listener, False, 2)  # DYNAMIC_BROKER_CONFIG
        topic = new_topic(kafka_cluster, "through-a-moved-listener")
        producer = _producer(kafka_cluster)
        outcomes: list[object] = []
        for partition in range(PARTITIONS):
            producer.produce(topic, value=b"%d" % partition, partition=partition,
                             on_delivery=lambda error, _m: outcomes.append(error))
        assert producer.flush(60) == 0 and outcomes == [None] * PARTITIONS

        with pytest.raises(KafkaException, match="while a broker runs") as fixed:
            change("listeners", "PLAINTEXT://127.0.0.1:0")
        assert fixed.value.args[0].name() == "INVALID_REQUEST"
        with pytest.raises(KafkaException, match="not NAME://host:port") as invalid:
            change("advertised.listeners", "nowhere")
        assert invalid.value.args[0].name() == "INVALID_CONFIG"

        change("advertised.listeners", None)
        wait_until(lambda: advertised_everywhere(started_with), 30,
                   "every broker's metadata naming the address it started with")
        assert described()[1:] == (False, 5)  # DEFAULT_CONFIG: the listener, as bound
    finally:
        alter_broker_config(kafka_cluster.store, broker_id, {"advertised.listeners": None})


def test_a_dynamic_advertised_listener_outlives_a_restart(start_cluster) -> None:
    """Kept in ZooKeeper (/config/brokers/<id>), a dynamic setting is applied again by the
    broker restarted, before it registers; port 0 stands for the port it bound."""
    cluster = start_cluster(1, kafka_listeners="PLAINTEXT://127.0.0.1:0")
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers()})
    [broker_id] = admin.list_topics(timeout=30).brokers
    resource = ConfigResource(ResourceType.BROKER, str(broker_id), incremental_configs=[
        ConfigEntry("advertised.listeners", "PLAINTEXT://localhost:0",
                    incremental_operation=AlterConfigOpType.SET)])
    admin.incremental_alter_configs([resource])[resource].result(timeout=30)
    cluster.stop_broker(broker_id)
    cluster.start_broker(broker_id)
    restarted = AdminClient({"bootstrap.servers": cluster.bootstrap_servers()})
    found = restarted.list_topics(timeout=30).brokers[broker_id]
    assert found.host == "localhost"
    assert cluster.bootstrap_servers() == f"localhost:{found.port}"  # its registration


class _StaticMember:
    """A confluent-kafka consumer with a group.instance.id (KIP-345), polled on the test's
    thread; `assignments` holds each assignment it was given."""

    def __init__(self, cluster: Cluster, group: str, topic: str, instance: str) -> None:
        self.consumer = Consumer({"bootstrap.servers": cluster.bootstrap_servers(),
                                  "group.id": group, "group.instance.id": instance,
                                  "session.timeout.ms": 6_000, "auto.offset.reset": "earliest"})
        self.assignments: list[list[int]] = []
        self.consumer.subscribe([topic], on_assign=lambda _consumer, partitions: (
            self.assignments.append(sorted(p.partition for p in partitions))))


def test_a_static_member_restarted_gets_its_partitions_back_without_a_rebalance(
    kafka_cluster: Cluster,
) -> None:
    topic = new_topic(kafka_cluster, "static-members")
    group = "static-group"
    first = _StaticMember(kafka_cluster, group, topic, "instance-a")
    second = _StaticMember(kafka_cluster, group, topic, "instance-b")
    members = [first, second]

    def settled() -> bool:
        for member in members:
            member.consumer.poll(0.1)
        shares = [m.assignments[-1] if m.assignments else [] for m in members]
        return all(shares) and sorted(p for share in shares for p in share) == list(
            range(PARTITIONS))

    wait_until(settled, 60, "both members assigned")
    rebalances_of_first = len(first.assignments)
    held = second.assignments[-1]
    second.consumer.close()  # a static member's client leaves no group when it stops
    restarted = _StaticMember(kafka_cluster, group, topic, "instance-b")
    members = [first, restarted]
    try:
        wait_until(settled, 60, "the restarted member assigned")
        assert restarted.assignments == [held]  # its old partitions, in one assignment
        assert len(first.assignments) == rebalances_of_first  # the other never rebalanced
    finally:
        first.consumer.close()
        restarted.consumer.close()
