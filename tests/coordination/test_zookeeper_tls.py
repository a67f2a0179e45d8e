"""ZooKeeper's client port over TLS: the environment that asks for it (Kafka's
`zookeeper.ssl.*`, as RAFKA_ZOOKEEPER_SSL_*) and what kazoo is given; and, against an embedded
ZooKeeper with a `secureClientPort`, a store connecting with the cluster's certificate while a
client with none, or in the clear, is refused."""

from __future__ import annotations

from pathlib import Path

import pytest
import trustme
from kazoo.client import KazooClient
from kazoo.handlers.threading import KazooTimeoutError

from rafka.coordination.embedded import EmbeddedZooKeeper
from rafka.coordination.errors import ZooKeeperTlsConfigError
from rafka.coordination.store import ClusterStore
from rafka.coordination.zookeeper_tls import (
    CLIENT_ENABLE_ENV,
    KEYSTORE_ENV,
    TRUSTSTORE_ENV,
    ZooKeeperTls,
    client_tls,
)


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> ZooKeeperTls:
    folder = tmp_path_factory.mktemp("zookeeper-tls")
    ca = trustme.CA()
    (folder / "ca.pem").write_bytes(ca.cert_pem.bytes())
    (folder / "node.pem").write_bytes(
        ca.issue_cert("rafka-node").private_key_and_cert_chain_pem.bytes())
    return ZooKeeperTls(str(folder / "node.pem"), str(folder / "ca.pem"))


def environment(files: ZooKeeperTls) -> dict[str, str]:
    return {CLIENT_ENABLE_ENV: "true", KEYSTORE_ENV: files.keystore,
            TRUSTSTORE_ENV: files.truststore}


def test_the_environment_asks_for_tls_with_both_files(files: ZooKeeperTls) -> None:
    assert client_tls({}) is None
    assert client_tls({CLIENT_ENABLE_ENV: "false", KEYSTORE_ENV: files.keystore}) is None
    assert client_tls(environment(files)) == files
    for missing in (KEYSTORE_ENV, TRUSTSTORE_ENV):
        incomplete = environment(files)
        del incomplete[missing]
        with pytest.raises(ZooKeeperTlsConfigError, match=missing):
            client_tls(incomplete)
    with pytest.raises(ZooKeeperTlsConfigError, match=CLIENT_ENABLE_ENV):
        client_tls({CLIENT_ENABLE_ENV: "yes"})
    options = files.kazoo_options()
    assert options["use_ssl"] and options["verify_certs"]
    assert (options["ca"], options["certfile"], options["keyfile"]) == (
        files.truststore, files.keystore, files.keystore)
    settings = files.server_settings(2182, "10.0.0.10")
    assert settings["secureClientPort"] == 2182 and settings["ssl.clientAuth"] == "need"
    assert settings["ssl.keyStore.type"] == settings["ssl.trustStore.type"] == "PEM"


def refused(client: KazooClient) -> bool:
    try:
        client.start(timeout=5)
    except KazooTimeoutError:
        return True
    finally:
        client.stop()
        client.close()
    return False


@pytest.mark.cluster
def test_a_store_connects_over_tls_and_a_client_without_the_certificate_cannot(
        files: ZooKeeperTls, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with EmbeddedZooKeeper(tmp_path / "zookeeper", tls=files, force_sync=False) as server:
        for name, value in environment(files).items():
            monkeypatch.setenv(name, value)
        with ClusterStore(server.secure_address.child("tls"), "secured") as store:
            store.ensure_layout()
            assert store.exists("/brokers")
        secure = str(server.secure_address)
        assert refused(KazooClient(hosts=secure, use_ssl=True, ca=files.truststore))
        assert refused(KazooClient(hosts=secure))
