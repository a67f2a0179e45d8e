"""kafka-python, unmodified, against rafka's Kafka listener: it produces with acks=all and
idempotence, its records read by rafka's consumer, and it reads what rafka's producer wrote,
offsets, keys, values, headers and timestamps the same for both; a group of two rebalances when
one leaves and resumes from its commits. Bad frames close only their own connection and store
nothing."""

from __future__ import annotations

import contextlib
import socket
import struct
import threading

import pytest
from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import ConfigResource, ConfigResourceType, NewTopic
from kafka.errors import (
    CommitFailedError,
    InconsistentGroupProtocolError,
    InvalidReplicationFactorError,
    RebalanceInProgressError,
    TopicAlreadyExistsError,
)
from kafka.protocol.metadata import MetadataResponse

from rafka import Cluster
from rafka.coordination.errors import (
    InconsistentGroupProtocolError as CoordinationInconsistentGroupProtocolError,
)
from tests.support.kafka_clients import (
    PARTITIONS,
    MemberThread,
    group_scenario,
    new_topic,
    read_with_rafka,
    sample_records,
    write_with_rafka,
)
from tests.support.waiting import wait_until


def test_bootstrap_servers_name_every_broker(kafka_cluster: Cluster) -> None:
    servers = kafka_cluster.bootstrap_servers().split(",")
    assert len(servers) == 3 and all(s.startswith("127.0.0.1:") for s in servers), servers


def test_kafka_python_produces_and_rafka_reads_the_same_records(kafka_cluster: Cluster) -> None:
    topic = new_topic(kafka_cluster, "from-kafka-python")
    producer = KafkaProducer(bootstrap_servers=kafka_cluster.bootstrap_servers(), acks="all",
                             enable_idempotence=True, linger_ms=5)
    sent = []
    try:
        futures = [(record, producer.send(topic, key=record[0], value=record[1],
                                          timestamp_ms=record[2], headers=record[3]))
                   for record in sample_records(300)]
        for (key, value, timestamp, headers), future in futures:
            metadata = future.get(timeout=60)
            sent.append((metadata.partition, metadata.offset, key, value, timestamp, headers))
    finally:
        producer.close(timeout=10)
    assert {partition for partition, *_ in sent} == set(range(PARTITIONS))
    assert read_with_rafka(kafka_cluster, topic, len(sent)) == sorted(sent)


def test_acks_0_is_written_and_never_answered(kafka_cluster: Cluster) -> None:
    topic = new_topic(kafka_cluster, "acks-zero")
    producer = KafkaProducer(bootstrap_servers=kafka_cluster.bootstrap_servers(), acks=0)
    try:
        for i in range(30):
            # With acks=0 the client expects no response: one would break its connection.
            producer.send(topic, value=f"fire-{i}".encode(), partition=i % PARTITIONS)
        producer.flush(timeout=30)
        producer.send(topic, value=b"after", partition=0).get(timeout=30)
    finally:
        producer.close(timeout=10)
    values = [r[3] for r in read_with_rafka(kafka_cluster, topic, 31)]
    assert sorted(values) == sorted([b"after", *(f"fire-{i}".encode() for i in range(30))])


def test_kafka_python_reads_what_rafkas_producer_wrote(kafka_cluster: Cluster) -> None:
    topic = new_topic(kafka_cluster, "to-kafka-python")
    written = write_with_rafka(kafka_cluster, topic, sample_records(240))
    consumer = KafkaConsumer(bootstrap_servers=kafka_cluster.bootstrap_servers(), group_id=None,
                             auto_offset_reset="earliest", enable_auto_commit=False)
    read = []
    try:
        consumer.assign([TopicPartition(topic, p) for p in range(PARTITIONS)])
        wait_until(lambda: read.extend(
            (r.partition, r.offset, r.key, r.value, r.timestamp, list(r.headers))
            for records in consumer.poll(timeout_ms=500).values() for r in records)
            or len(read) >= len(written), 60, "every record")
        ends = consumer.end_offsets([TopicPartition(topic, p) for p in range(PARTITIONS)])
    finally:
        consumer.close()
    assert sorted(read) == written
    assert {tp.partition: end for tp, end in ends.items()} == {p: 80 for p in range(PARTITIONS)}


