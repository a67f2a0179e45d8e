"""Requests over the connections producers, followers and consumers keep to the hosts' data
ports (`replica.fetch.transport=tcp`, the clients' `transport=tcp`, `actors/dataport/server.py`),
against a real cluster: producing, replicating and consuming work over either transport, the
port admits nobody without the host's token, a client that hears nothing from a host drops
the connection and makes a new one, and a host that cannot answer holds up only its own
partitions, even for a client's first connection to it."""

from __future__ import annotations

import asyncio
import os
import socket
import time
from typing import Any

import psutil
import pytest
import ray

from rafka.actors.dataport import async_client, blocking_client, frames
from rafka.actors.dataport.async_client import LeaderConnection
from rafka.actors.errors import raise_for
from rafka.actors.messages import EpochEndOffset, EpochQuery, OffsetQuery, ReplicaFetchPartition
from rafka.actors.offsets_topic import OFFSETS_TOPIC, offsets_partition
from rafka.common.sentinels import LATEST_TIMESTAMP
from rafka.common.topic_partition import TopicPartition
from rafka.logstore.batch import build_batch
from tests.support.connections import connections_to
from tests.support.faults import paused
from tests.support.kafka_clients import listener_stats
from tests.support.replicas import ReplicaOnHost
from tests.support.waiting import wait_until


def replicas_of(cluster, topic: str, partition: int) -> list[ReplicaOnHost]:
    leader = ReplicaOnHost(cluster, topic, partition)
    replicas = cluster.describe_topic(topic)["partitions"][partition]["replicas"]
    return [leader, *(ReplicaOnHost(cluster, topic, partition, broker)
                      for broker in replicas if broker != leader.broker)]


def read_all(consumer, count: int, timeout_s: float = 30) -> list:
    records: list = []
    deadline = time.monotonic() + timeout_s
    while len(records) < count and time.monotonic() < deadline:
        records += consumer.poll(timeout_ms=500)
    return records


@pytest.mark.parametrize("transport", ["tcp", "ray"])
def test_producing_replicating_and_consuming_over_either_transport(
        start_cluster, transport: str) -> None:
    cluster = start_cluster(3, broker_config={"replica.fetch.transport": transport})
    cluster.create_topic("both-ways", partitions=2, replication_factor=3)
    producer = cluster.producer(acks="all", transport=transport)
    for i in range(300):
        producer.send("both-ways", value=f"record-{i}".encode(), partition=i % 2)
    producer.flush()
    producer.close()
    for partition in range(2):
        replicas = replicas_of(cluster, "both-ways", partition)
        wait_until(lambda replicas=replicas: all(
            (facts := replica.describe())["log_end_offset"] == facts["high_watermark"] == 150
            for replica in replicas), 30, f"every replica of partition {partition} at 150")
        assert sorted(replicas[0].describe()["isr"]) == sorted(r.broker for r in replicas)
    consumer = cluster.consumer(["both-ways"], auto_offset_reset="earliest",
                                transport=transport, max_partition_fetch_bytes=1024)
    records = read_all(consumer, 300)
    consumer.close()
    for partition in range(2):
        mine = [r for r in records if r.partition == partition]
        assert [r.offset for r in mine] == list(range(150))
        assert [r.value for r in mine] == [f"record-{i}".encode()
                                           for i in range(partition, 300, 2)]


