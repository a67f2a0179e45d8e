"""kafka-python, unmodified, against rafka's Kafka listener: it produces with acks=all and
idempotence, its records read by rafka's consumer, and it reads what rafka's producer wrote,
offsets, keys, values, headers and timestamps the same for both. Two of its consumers share a
topic in a group, rebalance when one leaves, and a restarted group resumes from its commits.
Bad frames close only their own connection and store nothing.

One 3-broker cluster for the module, each broker listening on a free port of 127.0.0.1.
"""

from __future__ import annotations

import contextlib
import socket
import struct
import threading
import time
from collections.abc import Iterator

import pytest
from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.errors import CommitFailedError, RebalanceInProgressError

from actors import Cluster

from ..actors.conftest import wait_until
from ..conftest import cluster_of_its_own

PARTITIONS = 3
BASE_TIMESTAMP_MS = 1_700_000_000_000


@pytest.fixture(scope="module")
def cluster(zookeeper, ray_session, tmp_path_factory) -> Iterator[Cluster]:
    yield from cluster_of_its_own(zookeeper, tmp_path_factory, "kafka-python",
                                  kafka_listeners="PLAINTEXT://127.0.0.1:0",
                                  broker_config={"group.initial.rebalance.delay.ms": 500})


def _topic(cluster: Cluster, name: str) -> str:
    cluster.create_topic(name, partitions=PARTITIONS, replication_factor=3,
                         config={"min.insync.replicas": 2})
    return name


def _records(count: int) -> list[tuple[bytes | None, bytes, int, list[tuple[str, bytes]]]]:
    return [(None if i % 7 == 0 else f"key-{i}".encode(), f"value-{i}".encode(),
             BASE_TIMESTAMP_MS + i, [("n", str(i).encode())] if i % 3 == 0 else [])
            for i in range(count)]


def _read_all_with_rafka(cluster: Cluster, topic: str, count: int) -> list[tuple]:
    consumer = cluster.consumer([topic], auto_offset_reset="earliest")
    found: list[tuple] = []
    try:
        deadline = time.monotonic() + 60
        while len(found) < count and time.monotonic() < deadline:
            found += [(r.partition, r.offset, r.key, r.value, r.timestamp, list(r.headers))
                      for r in consumer.poll(500)]
    finally:
        consumer.close()
    return sorted(found)


def test_bootstrap_servers_name_every_broker(cluster: Cluster) -> None:
    servers = cluster.bootstrap_servers().split(",")
    assert len(servers) == 3 and all(s.startswith("127.0.0.1:") for s in servers), servers


def test_kafka_python_produces_and_rafka_reads_the_same_records(cluster: Cluster) -> None:
    topic = _topic(cluster, "from-kafka-python")
    producer = KafkaProducer(bootstrap_servers=cluster.bootstrap_servers(), acks="all",
                             enable_idempotence=True, linger_ms=5)
    sent = []
    try:
        futures = [(record, producer.send(topic, key=record[0], value=record[1],
                                          timestamp_ms=record[2], headers=record[3]))
                   for record in _records(300)]
        for (key, value, timestamp, headers), future in futures:
            metadata = future.get(timeout=60)
            sent.append((metadata.partition, metadata.offset, key, value, timestamp, headers))
    finally:
        producer.close(timeout=10)
    assert {partition for partition, *_ in sent} == set(range(PARTITIONS))
    assert _read_all_with_rafka(cluster, topic, len(sent)) == sorted(sent)


def test_kafka_python_reads_what_rafkas_producer_wrote(cluster: Cluster) -> None:
    topic = _topic(cluster, "to-kafka-python")
    producer = cluster.producer(acks="all")
    written = []
    try:
        futures = [(record, producer.send(topic, value=record[1], key=record[0],
                                          partition=i % PARTITIONS, timestamp_ms=record[2],
                                          headers=record[3]))
                   for i, record in enumerate(_records(240))]
        for (key, value, timestamp, headers), future in futures:
            metadata = future.result(60)
            written.append((metadata.partition, metadata.offset, key, value, timestamp, headers))
    finally:
        producer.close()
    consumer = KafkaConsumer(bootstrap_servers=cluster.bootstrap_servers(), group_id=None,
                             auto_offset_reset="earliest", enable_auto_commit=False)
    read = []
    try:
        consumer.assign([TopicPartition(topic, p) for p in range(PARTITIONS)])
        deadline = time.monotonic() + 60
        while len(read) < len(written) and time.monotonic() < deadline:
            for records in consumer.poll(timeout_ms=500).values():
                read += [(r.partition, r.offset, r.key, r.value, r.timestamp, list(r.headers))
                         for r in records]
        ends = consumer.end_offsets([TopicPartition(topic, p) for p in range(PARTITIONS)])
    finally:
        consumer.close()
    assert sorted(read) == sorted(written)
    assert {tp.partition: end for tp, end in ends.items()} == {p: 80 for p in range(PARTITIONS)}


# --------------------------------------------------------------------------- bad input


def _send_raw(address: tuple[str, int], data: bytes, read: bool = True) -> bytes:
    with socket.create_connection(address, timeout=10) as connection:
        connection.sendall(data)
        if not read:
            return b""
        chunks = []
        try:
            while chunk := connection.recv(65536):
                chunks.append(chunk)
                if len(b"".join(chunks)) >= 4 and len(b"".join(chunks)) >= 4 + struct.unpack(
                        ">i", b"".join(chunks)[:4])[0]:
                    break
        except TimeoutError:
            pass
        return b"".join(chunks)


