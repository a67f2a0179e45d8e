"""A SASL listener's authentication over a real localhost TLS socket (asyncio only: no Ray,
no broker): SCRAM-SHA-512 in SaslAuthenticate requests and PLAIN in v0 raw tokens
authenticate, a wrong password and an unknown user are answered SASL_AUTHENTICATION_FAILED
after the delay and closed, a request before the handshake closes the connection unanswered,
and a real client (confluent-kafka) with a wrong password fails within seconds; confluent-kafka,
kafka-python, aiokafka and kcat authenticate with SCRAM-SHA-512 and OAUTHBEARER."""

from __future__ import annotations

import asyncio
import logging
import shutil
import socket
import ssl
import struct
import subprocess
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
import trustme
from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient
from kafka.protocol.metadata import MetadataRequest
from kafka.protocol.sasl import (
    SaslAuthenticateRequest,
    SaslAuthenticateResponse,
    SaslHandshakeRequest,
    SaslHandshakeResponse,
)
from scramp import ScramClient

from rafka.actors.config import BrokerConfig
from rafka.actors.kafka.connection import KafkaConnection
from rafka.actors.kafka.sasl import (
    SASL_AUTHENTICATION_FAILED,
    SaslMechanisms,
    ScramCredentialCache,
    authenticate,
)
from rafka.actors.kafka.tls import server_ssl_context
from rafka.coordination.entity_config import Entity
from rafka.wire.sasl.scram import make_credential
from tests.support.kafka_wire import read_exactly

DELAY_MS = 300


class SaslServer:
    """A TLS server on its own thread's loop that authenticates each connection and keeps
    who it authenticated (None for a refused one)."""

    def __init__(self, context: ssl.SSLContext, mechanisms: SaslMechanisms) -> None:
        self.outcomes: list[str | None] = []
        self._mechanisms = mechanisms
        self._context = context
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        self._ready.wait(10)

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._server = self._loop.run_until_complete(self._loop.create_server(
            lambda: KafkaConnection(self._serve), "127.0.0.1", 0, ssl=self._context))
        self.port = self._server.sockets[0].getsockname()[1]
        self._ready.set()
        self._loop.run_forever()

    async def _serve(self, connection: KafkaConnection) -> None:
        authenticator = self._mechanisms.authenticator()
        ok = await authenticate(connection, authenticator, 1 << 20,
                                self._mechanisms.failure_delay_s, connection.peername)
        self.outcomes.append(str(authenticator.principal) if ok else None)
        connection.close()

    def close(self) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)


@pytest.fixture(scope="module")
def ca() -> trustme.CA:
    return trustme.CA()


@pytest.fixture(scope="module")
def server(ca: trustme.CA, tmp_path_factory: pytest.TempPathFactory) -> Iterator[SaslServer]:
    folder = tmp_path_factory.mktemp("sasl")
    ca.issue_cert("127.0.0.1").private_key_and_cert_chain_pem.write_to_path(
        str(folder / "broker.pem"))
    config = BrokerConfig.from_dict({
        "ssl.keystore.location": str(folder / "broker.pem"),
        "sasl.enabled.mechanisms": "SCRAM-SHA-512,PLAIN,OAUTHBEARER",
        "plain.sasl.jaas.config": 'x required user_alice="alice-secret";',
        "connection.failed.authentication.delay.ms": DELAY_MS})
    credentials = ScramCredentialCache()
    credentials.update(Entity(user="carol"), {
        "SCRAM-SHA-512": str(make_credential("SCRAM-SHA-512", "carol-secret"))})
    running = SaslServer(server_ssl_context(config), SaslMechanisms(config, credentials))
    yield running
    running.close()


@pytest.fixture
def client(ca: trustme.CA, server: SaslServer) -> Iterator[ssl.SSLSocket]:
    context = ssl.create_default_context()
    ca.configure_trust(context)
    raw = socket.create_connection(("127.0.0.1", server.port), timeout=10)
    tls = context.wrap_socket(raw, server_hostname="127.0.0.1")
    yield tls
    tls.close()


def request(sock: ssl.SSLSocket, message: Any, correlation_id: int) -> None:
    message.with_header(correlation_id=correlation_id, client_id="test")
    sock.sendall(bytes(message.encode(header=True, framed=True)))


def read_frame(sock: ssl.SSLSocket) -> bytes:
    """One frame; b"" if the server closed the connection."""
    head = b""
    while len(head) < 4:
        chunk = sock.recv(4 - len(head))
        if not chunk:
            return b""
        head += chunk
    (size,) = struct.unpack(">i", head)
    return read_exactly(sock, size)