class KafkaPythonMember(MemberThread):
    def consume(self, stop: threading.Event) -> None:
        consumer = KafkaConsumer(self.topic, bootstrap_servers=self.bootstrap,
                                 group_id=self.group, auto_offset_reset="earliest",
                                 enable_auto_commit=False, session_timeout_ms=10_000,
                                 heartbeat_interval_ms=1_000)
        try:
            while not stop.is_set():
                for records in consumer.poll(timeout_ms=300).values():
                    self.read += [r.value for r in records]
                # A rebalance may be under way: the records are read again, as in Kafka.
                with contextlib.suppress(CommitFailedError, RebalanceInProgressError):
                    consumer.commit()
                self.owned = {tp.partition for tp in consumer.assignment()}
        finally:
            consumer.close()  # leaves the group at once (LeaveGroup)


def test_a_kafka_python_group_shares_rebalances_and_resumes_from_its_commits(
    kafka_cluster: Cluster,
) -> None:
    group_scenario(kafka_cluster, new_topic(kafka_cluster, "kafka-python-group"),
                   "kafka-python-group", KafkaPythonMember)


def test_kafka_pythons_admin_client_creates_describes_alters_lists_and_deletes(
    kafka_cluster: Cluster,
) -> None:
    admin = KafkaAdminClient(bootstrap_servers=kafka_cluster.bootstrap_servers())
    consumer = None
    try:
        admin.create_topics([NewTopic("made-by-admin", 4, 2,
                                      topic_configs={"retention.ms": "3600000"})])
        described = kafka_cluster.describe_topic("made-by-admin")
        assert described["config"] == {"retention.ms": "3600000"}
        assert [len(p["replicas"]) for p in described["partitions"]] == [2] * 4
        with pytest.raises(TopicAlreadyExistsError):
            admin.create_topics([NewTopic("made-by-admin", 1, 1)])
        with pytest.raises(InvalidReplicationFactorError, match="3 live brokers"):
            admin.create_topics([NewTopic("too-replicated", 1, 5)])
        configs = admin.describe_configs(
            [ConfigResource(ConfigResourceType.TOPIC, "made-by-admin")],
            config_filter="all")["topic"]["made-by-admin"]
        assert configs["retention.ms"]["value"] == "3600000"
        assert configs["retention.ms"]["config_source"] == "DYNAMIC_TOPIC_CONFIG"
        assert configs["min.insync.replicas"]["config_source"] == "DEFAULT_CONFIG"
        # AlterConfigs (kafka-python sends the other overrides along, since what a request
        # leaves out goes back to its default), then IncrementalAlterConfigs' DELETE.
        assert admin.alter_configs(
            [ConfigResource(ConfigResourceType.TOPIC, "made-by-admin",
                            configs={"max.message.bytes": "2000"})], incremental=False,
        ) == {"topic": {"made-by-admin": "OK"}}
        assert kafka_cluster.describe_topic("made-by-admin")["config"] == {
            "retention.ms": "3600000", "max.message.bytes": "2000"}
        admin.reset_configs([ConfigResource(ConfigResourceType.TOPIC, "made-by-admin",
                                            configs=["retention.ms"])], incremental=True)
        assert kafka_cluster.describe_topic("made-by-admin")["config"] == {
            "max.message.bytes": "2000"}
        # A group of one, listed and described by the broker that coordinates it.
        consumer = KafkaConsumer("made-by-admin", group_id="listed-group",
                                 bootstrap_servers=kafka_cluster.bootstrap_servers())
        wait_until(lambda: consumer.poll(timeout_ms=200) is not None and consumer.assignment(),
                   60, "the consumer owning the partitions")
        assert {"group_id": "listed-group", "protocol_type": "consumer",
                "group_state": "Stable", "group_type": "classic"} in admin.list_groups()
        group = admin.describe_groups(["listed-group"])["listed-group"]
        [member] = group["members"]
        assert (group["group_state"], member["client_host"]) == ("Stable", "/127.0.0.1")
        assert member["member_assignment"]["assigned_partitions"] == [
            {"topic": "made-by-admin", "partitions": [0, 1, 2, 3]}]
        consumer.close()
        consumer = None
        admin.delete_topics(["made-by-admin"])
        assert not kafka_cluster.topic_exists("made-by-admin")
    finally:
        if consumer is not None:
            consumer.close()
        admin.close()


