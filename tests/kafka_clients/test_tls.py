"""Unmodified Kafka clients over TLS against rafka's SSL listeners: confluent-kafka,
kafka-python, aiokafka and kcat produce and consume in a group over SSL and over mutual TLS,
and (but kcat, which has no transactions) commit a transaction over mutual TLS; an untrusted,
an expired or a missing client certificate where one is required, and a plaintext client on a
TLS port, are refused within bounded waits; and a broker with a PLAINTEXT and SSL listeners
serves them all, each client told the endpoints of its own listener.

One cluster of two brokers for the module, each with three listeners: PLAINTEXT, SSL (no client
certificates) and MTLS (SSL, `listener.name.mtls.ssl.client.auth=required`). Certificates are
made by trustme: one CA for the brokers and the trusted clients, another for an untrusted one.
"""

from __future__ import annotations

import asyncio
import datetime
import logging
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import trustme
from confluent_kafka import KafkaException, Producer
from confluent_kafka.admin import AdminClient

from rafka import Cluster
from tests.support.cluster import cluster_of_its_own
from tests.support.secured_clients import (
    KCAT,
    aiokafka_read,
    confluent_read,
    endpoints,
    kafka_python_read,
    kcat_round_trip,
    principals,
)

pytestmark = pytest.mark.cluster

PARTITIONS = 2
# How long a refused client is given before it must have failed (it retries until then).
REFUSED_WITHIN_S = 5