@pytest.mark.parametrize("transport", ["tcp", "ray"])
def test_a_kafka_clients_records_reach_the_hosts_over_either_transport(
        start_cluster, transport: str) -> None:
    """The brokers' Kafka listeners hand Kafka clients' Produce, Fetch, ListOffsets and
    OffsetFetch to the replica hosts over their data ports, or as actor calls
    (kafka.listener.host.transport): either way an idempotent producer's records come back
    whole and in order, the partitions' ends are where they are, and a group's committed
    offsets read back."""
    from confluent_kafka import Consumer, Producer, TopicPartition

    cluster = start_cluster(3, kafka_listeners="PLAINTEXT://127.0.0.1:0",
                            broker_config={"kafka.listener.host.transport": transport})
    cluster.create_topic("kafka-both-ways", partitions=2, replication_factor=3,
                         config={"min.insync.replicas": 2})
    producer = Producer({"bootstrap.servers": cluster.bootstrap_servers(), "acks": "all",
                         "enable.idempotence": True, "linger.ms": 5})
    failed: list = []
    for i in range(400):
        producer.produce("kafka-both-ways", f"record-{i}".encode(), partition=i % 2,
                         on_delivery=lambda error, _message: error and failed.append(error))
    assert producer.flush(60) == 0 and not failed, failed
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap_servers(),
                         "group.id": "assign-only", "enable.auto.commit": False,
                         "max.partition.fetch.bytes": 1024})
    # ListOffsets, earliest and latest, as a consumer without a committed offset asks.
    assert [consumer.get_watermark_offsets(TopicPartition("kafka-both-ways", p), timeout=30)
            for p in range(2)] == [(0, 200), (0, 200)]
    consumer.assign([TopicPartition("kafka-both-ways", p, 0) for p in range(2)])
    read: list = []
    deadline = time.monotonic() + 60
    while len(read) < 400 and time.monotonic() < deadline:
        read += [m for m in consumer.consume(num_messages=400, timeout=0.5) if not m.error()]
    # OffsetCommit, then OffsetFetch from the group's offset manager.
    ends = [TopicPartition("kafka-both-ways", p, 200) for p in range(2)]
    consumer.commit(offsets=ends, asynchronous=False)
    committed = consumer.committed([TopicPartition("kafka-both-ways", p) for p in range(2)],
                                   timeout=30)
    assert [(tp.partition, tp.offset) for tp in committed] == [(0, 200), (1, 200)]
    consumer.close()
    for partition in range(2):
        mine = [m for m in read if m.partition() == partition]
        assert [m.offset() for m in mine] == list(range(200))
        assert [m.value() for m in mine] == [f"record-{i}".encode()
                                             for i in range(partition, 400, 2)]
    stats = listener_stats(cluster)
    over_ports = sum(s["host_calls_over_data_ports"] for s in stats)
    assert sum(s["host_failures"] for s in stats) == 0
    assert (over_ports > 0) if transport == "tcp" else (over_ports == 0)


def closed_by_peer(connection: socket.socket) -> bool:
    """Whether the other end closed (a reset when it left what we sent unread); a timeout
    raises: an answer or silence is not a close."""
    try:
        return connection.recv(1) == b""
    except ConnectionResetError:
        return True


def test_a_stranger_on_the_data_port_learns_nothing_and_moves_nothing(
        start_cluster) -> None:
    cluster = start_cluster(3)
    cluster.create_topic("guarded", partitions=1, replication_factor=3)
    leader, *followers = replicas_of(cluster, "guarded", 0)
    host, port, token, _tls = ray.get(leader.host.data_port_address.remote(), timeout=30)
    epoch = leader.describe()["leader_epoch"]
    # What a stranger would send to move the high watermark: each follower's fetch, at the
    # leader's log end, at the right epoch.
    forged = b"".join(
        frames.replica_fetch_request(follower.broker, 1, True,
                                   [ReplicaFetchPartition("guarded", 0, 5, epoch, 0)],
                                   [], 0, 1 << 20, 1 << 20)
        for follower in followers)
    attempts = {
        "no hello": forged,
        "a wrong token": frames.hello(bytes(len(token))) + forged,
        "garbage": b"\x00\x00\x00\x05\xc1\xc1\xc1\xc1\xc1" + forged,
        "an oversized frame": (2**31).to_bytes(4, "big") + forged,
    }
    with paused([follower.pid() for follower in followers]):
        time.sleep(1.0)  # the followers' fetches in flight come back (200 ms waits)
        records = build_batch([(None, f"unreplicated-{i}".encode(), 0, None) for i in range(5)])
        assert raise_for(leader.produce(records, acks=1)).base_offset == 0
        for what, sent in attempts.items():
            with socket.create_connection((host, port), timeout=10) as connection:
                connection.sendall(sent)
                assert closed_by_peer(connection), f"{what}: the connection stays open"
        time.sleep(0.5)
        facts = leader.describe()
        assert (facts["log_end_offset"], facts["high_watermark"]) == (5, 0)
        assert sorted(facts["isr"]) == sorted([leader.broker, *(f.broker for f in followers)])
    wait_until(lambda: leader.describe()["high_watermark"] == 5, 30,
               "the followers, resumed, to move the high watermark")