def test_a_group_id_belongs_to_kafka_clients_or_to_rafka_consumers_not_both(
    kafka_cluster: Cluster,
) -> None:
    topic = new_topic(kafka_cluster, "one-kind-of-group")
    kafka_member = KafkaPythonMember(kafka_cluster, topic, "kafka-kind")
    try:
        wait_until(lambda: kafka_member.owned, 60, "the Kafka client owning the partitions")
        with pytest.raises(CoordinationInconsistentGroupProtocolError, match="broker"):
            kafka_cluster.consumer([topic], group="kafka-kind")
    finally:
        kafka_member.leave()
    rafka_member = kafka_cluster.consumer([topic], group="rafka-kind")
    kafka_consumer = KafkaConsumer(topic, group_id="rafka-kind",
                                   bootstrap_servers=kafka_cluster.bootstrap_servers())
    try:
        rafka_member.poll(100)
        with pytest.raises(InconsistentGroupProtocolError):
            for _ in range(100):
                kafka_consumer.poll(timeout_ms=200)
    finally:
        kafka_consumer.close()
        rafka_member.close()
    # Once the Kafka clients left, the id is free for rafka's consumers.
    def rafka_joins() -> bool:
        try:
            kafka_cluster.consumer([topic], group="kafka-kind").close()
        except CoordinationInconsistentGroupProtocolError:
            return False
        return True
    wait_until(rafka_joins, 30, "rafka's consumer joining the group the Kafka clients left")


# --------------------------------------------------------------------------- bad input


def _send_raw(address: tuple[str, int], data: bytes, read: bool = True) -> bytes:
    with socket.create_connection(address, timeout=10) as connection:
        connection.sendall(data)
        if not read:
            return b""
        # Until the answer is whole or the broker closes the connection; a broker that does
        # neither within the timeout fails the test (socket.timeout), never reads as closed.
        received = b""
        while chunk := connection.recv(65536):
            received += chunk
            if len(received) >= 4 and len(received) >= 4 + struct.unpack(
                    ">i", received[:4])[0]:
                break
        return received


def test_bad_frames_close_only_their_connection_and_store_nothing(
    kafka_cluster: Cluster,
) -> None:
    topic = new_topic(kafka_cluster, "bad-frames")
    host, port = kafka_cluster.bootstrap_servers().split(",")[0].split(":")
    address = (host, int(port))
    # A request needs no ApiVersions before it (Kafka's clients may skip it): Metadata v0.
    answer = _send_raw(address, struct.pack(">ihhih", 14, 3, 0, 41, -1) + b"\x00\x00\x00\x00")
    metadata = MetadataResponse.decode(answer[4:], version=0, header=True)
    assert metadata.header.correlation_id == 41 and len(metadata.brokers) == 3
    # An API rafka does not serve is answered, with its correlation id.
    answer = _send_raw(address, struct.pack(">ihhi", 10, 57, 0, 99) + b"\x00\x00")
    assert struct.unpack(">iih", answer) == (6, 99, 35)
    # A frame claiming 2 GB, a Metadata request of garbage, a truncated frame: the connection
    # closes, nothing else.
    assert _send_raw(address, struct.pack(">i", 2**31 - 1) + b"\x00" * 64) == b""
    assert _send_raw(address, struct.pack(">ihhi", 64, 3, 9, 7) + b"\xff" * 56) == b""
    _send_raw(address, struct.pack(">i", 1000) + b"\x00\x00\x00\x03", read=False)
    # The broker still serves everyone: a producer's record goes in, and only it.
    producer = KafkaProducer(bootstrap_servers=kafka_cluster.bootstrap_servers(), acks="all")
    try:
        producer.send(topic, value=b"after", partition=0).get(timeout=60)
    finally:
        producer.close(timeout=10)
    consumer = KafkaConsumer(bootstrap_servers=kafka_cluster.bootstrap_servers(), group_id=None)
    try:
        ends = consumer.end_offsets([TopicPartition(topic, p) for p in range(PARTITIONS)])
    finally:
        consumer.close()
    assert {tp.partition: end for tp, end in ends.items()} == {0: 1, 1: 0, 2: 0}
    assert [r[3] for r in read_with_rafka(kafka_cluster, topic, 1)] == [b"after"]
