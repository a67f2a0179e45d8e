"""The TLS of SSL listeners (`actors/kafka/tls.py`): the server context from the broker's ssl.*
settings, with an InvalidConfigError naming the setting for each bad file; and the listener's
connections over a real localhost TLS socket (asyncio only: no Ray, no broker): frames read
whole, the client certificate's principal, a client without a certificate refused where one
is required, and a client that never finishes its handshake dropped."""

from __future__ import annotations

import asyncio
import socket
import ssl
import struct
from pathlib import Path

import pytest
import trustme

from rafka.actors.config import BrokerConfig
from rafka.actors.kafka.connection import KafkaConnection
from rafka.actors.kafka.tls import server_ssl_context
from rafka.common.config import InvalidConfigError
from rafka.wire.principal import ANONYMOUS, principal_from_certificate


@pytest.fixture(scope="module")
def ca() -> trustme.CA:
    return trustme.CA()


@pytest.fixture(scope="module")
def files(ca: trustme.CA, tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    folder = tmp_path_factory.mktemp("tls")
    server = ca.issue_cert("127.0.0.1", "localhost")
    server.private_key_and_cert_chain_pem.write_to_path(str(folder / "broker.pem"))
    ca.cert_pem.write_to_path(str(folder / "ca.pem"))
    return {"keystore": str(folder / "broker.pem"), "truststore": str(folder / "ca.pem"),
            "folder": str(folder)}


def config(files: dict[str, str], **settings: str) -> BrokerConfig:
    return BrokerConfig.from_dict({"ssl.keystore.location": files["keystore"],
                                   "ssl.truststore.location": files["truststore"], **settings})


def test_the_context_follows_the_settings(files: dict[str, str]) -> None:
    context = server_ssl_context(config(files))
    assert context.verify_mode == ssl.CERT_NONE
    assert context.minimum_version == ssl.TLSVersion.TLSv1_2
    assert context.maximum_version == ssl.TLSVersion.TLSv1_3
    assert server_ssl_context(config(files, **{"ssl.client.auth": "required"})).verify_mode \
        == ssl.CERT_REQUIRED
    assert server_ssl_context(config(files, **{"ssl.client.auth": "requested"})).verify_mode \
        == ssl.CERT_OPTIONAL
    only_13 = server_ssl_context(config(files, **{"ssl.enabled.protocols": "TLSv1.3"}))
    assert only_13.minimum_version == only_13.maximum_version == ssl.TLSVersion.TLSv1_3


def test_an_encrypted_key_needs_its_password(ca: trustme.CA, tmp_path: Path) -> None:
    from cryptography.hazmat.primitives import serialization

    leaf = ca.issue_cert("127.0.0.1")
    key = serialization.load_pem_private_key(leaf.private_key_pem.bytes(), None)
    encrypted = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                  serialization.BestAvailableEncryption(b"secret"))
    path = tmp_path / "broker.pem"
    path.write_bytes(encrypted + b"".join(blob.bytes() for blob in leaf.cert_chain_pems))
    settings = {"ssl.keystore.location": str(path)}
    assert server_ssl_context(BrokerConfig.from_dict({**settings, "ssl.key.password": "secret"}))
    with pytest.raises(InvalidConfigError, match=r"set ssl\.key\.password"):
        server_ssl_context(BrokerConfig.from_dict({**settings, "ssl.key.password": "wrong"}))


@pytest.mark.parametrize(("setting", "says"), [
    ("ssl.keystore.location", "ssl.keystore.location=.*not a readable PEM file"),
    ("ssl.truststore.location", "ssl.truststore.location=.*not a readable PEM bundle"),
])
def test_an_unreadable_pem_file_names_its_setting(files: dict[str, str], tmp_path: Path,
                                                  setting: str, says: str) -> None:
    garbage = tmp_path / "garbage.pem"
    garbage.write_text("not a certificate")
    for path in (str(garbage), str(tmp_path / "missing.pem")):
        with pytest.raises(InvalidConfigError, match=says):
            server_ssl_context(config(files, **{setting: path, "ssl.client.auth": "required"}))


def test_unknown_cipher_suites_are_refused(files: dict[str, str]) -> None:
    with pytest.raises(InvalidConfigError, match=r"ssl\.cipher\.suites"):
        server_ssl_context(config(files, **{"ssl.cipher.suites": "NO-SUCH-CIPHER"}))
    assert server_ssl_context(config(files, **{"ssl.cipher.suites": "ECDHE+AESGCM"}))


# ------------------------------------------------------------------- over a TLS socket


