"""The data ports' TLS without a cluster: `security.inter.broker.protocol` and the files it
needs, the contexts both ends build from the cluster's PEM files (mutual TLS, the cluster's CA,
no host names), files that cannot be loaded named by their setting, and `TlsSession`, the
blocking client's socketless TLS, against a server context over memory buffers."""

from __future__ import annotations

import re
import ssl
from pathlib import Path

import pytest

from rafka.actors.config import BrokerConfig
from rafka.actors.dataport.tls import (
    DataPortTls,
    TlsSession,
    client_context,
    data_port_tls,
    server_context,
)
from rafka.common.config import InvalidConfigError
from tests.support.certificates import cluster_files


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> tuple[DataPortTls, DataPortTls]:
    return cluster_files(tmp_path_factory.mktemp("cluster-tls"))


@pytest.fixture(scope="module")
def node_files(files: tuple[DataPortTls, DataPortTls]) -> DataPortTls:
    return files[0]


def test_plaintext_by_default_and_ssl_needs_both_files(node_files: DataPortTls) -> None:
    config = BrokerConfig.from_dict({})
    assert config.security_inter_broker_protocol == "PLAINTEXT"
    assert data_port_tls("PLAINTEXT", node_files.certificate_chain,
                         node_files.ca_bundle, None) is None
    for missing in ("ssl.keystore.location", "ssl.truststore.location"):
        settings = {"security.inter.broker.protocol": "SSL",
                    "ssl.keystore.location": node_files.certificate_chain,
                    "ssl.truststore.location": node_files.ca_bundle}
        del settings[missing]
        with pytest.raises(InvalidConfigError, match=re.escape(missing)):
            BrokerConfig.from_dict(settings)
    with pytest.raises(InvalidConfigError):
        BrokerConfig.from_dict({"security.inter.broker.protocol": "SASL_SSL"})
    config = BrokerConfig.from_dict({"security.inter.broker.protocol": "SSL",
                                     "ssl.keystore.location": node_files.certificate_chain,
                                     "ssl.truststore.location": node_files.ca_bundle,
                                     "ssl.key.password": "secret"})
    tls = data_port_tls(config.security_inter_broker_protocol, config.ssl_keystore_location,
                        config.ssl_truststore_location, config.ssl_key_password)
    assert tls == DataPortTls(node_files.certificate_chain, node_files.ca_bundle, "secret")
    assert "secret" not in repr(tls)


def test_both_ends_require_a_certificate_of_the_clusters_ca(node_files: DataPortTls) -> None:
    for context in (server_context(node_files), client_context(node_files)):
        assert context.verify_mode == ssl.CERT_REQUIRED
        assert not context.check_hostname
        assert context.minimum_version == ssl.TLSVersion.TLSv1_2
        assert [ca["subject"] for ca in context.get_ca_certs()]
    # One context per process: every connection shares it.
    assert client_context(node_files) is client_context(node_files)


def test_files_that_cannot_be_loaded_name_their_setting(
        node_files: DataPortTls, tmp_path: Path) -> None:
    not_pem = tmp_path / "not.pem"
    not_pem.write_text("hello")
    with pytest.raises(InvalidConfigError, match=re.escape("ssl.keystore.location")):
        client_context(DataPortTls(str(not_pem), node_files.ca_bundle))
    with pytest.raises(InvalidConfigError, match=re.escape("ssl.truststore.location")):
        server_context(DataPortTls(node_files.certificate_chain, str(tmp_path / "none.pem")))


def shuttle(client: TlsSession, server: ssl.SSLObject, incoming: ssl.MemoryBIO,
            outgoing: ssl.MemoryBIO) -> bytes:
    """Carry bytes both ways until neither side has more: the plaintext the client got."""
    received = b""
    for _ in range(10):
        incoming.write(client.outgoing())
        try:
            server.do_handshake()
            while True:
                data = server.read(65536)
                if not data:
                    break
                server.write(data.upper())
        except ssl.SSLWantReadError:
            pass
        sent = outgoing.read()
        if not sent and not client.has_outgoing():
            break
        received += client.receive(sent)
    return received


def serving(tls: DataPortTls) -> tuple[ssl.SSLObject, ssl.MemoryBIO, ssl.MemoryBIO]:
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    return (server_context(tls).wrap_bio(incoming, outgoing, server_side=True),
            incoming, outgoing)


def test_a_session_holds_the_plaintext_until_the_handshake_ends(
        node_files: DataPortTls) -> None:
    client = TlsSession(client_context(node_files))
    client.send(b"hello, ")
    assert client.has_outgoing() and not client.established  # the ClientHello only
    client.send(b"port")
    assert shuttle(client, *serving(node_files)) == b"HELLO, PORT"
    assert client.established


def test_a_session_without_the_clusters_certificate_is_refused(
        files: tuple[DataPortTls, DataPortTls]) -> None:
    node, stranger = files
    client = TlsSession(client_context(stranger))
    client.send(b"hello")
    with pytest.raises(ssl.SSLError):
        shuttle(client, *serving(node))
