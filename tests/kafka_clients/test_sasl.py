"""Unmodified Kafka clients over SASL against rafka's SASL listeners: confluent-kafka,
kafka-python, aiokafka and kcat produce, consume in a group and (but kcat) run a transaction
over SASL_SSL with SCRAM-SHA-512 and with OAUTHBEARER (unsecured tokens, as Kafka's default
validator takes them); users are created with AlterUserScramCredentials over a SASL_PLAINTEXT
PLAIN listener and picked up without a restart; a wrong password, an unknown user and a bad
token are refused within seconds; a request before the handshake closes the connection.

One cluster of two brokers for the module, each with three listeners: SCRAM (SASL_SSL,
SCRAM-SHA-512), OAUTH (SASL_SSL, OAUTHBEARER) and PLAIN (SASL_PLAINTEXT, PLAIN).
"""

from __future__ import annotations

import asyncio
import socket
import time
import uuid
from collections.abc import Iterator
from typing import Any

import jwt
import pytest
import trustme
from confluent_kafka import KafkaException, Producer
from confluent_kafka.admin import (
    AdminClient,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)

from rafka import Cluster
from tests.support import secured_clients as clients
from tests.support.cluster import cluster_of_its_own

pytestmark = pytest.mark.cluster

ADMIN, ADMIN_PASSWORD = "admin", "admin-secret"
USER, PASSWORD = "alice", "alice-secret"
COUNT = 20
REFUSED_WITHIN_S = 5


@pytest.fixture(scope="module")
def ca_file(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, str]:
    folder = tmp_path_factory.mktemp("sasl-certificates")
    ca = trustme.CA()
    ca.cert_pem.write_to_path(str(folder / "ca.pem"))
    ca.issue_cert("127.0.0.1", "localhost").private_key_and_cert_chain_pem.write_to_path(
        str(folder / "broker.pem"))
    return str(folder / "ca.pem"), str(folder / "broker.pem")


@pytest.fixture(scope="module")
def sasl_cluster(zookeeper, ray_session, tmp_path_factory,
                 ca_file: tuple[str, str]) -> Iterator[Cluster]:
    jaas = ("org.apache.kafka.common.security.plain.PlainLoginModule required "
            f'username="{ADMIN}" password="{ADMIN_PASSWORD}" user_{ADMIN}="{ADMIN_PASSWORD}";')
    for cluster in cluster_of_its_own(
            zookeeper, tmp_path_factory, "kafka-sasl", brokers=2,
            kafka_listeners="SCRAM://127.0.0.1:0,OAUTH://127.0.0.1:0,PLAIN://127.0.0.1:0",
            broker_config={
                "listener.security.protocol.map":
                    "SCRAM:SASL_SSL,OAUTH:SASL_SSL,PLAIN:SASL_PLAINTEXT",
                "ssl.keystore.location": ca_file[1],
                "listener.name.scram.sasl.enabled.mechanisms": "SCRAM-SHA-512",
                "listener.name.oauth.sasl.enabled.mechanisms": "OAUTHBEARER",
                "listener.name.plain.sasl.enabled.mechanisms": "PLAIN",
                "listener.name.plain.plain.sasl.jaas.config": jaas,
                "group.initial.rebalance.delay.ms": 200}):
        admin = AdminClient(plain_config(cluster))
        upsert = UserScramCredentialUpsertion(
            USER, ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 8192), PASSWORD.encode())
        for future in admin.alter_user_scram_credentials([upsert]).values():
            future.result(timeout=30)
        yield cluster


def bootstrap(cluster: Cluster, listener: str) -> str:
    return ",".join(f"{host}:{port}" for host, port in clients.endpoints(cluster, listener))


def plain_config(cluster: Cluster) -> dict[str, Any]:
    return {"bootstrap.servers": bootstrap(cluster, "PLAIN"),
            "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
            "sasl.username": ADMIN, "sasl.password": ADMIN_PASSWORD}


def confluent_config(cluster: Cluster, ca: str, mechanism: str, user: str = USER,
                     password: str = PASSWORD) -> dict[str, Any]:
    config: dict[str, Any] = {"security.protocol": "SASL_SSL", "ssl.ca.location": ca,
                              "sasl.mechanism": mechanism}
    if mechanism == "OAUTHBEARER":
        config.update({"bootstrap.servers": bootstrap(cluster, "OAUTH"),
                       "enable.sasl.oauthbearer.unsecure.jwt": True,
                       "sasl.oauthbearer.config": f"principal={user}"})
    else:
        config.update({"bootstrap.servers": bootstrap(cluster, "SCRAM"),
                       "sasl.username": user, "sasl.password": password})
    return config