def _group_managed_elsewhere(cluster: Any, topic: str, prefix: str) -> tuple[str, int]:
    """A new one-partition `topic`, and a group (named `prefix`-N) whose offset manager is on
    the broker that does not lead it, so that a client's only business with that broker's host
    is the group's offsets: the group, and that host's data port."""
    cluster.create_topic(topic, partitions=1, replication_factor=1)
    cluster.commit_offsets("another-group", {(topic, 0): 0})  # the offsets topic, led
    records_leader = cluster.describe_topic(topic)["partitions"][0]["leader"]
    offsets_partitions = cluster.partition_count(OFFSETS_TOPIC)
    group = next(name for name in (f"{prefix}-{n}" for n in range(1000))
                 if ReplicaOnHost(cluster, OFFSETS_TOPIC,
                                  offsets_partition(name, offsets_partitions)).broker
                 != records_leader)
    manager = ReplicaOnHost(cluster, OFFSETS_TOPIC, offsets_partition(group, offsets_partitions))
    _host, port, _token, _tls = ray.get(manager.host.data_port_address.remote(), timeout=30)
    return group, port


@pytest.mark.parametrize("transport", ["tcp", "ray"])
def test_a_groups_commits_reach_its_offset_manager_over_the_consumers_transport(
        start_cluster, transport: str) -> None:
    """A group member's commits and offset fetches go to its offset manager's host over the
    consumer's transport: with TCP on a connection of their own to that host's data port, as
    its fetches go to theirs, so a Ray whose directory went deaf does not hold them up."""
    cluster = start_cluster(2)
    group, port = _group_managed_elsewhere(cluster, "committed", "commits")
    producer = cluster.producer(acks=1)
    for number in range(6):
        producer.send("committed", value=b"%d" % number).result(30)
    producer.close()
    assert not connections_to(os.getpid(), port)
    consumer = cluster.consumer(["committed"], group=group, transport=transport,
                                enable_auto_commit=False, auto_offset_reset="earliest")
    try:
        assert len(read_all(consumer, 6)) == 6
        consumer.commit()
        assert consumer.committed([("committed", 0)]) == {TopicPartition("committed", 0): 6}
        opened = connections_to(os.getpid(), port)
        assert_offsets_connections(transport, opened)
    finally:
        consumer.close()
    assert not connections_to(os.getpid(), port), "close() leaves the offsets' connection"


def assert_offsets_connections(transport: str, opened: set[int]) -> None:
    """Over TCP, the offsets opened one connection of their own to the manager's data port;
    over Ray, none."""
    if transport == "tcp":
        assert len(opened) == 1, f"the offsets opened {len(opened)} connections"
    else:
        assert not opened


@pytest.mark.parametrize("transport", ["tcp", "ray"])
def test_a_transactions_group_offsets_reach_their_offset_manager_over_the_producers_transport(
        start_cluster, transport: str) -> None:
    """A transactional producer's TxnOffsetCommit goes to the group's offset manager over the
    producer's transport: with TCP on a connection of its own to that host's data port."""
    cluster = start_cluster(2)
    group, port = _group_managed_elsewhere(cluster, "transformed", "transformer")
    producer = cluster.producer(transactional_id=f"offsets-{transport}", transport=transport)
    try:
        producer.init_transactions()
        producer.begin_transaction()
        producer.send("transformed", value=b"out", partition=0)
        assert not connections_to(os.getpid(), port)
        producer.send_offsets_to_transaction({("source", 0): 7}, group)
        opened = connections_to(os.getpid(), port)
        producer.commit_transaction()
        assert_offsets_connections(transport, opened)
    finally:
        producer.close()
    assert not connections_to(os.getpid(), port), "close() leaves the offsets' connection"
    wait_until(lambda: cluster.committed_offsets(group, [("source", 0)]) == {("source", 0): 7},
               30, "the committed transaction's offsets")


def test_a_follower_that_hears_nothing_from_its_leader_connects_again(start_cluster) -> None:
    cluster = start_cluster(2, broker_config={"replica.socket.timeout.ms": 1000})
    cluster.create_topic("silent", partitions=1, replication_factor=2)
    leader, follower = replicas_of(cluster, "silent", 0)
    _host, port, _token, _tls = ray.get(leader.host.data_port_address.remote(), timeout=30)
    follower_pid = follower.pid()
    first = wait_until(lambda: connections_to(follower_pid, port), 30,
                       "the follower's connection to its leader")
    # Paused, the leader's host answers nothing, though its kernel keeps the connection up:
    # what a silent network looks like. The follower gives up on its fetch after
    # replica.fetch.wait.max.ms + replica.socket.timeout.ms (1.2 s here).
    with paused([leader.pid()]):
        time.sleep(3.0)
    wait_until(lambda: (now := connections_to(follower_pid, port)) and not now & first, 30,
               "a new connection, the silent one dropped")
    producer = cluster.producer(acks="all")
    producer.send("silent", value=b"after").result(timeout=30)
    producer.close()
    wait_until(lambda: follower.describe()["log_end_offset"] == 1, 30, "the record replicated")