class Certificates:
    """PEM files: the CA, the brokers' chain and key, trusted and untrusted client pairs."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        ca, other_ca = trustme.CA(), trustme.CA()
        self.ca = self._write("ca.pem", ca.cert_pem.bytes())
        broker = ca.issue_cert("127.0.0.1", "localhost")
        self.broker = self._write("broker.pem", broker.private_key_and_cert_chain_pem.bytes())
        self.client = self._pair("client", ca.issue_cert(
            "client.example", common_name="app", organization_unit_name="Data",
            organization_name="Team"))
        self.untrusted = self._pair("untrusted", other_ca.issue_cert(
            "client.example", common_name="intruder"))
        now = datetime.datetime.now(datetime.timezone.utc)
        self.expired = self._pair("expired", ca.issue_cert(
            "client.example", common_name="late", not_before=now - datetime.timedelta(days=2),
            not_after=now - datetime.timedelta(days=1)))

    def _write(self, name: str, data: bytes) -> str:
        path = self.folder / name
        path.write_bytes(data)
        return str(path)

    def _pair(self, name: str, leaf: trustme.LeafCert) -> tuple[str, str]:
        return (self._write(f"{name}.crt", b"".join(pem.bytes() for pem in leaf.cert_chain_pems)),
                self._write(f"{name}.key", leaf.private_key_pem.bytes()))


@pytest.fixture(scope="module")
def certificates(tmp_path_factory: pytest.TempPathFactory) -> Certificates:
    return Certificates(tmp_path_factory.mktemp("certificates"))


@pytest.fixture(scope="module")
def tls_cluster(zookeeper, ray_session, tmp_path_factory,
                certificates: Certificates) -> Iterator[Cluster]:
    yield from cluster_of_its_own(
        zookeeper, tmp_path_factory, "kafka-tls", brokers=2,
        kafka_listeners="PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0,MTLS://127.0.0.1:0",
        broker_config={"listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SSL:SSL,MTLS:SSL",
                       "ssl.keystore.location": certificates.broker,
                       "ssl.truststore.location": certificates.ca,
                       "listener.name.mtls.ssl.client.auth": "required",
                       "ssl.handshake.timeout.ms": 3000,
                       "group.initial.rebalance.delay.ms": 200})


def bootstrap(cluster: Cluster, listener: str) -> str:
    return ",".join(f"{host}:{port}" for host, port in endpoints(cluster, listener))


def confluent_config(cluster: Cluster, certificates: Certificates, listener: str,
                     pair: tuple[str, str] | None = None) -> dict[str, Any]:
    config: dict[str, Any] = {"bootstrap.servers": bootstrap(cluster, listener)}
    if listener != "PLAINTEXT":
        config.update({"security.protocol": "SSL", "ssl.ca.location": certificates.ca})
    if pair is not None:
        config.update({"ssl.certificate.location": pair[0], "ssl.key.location": pair[1]})
    return config


def new_topic(cluster: Cluster, name: str) -> str:
    cluster.create_topic(name, partitions=PARTITIONS, replication_factor=2)
    return name


def confluent_round_trip(config: dict[str, Any], topic: str, count: int = 50) -> list[bytes]:
    """Produce `count` values with acks=all, then read them back in a group."""
    producer = Producer({**config, "acks": "all"})
    for i in range(count):
        producer.produce(topic, value=f"value-{i}".encode(), key=f"key-{i}".encode())
    assert producer.flush(60) == 0, "every record was acknowledged"
    return confluent_read(config, topic, count)


def expected(count: int = 50) -> list[bytes]:
    return sorted(f"value-{i}".encode() for i in range(count))


def kafka_python_tls(cluster: Cluster, certificates: Certificates,
                     listener: str) -> dict[str, Any]:
    """kafka-python's settings for a TLS listener; the client's pair on MTLS."""
    tls: dict[str, Any] = {"bootstrap_servers": bootstrap(cluster, listener),
                           "security_protocol": "SSL", "ssl_cafile": certificates.ca}
    if listener == "MTLS":
        tls.update(ssl_certfile=certificates.client[0], ssl_keyfile=certificates.client[1])
    return tls


def aiokafka_tls(cluster: Cluster, certificates: Certificates, listener: str) -> dict[str, Any]:
    """aiokafka's settings for a TLS listener; the client's pair on MTLS."""
    from aiokafka.helpers import create_ssl_context

    pair = certificates.client if listener == "MTLS" else (None, None)
    context = create_ssl_context(cafile=certificates.ca, certfile=pair[0], keyfile=pair[1])
    return {"bootstrap_servers": bootstrap(cluster, listener),
            "security_protocol": "SSL", "ssl_context": context}


# ---------------------------------------------------------------------- served over TLS


def test_each_listener_is_registered_with_its_security_protocol(tls_cluster: Cluster) -> None:
    for broker in tls_cluster.brokers():
        names = [endpoint.partition("://")[0] for endpoint in broker["endpoints"]]
        assert names == ["PLAINTEXT", "SSL", "MTLS"]
    assert len({port for name in ("PLAINTEXT", "SSL", "MTLS")
                for _host, port in endpoints(tls_cluster, name)}) == 6


@pytest.mark.parametrize("listener", ["PLAINTEXT", "SSL", "MTLS"])
def test_each_client_is_told_the_endpoints_of_its_own_listener(
        tls_cluster: Cluster, certificates: Certificates, listener: str) -> None:
    pair = certificates.client if listener == "MTLS" else None
    admin = AdminClient(confluent_config(tls_cluster, certificates, listener, pair))
    brokers = admin.list_topics(timeout=30).brokers
    assert sorted((b.host, b.port) for b in brokers.values()) == endpoints(tls_cluster, listener)


def test_confluent_kafka_produces_and_consumes_over_ssl(
        tls_cluster: Cluster, certificates: Certificates) -> None:
    topic = new_topic(tls_cluster, "confluent-over-ssl")
    config = confluent_config(tls_cluster, certificates, "SSL")
    assert confluent_round_trip(config, topic) == expected()


def test_confluent_kafka_over_mutual_tls_is_its_certificates_principal(
        tls_cluster: Cluster, certificates: Certificates) -> None:
    topic = new_topic(tls_cluster, "confluent-over-mtls")
    config = confluent_config(tls_cluster, certificates, "MTLS", certificates.client)
    producer = Producer(config)
    producer.produce(topic, value=b"held")
    assert producer.flush(60) == 0
    seen = principals(tls_cluster)
    assert "User:CN=app,OU=Data,O=Team" in seen["MTLS"], seen
    assert seen.get("SSL", set()) <= {"User:ANONYMOUS"}
    del producer
    assert confluent_round_trip(config, new_topic(tls_cluster, "confluent-over-mtls-2")) \
        == expected()


def test_confluent_kafka_commits_a_transaction_over_mutual_tls(
        tls_cluster: Cluster, certificates: Certificates) -> None:
    topic = new_topic(tls_cluster, "confluent-txn-over-mtls")
    config = confluent_config(tls_cluster, certificates, "MTLS", certificates.client)
    producer = Producer({**config, "transactional.id": f"{topic}-txn"})
    producer.init_transactions(30)
    producer.begin_transaction()
    for i in range(50):
        producer.produce(topic, value=f"value-{i}".encode())
    producer.commit_transaction(30)
    del producer
    assert confluent_read(config, topic, 50, **{"isolation.level": "read_committed"}) \
        == expected()


@pytest.mark.parametrize("listener", ["SSL", "MTLS"])
def test_kafka_python_produces_and_consumes_over_tls(
        tls_cluster: Cluster, certificates: Certificates, listener: str) -> None:
    from kafka import KafkaProducer

    topic = new_topic(tls_cluster, f"kafka-python-over-{listener.lower()}")
    tls = kafka_python_tls(tls_cluster, certificates, listener)
    producer = KafkaProducer(acks="all", **tls)
    for i in range(50):
        producer.send(topic, value=f"value-{i}".encode())
    producer.flush(60)
    producer.close()
    assert kafka_python_read(tls, topic, 50) == expected()


def test_kafka_python_commits_a_transaction_over_mutual_tls(
        tls_cluster: Cluster, certificates: Certificates) -> None:
    from kafka import KafkaProducer

    topic = new_topic(tls_cluster, "kafka-python-txn-over-mtls")
    tls = kafka_python_tls(tls_cluster, certificates, "MTLS")
    producer = KafkaProducer(transactional_id=f"{topic}-txn", **tls)
    producer.init_transactions()
    producer.begin_transaction()
    for i in range(50):
        producer.send(topic, value=f"value-{i}".encode())
    producer.commit_transaction()
    producer.close()
    assert kafka_python_read(tls, topic, 50, isolation_level="read_committed") == expected()


@pytest.mark.parametrize("listener", ["SSL", "MTLS"])
def test_aiokafka_produces_and_consumes_over_tls(
        tls_cluster: Cluster, certificates: Certificates, listener: str) -> None:
    from aiokafka import AIOKafkaProducer

    topic = new_topic(tls_cluster, f"aiokafka-over-{listener.lower()}")
    tls = aiokafka_tls(tls_cluster, certificates, listener)

    async def round_trip() -> list[bytes]:
        producer = AIOKafkaProducer(acks="all", enable_idempotence=True, **tls)
        await producer.start()
        try:
            for i in range(50):
                await producer.send(topic, value=f"value-{i}".encode())
            await producer.flush()
        finally:
            await producer.stop()
        return await aiokafka_read(tls, topic, 50)

    assert asyncio.run(round_trip()) == expected()


def test_aiokafka_commits_a_transaction_over_mutual_tls(
        tls_cluster: Cluster, certificates: Certificates) -> None:
    from aiokafka import AIOKafkaProducer

    topic = new_topic(tls_cluster, "aiokafka-txn-over-mtls")
    tls = aiokafka_tls(tls_cluster, certificates, "MTLS")

    async def round_trip() -> list[bytes]:
        producer = AIOKafkaProducer(transactional_id=f"{topic}-txn", **tls)
        await producer.start()
        try:
            async with producer.transaction():
                for i in range(50):
                    await producer.send(topic, value=f"value-{i}".encode())
        finally:
            await producer.stop()
        return await aiokafka_read(tls, topic, 50, isolation_level="read_committed")

    assert asyncio.run(round_trip()) == expected()


@pytest.mark.parametrize("listener", ["SSL", "MTLS"])
def test_kcat_produces_and_consumes_over_tls(
        tls_cluster: Cluster, certificates: Certificates, listener: str) -> None:
    if KCAT is None:
        pytest.fail("kcat is not installed: apt-get install kcat (.ci/run installs it)")
    topic = new_topic(tls_cluster, f"kcat-over-{listener.lower()}")
    tls = ["-b", bootstrap(tls_cluster, listener), "-X", "security.protocol=SSL",
           "-X", f"ssl.ca.location={certificates.ca}"]
    if listener == "MTLS":
        tls += ["-X", f"ssl.certificate.location={certificates.client[0]}",
                "-X", f"ssl.key.location={certificates.client[1]}"]

    assert kcat_round_trip(tls, topic, 50) == expected()


# ------------------------------------------------------------------------------ refused


class _Collected(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


def refused_by_confluent(config: dict[str, Any]) -> str:
    """A confluent-kafka client that must fail: its metadata request times out within
    REFUSED_WITHIN_S; what librdkafka logged on the way."""
    collected = _Collected()
    logger = logging.getLogger(f"rdkafka-{uuid.uuid4().hex[:6]}")
    logger.addHandler(collected)
    logger.setLevel(logging.DEBUG)
    logger.propagate = False
    admin = AdminClient({**config, "logger": logger, "socket.timeout.ms": 3000,
                         "reconnect.backoff.ms": 200})
    with pytest.raises(KafkaException):
        admin.list_topics(timeout=REFUSED_WITHIN_S)
    for _ in range(5):
        admin.poll(0.2)  # librdkafka's log lines come through the client's queue
    return "\n".join(collected.lines)


@pytest.mark.parametrize(("who", "says"), [
    ("untrusted", "unknown ca"),
    ("expired", "certificate expired"),
    ("none", "certificate required"),
])
def test_a_client_certificate_that_is_not_good_enough_is_refused(
        tls_cluster: Cluster, certificates: Certificates, who: str, says: str) -> None:
    pair = {"untrusted": certificates.untrusted, "expired": certificates.expired,
            "none": None}[who]
    logged = refused_by_confluent(confluent_config(tls_cluster, certificates, "MTLS", pair))
    # Under TLSv1.3 the client ends its side of the handshake before the broker has checked
    # its certificate: it reads the broker's alert, or only that the broker closed the link.
    assert says in logged.lower() or "SSL connection closed by peer" in logged, logged


def test_kafka_python_without_a_client_certificate_is_refused(
        tls_cluster: Cluster, certificates: Certificates) -> None:
    from kafka import KafkaProducer
    from kafka.errors import KafkaTimeoutError

    with pytest.raises(KafkaTimeoutError, match="Unable to bootstrap"):
        KafkaProducer(bootstrap_servers=bootstrap(tls_cluster, "MTLS"),
                      security_protocol="SSL", ssl_cafile=certificates.ca,
                      bootstrap_timeout_ms=REFUSED_WITHIN_S * 1000)


def test_a_plaintext_client_on_a_tls_port_is_refused_and_the_port_serves_on(
        tls_cluster: Cluster, certificates: Certificates) -> None:
    plaintext = {"bootstrap.servers": bootstrap(tls_cluster, "SSL")}
    logged = refused_by_confluent(plaintext)
    assert "disconnected" in logged.lower() or "closed" in logged.lower(), logged
    # kafka-python's version probe speaks Kafka's frames to the TLS port, gets no answer.
    from kafka import KafkaProducer
    from kafka.errors import KafkaTimeoutError

    with pytest.raises(KafkaTimeoutError, match="Unable to bootstrap"):
        KafkaProducer(bootstrap_servers=bootstrap(tls_cluster, "SSL"),
                      bootstrap_timeout_ms=REFUSED_WITHIN_S * 1000)
    admin = AdminClient(confluent_config(tls_cluster, certificates, "SSL"))
    assert len(admin.list_topics(timeout=30).brokers) == 2, "TLS clients are served on"