def answer(sock: ssl.SSLSocket, response_type: Any, version: int) -> Any:
    frame = read_frame(sock)
    assert frame, "the server closed the connection"
    flexible = response_type is SaslAuthenticateResponse and version >= 2
    return response_type.decode(frame[5 if flexible else 4:], version=version)


def closed(sock: ssl.SSLSocket) -> bool:
    try:
        return read_frame(sock) == b""
    except (ConnectionError, ssl.SSLError):
        return True


def scram_exchange(sock: ssl.SSLSocket, user: str, password: str) -> Any:
    request(sock, SaslHandshakeRequest(version=1, mechanism="SCRAM-SHA-512"), 1)
    assert answer(sock, SaslHandshakeResponse, 1).error_code == 0
    scram = ScramClient(["SCRAM-SHA-512"], user, password)
    request(sock, SaslAuthenticateRequest(version=2, auth_bytes=scram.get_client_first()
                                          .encode()), 2)
    first = answer(sock, SaslAuthenticateResponse, 2)
    assert first.error_code == 0
    scram.set_server_first(first.auth_bytes.decode())
    request(sock, SaslAuthenticateRequest(version=2, auth_bytes=scram.get_client_final()
                                          .encode()), 3)
    final = answer(sock, SaslAuthenticateResponse, 2)
    if final.error_code == 0:
        scram.set_server_final(final.auth_bytes.decode())
    return final


def wait_outcome(server: SaslServer, count: int) -> str | None:
    deadline = time.monotonic() + 10
    while len(server.outcomes) < count and time.monotonic() < deadline:
        time.sleep(0.01)
    return server.outcomes[count - 1]


def test_scram_sha_512_authenticates(server: SaslServer, client: ssl.SSLSocket) -> None:
    before = len(server.outcomes)
    assert scram_exchange(client, "carol", "carol-secret").error_code == 0
    assert wait_outcome(server, before + 1) == "User:carol"


@pytest.mark.parametrize(("user", "password"), [("carol", "wrong"), ("nobody", "secret")])
def test_a_wrong_password_or_unknown_user_is_refused_after_the_delay(
        server: SaslServer, client: ssl.SSLSocket, user: str, password: str) -> None:
    before = len(server.outcomes)
    started = time.monotonic()
    final = scram_exchange(client, user, password)
    assert final.error_code == SASL_AUTHENTICATION_FAILED
    assert "invalid credentials" in final.error_message
    assert time.monotonic() - started >= DELAY_MS / 1000 * 0.9
    assert closed(client)
    assert wait_outcome(server, before + 1) is None


def test_plain_in_v0_raw_tokens(server: SaslServer, client: ssl.SSLSocket) -> None:
    before = len(server.outcomes)
    request(client, SaslHandshakeRequest(version=0, mechanism="PLAIN"), 1)
    assert answer(client, SaslHandshakeResponse, 0).error_code == 0
    token = b"\0alice\0alice-secret"
    client.sendall(struct.pack(">i", len(token)) + token)
    assert read_frame(client) == b""  # PLAIN's (empty) answer, as a raw token
    assert wait_outcome(server, before + 1) == "User:alice"


def test_a_request_before_the_handshake_closes_the_connection(
        server: SaslServer, client: ssl.SSLSocket) -> None:
    before = len(server.outcomes)
    request(client, MetadataRequest(version=1, topics=[]), 1)
    assert closed(client)
    assert wait_outcome(server, before + 1) is None