async def serve_over_tls(context: ssl.SSLContext, client: ssl.SSLContext,
                         bodies: list[bytes]) -> tuple[list[bytes | bytearray], object]:
    """A TLS server reading `len(bodies)` frames that a client sends; the frames and the
    principal the server saw."""
    seen: list[bytes | bytearray] = []
    done = asyncio.get_running_loop().create_future()

    async def serve(connection: KafkaConnection) -> None:
        try:
            for _ in bodies:
                seen.append(await connection.read_frame(await connection.read_size()))
            done.set_result(principal_from_certificate(connection.peercert))
        except BaseException as error:
            done.set_exception(error)
        finally:
            connection.close()

    server = await asyncio.get_running_loop().create_server(
        lambda: KafkaConnection(serve), "127.0.0.1", 0, ssl=context, ssl_handshake_timeout=5)
    port = server.sockets[0].getsockname()[1]
    try:
        _reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=client,
                                                        server_hostname="127.0.0.1")
        for body in bodies:
            writer.write(struct.pack(">i", len(body)) + body)
        await writer.drain()
        principal = await asyncio.wait_for(done, 10)
        writer.close()
    finally:
        server.close()
    return seen, principal


def test_frames_arrive_whole_over_tls_and_a_client_certificate_names_the_principal(
        ca: trustme.CA, files: dict[str, str]) -> None:
    context = server_ssl_context(config(files, **{"ssl.client.auth": "required"}))
    client = ssl.create_default_context(cafile=files["truststore"])
    ca.issue_cert("client", common_name="app", organization_name="Team") \
        .configure_cert(client)
    bodies = [b"small", bytes(range(256)) * 4096, b"after"]  # one of a megabyte between
    seen, principal = asyncio.run(serve_over_tls(context, client, bodies))
    assert [bytes(frame) for frame in seen] == bodies
    assert str(principal).startswith("User:") and "CN=app" in str(principal) \
        and "O=Team" in str(principal)


def test_a_client_without_a_certificate_is_anonymous_where_none_is_asked(
        files: dict[str, str]) -> None:
    context = server_ssl_context(config(files))
    client = ssl.create_default_context(cafile=files["truststore"])
    _seen, principal = asyncio.run(serve_over_tls(context, client, [b"x"]))
    assert principal == ANONYMOUS


def test_a_client_without_a_certificate_is_refused_where_one_is_required(
        files: dict[str, str]) -> None:
    async def scenario() -> list[KafkaConnection]:
        served: list[KafkaConnection] = []

        async def serve(connection: KafkaConnection) -> None:
            served.append(connection)

        server = await asyncio.get_running_loop().create_server(
            lambda: KafkaConnection(serve), "127.0.0.1", 0, ssl_handshake_timeout=5,
            ssl=server_ssl_context(config(files, **{"ssl.client.auth": "required"})))
        port = server.sockets[0].getsockname()[1]
        client = ssl.create_default_context(cafile=files["truststore"])
        try:
            # Under TLSv1.3 the client's side of the handshake ends before the server has
            # checked its certificate: the refusal comes as an alert on the first read.
            reader, writer = await asyncio.open_connection(
                "127.0.0.1", port, ssl=client, server_hostname="127.0.0.1")
            writer.write(struct.pack(">i", 1) + b"x")
            try:
                answer = await asyncio.wait_for(reader.read(1), 5)
            except (ssl.SSLError, ConnectionError):
                answer = b""  # the alert, or the connection reset after it
            assert answer == b"", "the connection is closed"
            writer.close()
        finally:
            server.close()
        return served

    assert asyncio.run(scenario()) == [], "nothing is served without the certificate"


def test_a_client_that_never_finishes_its_handshake_is_dropped(files: dict[str, str]) -> None:
    async def scenario() -> bytes:
        served: list[KafkaConnection] = []

        async def serve(connection: KafkaConnection) -> None:
            served.append(connection)

        server = await asyncio.get_running_loop().create_server(
            lambda: KafkaConnection(serve), "127.0.0.1", 0,
            ssl=server_ssl_context(config(files)), ssl_handshake_timeout=0.3)
        port = server.sockets[0].getsockname()[1]
        silent = socket.create_connection(("127.0.0.1", port))
        silent.setblocking(False)
        try:
            loop = asyncio.get_running_loop()
            answer = await asyncio.wait_for(loop.sock_recv(silent, 1), 5)
        finally:
            silent.close()
            server.close()
        assert not served, "nothing is served before the handshake"
        return answer

    assert asyncio.run(scenario()) == b"", "the server closed the connection"