def test_a_consumer_that_hears_nothing_from_a_host_connects_again(start_cluster) -> None:
    cluster = start_cluster(1)
    cluster.create_topic("quiet", partitions=1, replication_factor=1)
    leader = ReplicaOnHost(cluster, "quiet", 0)
    _host, port, _token, _tls = ray.get(leader.host.data_port_address.remote(), timeout=30)
    with cluster.producer(acks="all") as producer:  # its connection goes with it
        producer.send("quiet", value=b"before").result(timeout=30)
    consumer = cluster.consumer(["quiet"], auto_offset_reset="earliest", request_timeout_ms=1000,
                                fetch_max_wait_ms=200, transport="tcp")
    assert [r.value for r in read_all(consumer, 1)] == [b"before"]
    me = psutil.Process().pid
    first = wait_until(lambda: connections_to(me, port), 30, "the consumer's connection")
    # Polling through the pause: each fetch gives up after 1.2 s, and so does each attempt
    # to learn where the paused host listens.
    with paused([leader.pid()]):
        assert read_all(consumer, 1, timeout_s=3.0) == []
        assert not connections_to(me, port) & first, "the silent connection was kept"
    with cluster.producer(acks="all") as producer:
        producer.send("quiet", value=b"after").result(timeout=30)
    assert [r.value for r in read_all(consumer, 1)] == [b"after"]
    consumer.close()


def test_a_producer_that_hears_nothing_from_its_leader_retries_on_a_new_connection(
        start_cluster) -> None:
    cluster = start_cluster(1)
    cluster.create_topic("hushed", partitions=1, replication_factor=1)
    leader = ReplicaOnHost(cluster, "hushed", 0)
    _host, port, _token, _tls = ray.get(leader.host.data_port_address.remote(), timeout=30)
    producer = cluster.producer(acks="all", request_timeout_ms=1000, transport="tcp")
    producer.send("hushed", value=b"first").result(timeout=30)
    me = psutil.Process().pid
    first = wait_until(lambda: connections_to(me, port), 30, "the producer's connection")
    with paused([leader.pid()]):
        pending = producer.send("hushed", value=b"second")
        time.sleep(3.0)  # past request.timeout.ms and its second of slack
        assert not pending.done()
        assert not connections_to(me, port) & first, "the silent connection was kept"
    assert pending.result(timeout=30).offset == 1
    producer.close()
    consumer = cluster.consumer(["hushed"], auto_offset_reset="earliest")
    assert [r.value for r in read_all(consumer, 2)] == [b"first", b"second"]
    assert consumer.poll(timeout_ms=500) == []  # the retry appended nothing twice
    consumer.close()


def test_clients_connecting_to_a_paused_host_go_on_with_the_other_hosts(start_cluster) -> None:
    # A new connection asks the host where it listens, then connects; neither may hold the
    # client's thread, or a host that cannot answer (paused here; in production a node cut off
    # or a GCS that cannot confirm it dead) stops every partition the client writes or reads.
    cluster = start_cluster(2)
    cluster.create_topic("split", partitions=2, replication_factor=1)
    paused_leader = ReplicaOnHost(cluster, "split", 0)
    assert paused_leader.broker != ReplicaOnHost(cluster, "split", 1).broker
    pid = paused_leader.pid()
    producer = cluster.producer(acks="all", request_timeout_ms=20_000, transport="tcp")
    consumer = cluster.consumer(["split"], transport="tcp", fetch_max_wait_ms=100,
                                request_timeout_ms=20_000)
    for partition in (0, 1):
        consumer.seek("split", partition, 0)  # no offset lookup: the first call is a fetch
    with paused([pid]):
        held = producer.send("split", value=b"held", partition=0)
        started = time.monotonic()
        for number in range(5):
            producer.send("split", value=b"%d" % number, partition=1).result(timeout=5)
        assert time.monotonic() - started < 5, "the paused host held the other's writes"
        assert sorted(r.value for r in read_all(consumer, 5, timeout_s=5)) == [
            b"0", b"1", b"2", b"3", b"4"]
        assert not held.done()
    assert held.result(timeout=30).offset == 0
    assert [r.value for r in read_all(consumer, 1)] == [b"held"]
    producer.close()
    consumer.close()