def unsecured_token(subject: str, lifetime_s: float = 3600) -> str:
    now = time.time()
    return jwt.encode({"sub": subject, "iat": now, "exp": now + lifetime_s}, None,
                      algorithm="none")


def new_topic(cluster: Cluster, name: str) -> str:
    topic = f"{name}-{uuid.uuid4().hex[:6]}"
    cluster.create_topic(topic, partitions=2, replication_factor=2)
    return topic


def expected() -> list[bytes]:
    return sorted(f"value-{i}".encode() for i in range(COUNT))


MECHANISMS = ["SCRAM-SHA-512", "OAUTHBEARER"]


def test_users_are_described_as_created(sasl_cluster: Cluster) -> None:
    admin = AdminClient(plain_config(sasl_cluster))
    described = admin.describe_user_scram_credentials([USER])[USER].result(timeout=30)
    infos = [(info.mechanism, info.iterations) for info in described.scram_credential_infos]
    assert infos == [(ScramMechanism.SCRAM_SHA_512, 8192)]


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_confluent_kafka_produces_consumes_and_commits_a_transaction(
        sasl_cluster: Cluster, ca_file: tuple[str, str], mechanism: str) -> None:
    config = confluent_config(sasl_cluster, ca_file[0], mechanism)
    topic = new_topic(sasl_cluster, "confluent-sasl")
    producer = Producer({**config, "transactional.id": f"{topic}-txn"})
    producer.init_transactions(30)
    producer.begin_transaction()
    for i in range(COUNT):
        producer.produce(topic, value=f"value-{i}".encode())
    producer.commit_transaction(30)
    values = clients.confluent_read(config, topic, COUNT, **{"isolation.level": "read_committed"})
    assert sorted(values) == expected()
    # The connections of a client that authenticated are its user's.
    listener = "OAUTH" if mechanism == "OAUTHBEARER" else "SCRAM"
    assert f"User:{USER}" in clients.principals(sasl_cluster).get(listener, set()), \
        clients.principals(sasl_cluster)
    del producer


def kafka_python_config(cluster: Cluster, ca: str, mechanism: str) -> dict[str, Any]:
    from kafka.net.sasl.oauth import AbstractTokenProvider

    class Unsecured(AbstractTokenProvider):
        def token(self) -> str:
            return unsecured_token(USER)

    config: dict[str, Any] = {"security_protocol": "SASL_SSL", "ssl_cafile": ca,
                              "sasl_mechanism": mechanism}
    if mechanism == "OAUTHBEARER":
        config.update(bootstrap_servers=bootstrap(cluster, "OAUTH"),
                      sasl_oauth_token_provider=Unsecured())
    else:
        config.update(bootstrap_servers=bootstrap(cluster, "SCRAM"),
                      sasl_plain_username=USER, sasl_plain_password=PASSWORD)
    return config


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_kafka_python_produces_consumes_and_commits_a_transaction(
        sasl_cluster: Cluster, ca_file: tuple[str, str], mechanism: str) -> None:
    from kafka import KafkaProducer

    config = kafka_python_config(sasl_cluster, ca_file[0], mechanism)
    topic = new_topic(sasl_cluster, "kafka-python-sasl")
    producer = KafkaProducer(transactional_id=f"{topic}-txn", **config)
    producer.init_transactions()
    producer.begin_transaction()
    for i in range(COUNT):
        producer.send(topic, value=f"value-{i}".encode())
    producer.commit_transaction()
    producer.close()
    assert clients.kafka_python_read(config, topic, COUNT, isolation_level="read_committed") \
        == expected()


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_aiokafka_produces_consumes_and_commits_a_transaction(
        sasl_cluster: Cluster, ca_file: tuple[str, str], mechanism: str) -> None:
    from aiokafka import AIOKafkaProducer
    from aiokafka.abc import AbstractTokenProvider
    from aiokafka.helpers import create_ssl_context

    class Unsecured(AbstractTokenProvider):
        async def token(self) -> str:
            return unsecured_token(USER)

    config = kafka_python_config(sasl_cluster, ca_file[0], mechanism)
    del config["ssl_cafile"]
    config["ssl_context"] = create_ssl_context(cafile=ca_file[0])
    if mechanism == "OAUTHBEARER":
        config["sasl_oauth_token_provider"] = Unsecured()
    topic = new_topic(sasl_cluster, "aiokafka-sasl")

    async def round_trip() -> list[bytes]:
        producer = AIOKafkaProducer(transactional_id=f"{topic}-txn", **config)
        await producer.start()
        try:
            async with producer.transaction():
                for i in range(COUNT):
                    await producer.send(topic, value=f"value-{i}".encode())
        finally:
            await producer.stop()
        return await clients.aiokafka_read(config, topic, COUNT, isolation_level="read_committed")

    assert asyncio.run(round_trip()) == expected()


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_kcat_produces_and_consumes_in_a_group(
        sasl_cluster: Cluster, ca_file: tuple[str, str], mechanism: str) -> None:
    if clients.KCAT is None:
        pytest.fail("kcat is not installed: apt-get install kcat (.ci/run installs it)")
    config = confluent_config(sasl_cluster, ca_file[0], mechanism)
    options = ["-b", config.pop("bootstrap.servers")]
    for key, value in config.items():
        options += ["-X", f"{key}={str(value).lower() if isinstance(value, bool) else value}"]
    topic = new_topic(sasl_cluster, "kcat-sasl")

    assert clients.kcat_round_trip(options, topic, COUNT) == expected()