def test_bad_frames_close_only_their_connection_and_store_nothing(cluster: Cluster) -> None:
    topic = _topic(cluster, "bad-frames")
    host, port = cluster.bootstrap_servers().split(",")[0].split(":")
    address = (host, int(port))
    # An API rafka does not serve is answered, with its correlation id.
    answer = _send_raw(address, struct.pack(">ihhi", 10, 57, 0, 99) + b"\x00\x00")
    assert struct.unpack(">iih", answer) == (6, 99, 35)
    # A frame claiming 2 GB, a Metadata request of garbage, a truncated frame: the connection
    # closes, nothing else.
    assert _send_raw(address, struct.pack(">i", 2**31 - 1) + b"\x00" * 64) == b""
    assert _send_raw(address, struct.pack(">ihhi", 64, 3, 9, 7) + b"\xff" * 56) == b""
    _send_raw(address, struct.pack(">i", 1000) + b"\x00\x00\x00\x03", read=False)
    # The broker still serves everyone: a producer's record goes in, and only it.
    producer = KafkaProducer(bootstrap_servers=cluster.bootstrap_servers(), acks="all")
    try:
        producer.send(topic, value=b"after", partition=0).get(timeout=60)
    finally:
        producer.close(timeout=10)
    consumer = KafkaConsumer(bootstrap_servers=cluster.bootstrap_servers(), group_id=None)
    try:
        ends = consumer.end_offsets([TopicPartition(topic, p) for p in range(PARTITIONS)])
    finally:
        consumer.close()
    assert {tp.partition: end for tp, end in ends.items()} == {0: 1, 1: 0, 2: 0}
    wait_until(lambda: _read_all_with_rafka(cluster, topic, 1)[0][3] == b"after", 30,
               "the one good record read back")


# ---------------------------------------------------------------------------------- groups


class Member(threading.Thread):
    """One kafka-python consumer of a group, polling in a thread of its own as an application
    would, committing after each poll; what it read and owns is kept for the test."""

    def __init__(self, cluster: Cluster, topic: str, group: str) -> None:
        super().__init__(daemon=True)
        self.config = {"bootstrap_servers": cluster.bootstrap_servers(), "group_id": group,
                       "auto_offset_reset": "earliest", "enable_auto_commit": False,
                       "session_timeout_ms": 10_000, "heartbeat_interval_ms": 1_000}
        self.topic = topic
        self.read: list[tuple[int, int, bytes]] = []
        self.owned: set[int] = set()
        self.stop = threading.Event()
        self.error: BaseException | None = None
        self.start()

    def run(self) -> None:
        try:
            consumer = KafkaConsumer(self.topic, **self.config)
            try:
                while not self.stop.is_set():
                    for records in consumer.poll(timeout_ms=300).values():
                        self.read += [(r.partition, r.offset, r.value) for r in records]
                    # A rebalance may be under way: the records are read again, as in Kafka.
                    with contextlib.suppress(CommitFailedError, RebalanceInProgressError):
                        consumer.commit()
                    self.owned = {tp.partition for tp in consumer.assignment()}
            finally:
                consumer.close()  # leaves the group at once (LeaveGroup)
        except BaseException as error:
            self.error = error

    def leave(self) -> None:
        self.stop.set()
        self.join(60)
        assert self.error is None, self.error


def _produce(cluster: Cluster, topic: str, values: list[bytes]) -> None:
    producer = cluster.producer(acks="all")
    try:
        for i, value in enumerate(values):
            producer.send(topic, value=value, partition=i % PARTITIONS)
        producer.flush()
    finally:
        producer.close()


def _values(*members: Member) -> set[bytes]:
    return {value for member in members for _p, _o, value in member.read}


def test_a_kafka_python_group_shares_rebalances_and_resumes_from_its_commits(
    cluster: Cluster,
) -> None:
    topic = _topic(cluster, "kafka-group")
    group = "kafka-python-group"
    first_batch = {f"first-{i}".encode() for i in range(60)}
    _produce(cluster, topic, sorted(first_batch))
    first, second = Member(cluster, topic, group), Member(cluster, topic, group)
    try:
        wait_until(lambda: first.owned and second.owned
                   and first.owned | second.owned == set(range(PARTITIONS))
                   and not first.owned & second.owned, 90,
                   "the two members sharing the three partitions")
        wait_until(lambda: _values(first, second) >= first_batch, 60, "every record read")
        second.leave()
        wait_until(lambda: first.owned == set(range(PARTITIONS)), 60,
                   "the remaining member owning every partition")
        more = {f"more-{i}".encode() for i in range(30)}
        _produce(cluster, topic, sorted(more))
        wait_until(lambda: _values(first) >= more, 60, "the new records, read by the one left")
    finally:
        first.leave()
        second.leave()
    assert _values(first, second) == first_batch | more
    # The group restarts: it resumes after what it committed, and reads only what is new.
    last = {f"last-{i}".encode() for i in range(15)}
    _produce(cluster, topic, sorted(last))
    restarted = Member(cluster, topic, group)
    try:
        wait_until(lambda: _values(restarted) >= last, 90, "the new records after the restart")
        time.sleep(1)  # time enough to have read anything older, had it started too early
    finally:
        restarted.leave()
    assert _values(restarted) == last
    # rafka's own view of the group's committed offsets is the same.
    committed = cluster.committed_offsets(group, [(topic, p) for p in range(PARTITIONS)])
    assert committed == {(topic, p): 35 for p in range(PARTITIONS)}