@ray.remote(num_cpus=0)
class _Unanswering:
    """A stand-in for a host handle Ray routes nowhere (its caller's GCS connection half-open
    after a fault): a call to it never comes back."""

    def data_port_address(self) -> None:
        time.sleep(3600)


def test_a_host_that_ray_cannot_reach_is_found_where_its_broker_published_it(
        cluster, monkeypatch: pytest.MonkeyPatch) -> None:
    cluster.create_topic("published", partitions=1, replication_factor=1)
    producer = cluster.producer(acks=1)
    for number in range(3):
        producer.send("published", value=b"%d" % number).result(timeout=30)
    producer.close()
    host_name = ReplicaOnHost(cluster, "published", 0).host_name
    monkeypatch.setattr(blocking_client, "ZOOKEEPER_AFTER_S", 0.2)
    unanswering = _Unanswering.remote()
    query = ([OffsetQuery("published", 0, LATEST_TIMESTAMP, False)],)
    with_zookeeper = blocking_client.TcpCalls(30, 1 << 20, lambda: cluster.store)
    without = blocking_client.TcpCalls(2, 1 << 20)
    try:
        found = with_zookeeper.send(host_name, unanswering, frames.LIST_OFFSETS, query,
                                    timeout_s=10)
        assert with_zookeeper.wait([found], 10) == [found]
        assert raise_for(with_zookeeper.result(found)[0]).offset == 3
        # Without ZooKeeper the request has only the host's silence to go on: it fails once
        # the connect timeout is up, and the client asks for the leaders again.
        lost = without.send(host_name, unanswering, frames.LIST_OFFSETS, query, timeout_s=10)
        assert without.wait([lost], 10) == [lost]
        with pytest.raises(blocking_client.HostConnectionError):
            without.result(lost)
    finally:
        with_zookeeper.close()
        without.close()
        ray.kill(unanswering)


def test_a_follower_finds_a_leader_ray_cannot_reach_where_its_broker_published_it(
        cluster, monkeypatch: pytest.MonkeyPatch) -> None:
    """A follower host's connection to its leader host (`LeaderConnection`) asks the leader
    where it listens through Ray, and its own broker (`published_data_port`, from ZooKeeper)
    once Ray is late; the truncation's OffsetsForLeaderEpoch then goes over the data port, as
    the fetches do. A leader Ray knows died is not looked for in ZooKeeper."""
    cluster.create_topic("epochs", partitions=1, replication_factor=1)
    producer = cluster.producer(acks=1)
    for number in range(3):
        producer.send("epochs", value=b"%d" % number).result(timeout=30)
    producer.close()
    leader = ReplicaOnHost(cluster, "epochs", 0)
    broker = ray.get_actor(f"broker-{leader.broker}", namespace=cluster.namespace)
    published = ray.get(broker.published_data_port.remote(leader.host_name), timeout=30)
    assert published == ray.get(leader.host.data_port_address.remote(), timeout=30)
    epoch = leader.describe()["leader_epoch"]
    query = [EpochQuery("epochs", 0, epoch, epoch)]
    monkeypatch.setattr(async_client, "ZOOKEEPER_AFTER_S", 0.2)
    unanswering, dead = _Unanswering.remote(), _Unanswering.remote()
    ray.kill(dead, no_restart=True)

    async def ask(handle: object, with_zookeeper: bool) -> list:
        async def host() -> object:
            return handle

        async def read_published() -> tuple | None:
            found = await broker.published_data_port.remote(leader.host_name)
            return None if found is None else tuple(found)

        connection = LeaderConnection(2, host, read_published if with_zookeeper else None)
        try:
            return await connection.call(frames.OFFSETS_FOR_LEADER_EPOCH, (query,), 10, 1 << 20)
        finally:
            connection.close()

    try:
        assert asyncio.run(ask(unanswering, True)) == [EpochEndOffset(epoch, 3)]
        # Without ZooKeeper the connection has only the host's silence to go on: it waits.
        with pytest.raises(asyncio.TimeoutError):
            asyncio.run(asyncio.wait_for(ask(unanswering, False), 3))
        with pytest.raises(ray.exceptions.ActorDiedError):
            asyncio.run(ask(dead, True))
    finally:
        ray.kill(unanswering)