def test_confluent_kafka_with_a_wrong_password_fails_within_seconds(
        server: SaslServer, ca: trustme.CA, tmp_path: Any) -> None:
    ca.cert_pem.write_to_path(str(tmp_path / "ca.pem"))
    logged: list[str] = []

    class Collected(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            logged.append(record.getMessage())

    logger = logging.getLogger("rdkafka-sasl-refused")
    logger.addHandler(Collected())
    logger.propagate = False
    admin = AdminClient({"bootstrap.servers": f"127.0.0.1:{server.port}",
                         "security.protocol": "SASL_SSL", "ssl.ca.location":
                         str(tmp_path / "ca.pem"), "sasl.mechanism": "SCRAM-SHA-512",
                         "sasl.username": "carol", "sasl.password": "wrong",
                         "logger": logger})
    started = time.monotonic()
    with pytest.raises(KafkaException):
        admin.list_topics(timeout=5)
    assert time.monotonic() - started < 6, "nothing hangs"
    for _ in range(5):
        admin.poll(0.2)  # librdkafka's log lines come through the client's queue
    assert any("SASL authentication error" in line and "invalid credentials" in line
               for line in logged), logged


def _authenticated_as(server: SaslServer, before: int, timeout_s: float = 10) -> set[str]:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        found = {who for who in server.outcomes[before:] if who is not None}
        if found:
            return found
        time.sleep(0.05)
    return set()


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-512", "OAUTHBEARER"])
def test_real_clients_authenticate(server: SaslServer, ca: trustme.CA, tmp_path: Any,
                                   mechanism: str) -> None:
    """Each client's side of the exchange, as it sends it: the server here serves nothing
    after the authentication (it closes the connection), so only that is checked."""
    import jwt
    from aiokafka import AIOKafkaProducer
    from aiokafka.abc import AbstractTokenProvider as AsyncTokenProvider
    from aiokafka.helpers import create_ssl_context
    from kafka import KafkaProducer
    from kafka.net.sasl.oauth import AbstractTokenProvider

    ca_file = str(tmp_path / "ca.pem")
    ca.cert_pem.write_to_path(ca_file)
    address = f"127.0.0.1:{server.port}"

    def token() -> str:
        now = time.time()
        return jwt.encode({"sub": "carol", "iat": now, "exp": now + 600}, None,
                          algorithm="none")

    class Tokens(AbstractTokenProvider):
        def token(self) -> str:
            return token()

    class AsyncTokens(AsyncTokenProvider):
        async def token(self) -> str:
            return token()

    secret = ({"sasl.username": "carol", "sasl.password": "carol-secret"}
              if mechanism != "OAUTHBEARER" else
              {"enable.sasl.oauthbearer.unsecure.jwt": True,
               "sasl.oauthbearer.config": "principal=carol"})
    before = len(server.outcomes)
    admin = AdminClient({"bootstrap.servers": address, "security.protocol": "SASL_SSL",
                         "ssl.ca.location": ca_file, "sasl.mechanism": mechanism, **secret})
    with pytest.raises(KafkaException):
        admin.list_topics(timeout=3)
    assert _authenticated_as(server, before) == {"User:carol"}, "confluent-kafka"

    python_secret: dict[str, Any] = (
        {"sasl_plain_username": "carol", "sasl_plain_password": "carol-secret"}
        if mechanism != "OAUTHBEARER" else {"sasl_oauth_token_provider": Tokens()})
    before = len(server.outcomes)
    with pytest.raises(Exception):  # noqa: B017 (no metadata: whatever it raises)
        KafkaProducer(bootstrap_servers=address, security_protocol="SASL_SSL",
                      ssl_cafile=ca_file, sasl_mechanism=mechanism,
                      bootstrap_timeout_ms=3000, **python_secret)
    assert _authenticated_as(server, before) == {"User:carol"}, "kafka-python"

    async_secret: dict[str, Any] = (
        {"sasl_plain_username": "carol", "sasl_plain_password": "carol-secret"}
        if mechanism != "OAUTHBEARER" else {"sasl_oauth_token_provider": AsyncTokens()})

    async def aiokafka_tries() -> None:
        producer = AIOKafkaProducer(bootstrap_servers=address, security_protocol="SASL_SSL",
                                    ssl_context=create_ssl_context(cafile=ca_file),
                                    sasl_mechanism=mechanism, request_timeout_ms=3000,
                                    **async_secret)
        try:
            await asyncio.wait_for(producer.start(), 5)
        finally:
            await producer.stop()

    before = len(server.outcomes)
    with pytest.raises(Exception):  # noqa: B017
        asyncio.run(aiokafka_tries())
    assert _authenticated_as(server, before) == {"User:carol"}, "aiokafka"

    # kcat's librdkafka is older than confluent-kafka's: its SCRAM final nonce repeats the
    # client's part, which Kafka accepts (see ScramServer).
    kcat = shutil.which("kcat") or shutil.which("kafkacat")
    if kcat is None:
        pytest.fail("kcat is not installed: apt-get install kcat (.ci/run installs it)")
    before = len(server.outcomes)
    options = [f"{key}={str(value).lower() if isinstance(value, bool) else value}"
               for key, value in {"security.protocol": "SASL_SSL", "ssl.ca.location": ca_file,
                                  "sasl.mechanism": mechanism, **secret}.items()]
    subprocess.run([kcat, "-b", address, "-L", "-m", "2",
                    *[part for option in options for part in ("-X", option)]],
                   capture_output=True, timeout=30)
    assert _authenticated_as(server, before) == {"User:carol"}, "kcat"
