"""The data ports over mutual TLS (`security.inter.broker.protocol=SSL`) against a real
cluster: a port refuses a client without a certificate of the cluster's CA (in the clear, with
no certificate, or with a stranger's) before it reads a request, and serves one with it; and a
topic produced and consumed through rafka's own clients and through the Kafka port, replicated
by follower hosts, works end to end with every hop to a host over TLS.

One cluster of two brokers for the module, its certificates made by trustme.
"""

from __future__ import annotations

import socket
import ssl
import time
from collections.abc import Iterator

import pytest
import ray

from rafka import Cluster
from rafka.actors.dataport import frames
from rafka.actors.messages import OffsetQuery
from rafka.common.tls import PemFiles
from tests.support.certificates import cluster_files, inter_broker_ssl
from tests.support.cluster import cluster_of_its_own
from tests.support.kafka_clients import listener_stats
from tests.support.replicas import ReplicaOnHost
from tests.support.waiting import wait_until

pytestmark = pytest.mark.cluster


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> tuple[PemFiles, PemFiles]:
    return cluster_files(tmp_path_factory.mktemp("cluster-tls"))


@pytest.fixture(scope="module")
def tls_cluster(zookeeper, ray_session, tmp_path_factory, files: tuple[PemFiles, PemFiles],
                ) -> Iterator[Cluster]:
    config = {**inter_broker_ssl(files[0]), "group.initial.rebalance.delay.ms": 200}
    yield from cluster_of_its_own(zookeeper, tmp_path_factory, "data-port-tls", brokers=2,
                                  kafka_listeners="PLAINTEXT://127.0.0.1:0", broker_config=config)


def client_context(certificate: str | None, ca: str) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=ca)
    context.check_hostname = False
    if certificate is not None:
        context.load_cert_chain(certificate)
    return context


def list_offsets(address: tuple[str, int], token: bytes, topic: str,
                 context: ssl.SSLContext | None) -> bytes:
    """The raw answer to a ListOffsets (latest) over a connection of our own."""
    request = frames.hello(token) + frames.list_offsets_request([OffsetQuery(topic, 0, -1)])
    with socket.create_connection(address, timeout=10) as plain:
        connection = plain if context is None else context.wrap_socket(plain)
        connection.sendall(request)
        answer = connection.makefile("rb")
        header = answer.read(frames.LENGTH.size)
        if len(header) < frames.LENGTH.size:
            raise ConnectionResetError("the data port closed the connection")
        return answer.read(frames.frame_length(header, 1 << 20))


def test_a_data_port_serves_only_the_clusters_certificate(
        tls_cluster: Cluster, files: tuple[PemFiles, PemFiles]) -> None:
    node, stranger = files
    tls_cluster.create_topic("tls-guarded", partitions=1, replication_factor=2)
    leader = ReplicaOnHost(tls_cluster, "tls-guarded", 0)
    host, port, token, tls = ray.get(leader.host.data_port_address.remote(), timeout=30)
    assert tls is not None and tls == node
    own = client_context(node.certificate_chain, node.ca_bundle)
    answer = frames.read_list_offsets_answer(list_offsets((host, port), token, "tls-guarded", own))
    assert [reply.offset for reply in answer] == [0]
    refused = {
        "in the clear": None,
        "without a certificate": client_context(None, node.ca_bundle),
        "with a stranger's certificate": client_context(stranger.certificate_chain, node.ca_bundle),
    }
    for what, context in refused.items():
        with pytest.raises((OSError, ssl.SSLError)):
            list_offsets((host, port), token, "tls-guarded", context)
            pytest.fail(f"served a client {what}")


def test_a_topic_goes_end_to_end_with_the_data_ports_over_tls(tls_cluster: Cluster) -> None:
    from confluent_kafka import Consumer, Producer

    tls_cluster.create_topic("tls-end-to-end", partitions=2, replication_factor=2,
                             config={"min.insync.replicas": 2})
    producer = tls_cluster.producer(acks="all")
    for i in range(100):
        producer.send("tls-end-to-end", value=f"own-{i}".encode(), partition=i % 2)
    producer.flush()
    producer.close()
    kafka_producer = Producer({"bootstrap.servers": tls_cluster.bootstrap_servers(),
                               "acks": "all"})
    for i in range(100):
        kafka_producer.produce("tls-end-to-end", f"kafka-{i}".encode(), partition=i % 2)
    assert kafka_producer.flush(60) == 0
    for partition in range(2):
        leader = ReplicaOnHost(tls_cluster, "tls-end-to-end", partition)
        wait_until(lambda leader=leader: leader.describe()["high_watermark"] == 100, 30,
                   f"partition {partition} replicated to 100 (the followers fetch over TLS)")
        assert len(leader.describe()["isr"]) == 2
    consumer = tls_cluster.consumer(["tls-end-to-end"], auto_offset_reset="earliest")
    own: list = []
    deadline = time.monotonic() + 60
    while len(own) < 200 and time.monotonic() < deadline:
        own += consumer.poll(timeout_ms=500)
    consumer.close()
    kafka_consumer = Consumer({"bootstrap.servers": tls_cluster.bootstrap_servers(),
                               "group.id": "tls-end-to-end", "auto.offset.reset": "earliest"})
    kafka_consumer.subscribe(["tls-end-to-end"])
    kafka: list = []
    deadline = time.monotonic() + 60
    while len(kafka) < 200 and time.monotonic() < deadline:
        kafka += [m for m in kafka_consumer.consume(num_messages=200, timeout=0.5)
                  if not m.error()]
    kafka_consumer.close()
    expected = sorted([f"own-{i}".encode() for i in range(100)]
                      + [f"kafka-{i}".encode() for i in range(100)])
    assert sorted(r.value for r in own) == expected
    assert sorted(m.value() for m in kafka) == expected
    stats = listener_stats(tls_cluster)
    assert sum(s["host_calls_over_data_ports"] for s in stats) > 0
    assert sum(s["host_failures"] for s in stats) == 0