# ------------------------------------------------------------------------------ refused


@pytest.mark.parametrize(("user", "password"), [(USER, "wrong"), ("nobody", PASSWORD)])
def test_a_wrong_password_or_an_unknown_user_is_refused_within_seconds(
        sasl_cluster: Cluster, ca_file: tuple[str, str], user: str, password: str) -> None:
    from kafka import KafkaProducer
    from kafka.errors import KafkaError

    started = time.monotonic()
    admin = AdminClient({**confluent_config(sasl_cluster, ca_file[0], "SCRAM-SHA-512", user,
                                            password), "socket.timeout.ms": 3000})
    with pytest.raises(KafkaException):
        admin.list_topics(timeout=REFUSED_WITHIN_S)
    config = kafka_python_config(sasl_cluster, ca_file[0], "SCRAM-SHA-512")
    config.update(sasl_plain_username=user, sasl_plain_password=password)
    with pytest.raises(KafkaError):
        KafkaProducer(bootstrap_timeout_ms=REFUSED_WITHIN_S * 1000, **config)
    assert time.monotonic() - started < 2 * REFUSED_WITHIN_S + 5


def test_a_bad_token_is_refused_within_seconds(sasl_cluster: Cluster,
                                               ca_file: tuple[str, str]) -> None:
    from kafka import KafkaProducer
    from kafka.errors import KafkaError
    from kafka.net.sasl.oauth import AbstractTokenProvider

    class Expired(AbstractTokenProvider):
        def token(self) -> str:
            return unsecured_token(USER, lifetime_s=-60)

    config = kafka_python_config(sasl_cluster, ca_file[0], "OAUTHBEARER")
    config["sasl_oauth_token_provider"] = Expired()
    started = time.monotonic()
    with pytest.raises(KafkaError):
        KafkaProducer(bootstrap_timeout_ms=REFUSED_WITHIN_S * 1000, **config)
    assert time.monotonic() - started < REFUSED_WITHIN_S + 5


def test_a_request_before_the_handshake_closes_the_connection(sasl_cluster: Cluster) -> None:
    from kafka.protocol.metadata import MetadataRequest

    host, port = clients.endpoints(sasl_cluster, "PLAIN")[0]
    request = MetadataRequest(version=1, topics=[])
    request.with_header(correlation_id=1, client_id="early")
    with socket.create_connection((host, port), timeout=REFUSED_WITHIN_S) as connection:
        connection.sendall(bytes(request.encode(header=True, framed=True)))
        assert connection.recv(4) == b"", "closed, unanswered"
    # The listener serves on.
    admin = AdminClient(plain_config(sasl_cluster))
    assert len(admin.list_topics(timeout=30).brokers) == 2


def test_a_deleted_user_is_refused_without_a_restart(sasl_cluster: Cluster,
                                                     ca_file: tuple[str, str]) -> None:
    admin = AdminClient(plain_config(sasl_cluster))
    upsert = UserScramCredentialUpsertion(
        "bob", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096), b"bob-secret")
    for future in admin.alter_user_scram_credentials([upsert]).values():
        future.result(timeout=30)
    config = confluent_config(sasl_cluster, ca_file[0], "SCRAM-SHA-512", "bob", "bob-secret")
    deadline = time.monotonic() + 30
    while True:  # each broker learns of the new user from its watch
        try:
            assert len(AdminClient(config).list_topics(timeout=5).brokers) == 2
            break
        except KafkaException:
            assert time.monotonic() < deadline, "the new user was never accepted"
    from confluent_kafka.admin import UserScramCredentialDeletion
    deletion = UserScramCredentialDeletion("bob", ScramMechanism.SCRAM_SHA_512)
    for future in admin.alter_user_scram_credentials([deletion]).values():
        future.result(timeout=30)
    time.sleep(2)
    with pytest.raises(KafkaException):
        AdminClient({**config, "socket.timeout.ms": 3000}).list_topics(timeout=REFUSED_WITHIN_S)
