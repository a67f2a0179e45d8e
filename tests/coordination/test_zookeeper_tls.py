"""ZooKeeper's client port over TLS: the environment that asks for it (Kafka's
`zookeeper.ssl.*`, as RAFKA_ZOOKEEPER_SSL_*) and what kazoo is given; and, against an embedded
ZooKeeper with a `secureClientPort`, a store connecting with the cluster's certificate while a
client with none, or in the clear, is refused."""

from __future__ import annotations

from pathlib import Path

import pytest
from kazoo.client import KazooClient
from kazoo.handlers.threading import KazooTimeoutError

from rafka.coordination.embedded import EmbeddedZooKeeper, ZooKeeperAddress
from rafka.coordination.ensemble import Ensemble, EnsembleMember
from rafka.coordination.errors import ZooKeeperTlsConfigError
from rafka.coordination.store import ClusterStore
from rafka.coordination.zookeeper_tls import (
    CLIENT_ENABLE_ENV,
    KEYSTORE_ENV,
    NETTY_FACTORY,
    TRUSTSTORE_ENV,
    ZooKeeperTls,
    client_tls,
)
from tests.support.certificates import cluster_files


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> ZooKeeperTls:
    cluster, _stranger = cluster_files(tmp_path_factory.mktemp("zookeeper-tls"))
    return ZooKeeperTls(cluster.certificate_chain, cluster.ca_bundle)


def environment(files: ZooKeeperTls) -> dict[str, str]:
    return {CLIENT_ENABLE_ENV: "true", KEYSTORE_ENV: files.certificate_chain,
            TRUSTSTORE_ENV: files.ca_bundle}


def test_the_environment_asks_for_tls_with_both_files(files: ZooKeeperTls) -> None:
    assert client_tls({}) is None
    assert client_tls({CLIENT_ENABLE_ENV: "false", KEYSTORE_ENV: files.certificate_chain}) is None
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
        files.ca_bundle, files.certificate_chain, files.certificate_chain)
    settings = files.server_settings(2182, "10.0.0.10")
    assert settings["secureClientPort"] == 2182 and settings["ssl.clientAuth"] == "need"
    assert settings["ssl.keyStore.type"] == settings["ssl.trustStore.type"] == "PEM"


def test_a_key_zookeeper_cannot_read_stops_the_server_at_start(
        files: ZooKeeperTls, tmp_path: Path) -> None:
    traditional = tmp_path / "traditional.pem"
    traditional.write_text(Path(files.certificate_chain).read_text()
                           .replace("BEGIN PRIVATE KEY", "BEGIN EC PRIVATE KEY")
                           .replace("END PRIVATE KEY", "END EC PRIVATE KEY"))
    with pytest.raises(ZooKeeperTlsConfigError, match="PKCS#8"):
        ZooKeeperTls(str(traditional), files.ca_bundle).server_settings(2182, "127.0.0.1")


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
        assert refused(KazooClient(hosts=secure, use_ssl=True, ca=files.ca_bundle))
        assert refused(KazooClient(hosts=secure))


def test_a_member_serves_tls_at_its_address_and_plaintext_where_told(
        files: ZooKeeperTls, tmp_path: Path) -> None:
    servers = "10.0.0.10:2888:3888,10.0.0.11:2888:3888,10.0.0.12:2888:3888"
    member = EnsembleMember(tmp_path, servers, 1, host="127.0.0.1", tls=files,
                            secure_port=2182)
    config = member._write_config(2181).read_text().splitlines()
    assert {"clientPortAddress=127.0.0.1", "secureClientPort=2182",
            "secureClientPortAddress=10.0.0.10", "ssl.keyStore.type=PEM",
            f"ssl.keyStore.location={files.certificate_chain}",
            f"ssl.trustStore.location={files.ca_bundle}", "ssl.clientAuth=need",
            f"serverCnxnFactory={NETTY_FACTORY}"} <= set(config)
    assert str(member.secure_address) == "10.0.0.10:2182"
    plain = EmbeddedZooKeeper(tmp_path / "plain")
    assert not any("secure" in line or "ssl" in line
                   for line in plain._write_config(2181).read_text().splitlines())


@pytest.mark.cluster
def test_an_ensemble_with_secure_ports_starts_member_by_member_and_serves_tls(
        files: ZooKeeperTls, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """As cluster.yaml's nodes start their members, one after another: the first starts alone,
    with no quorum (Netty, which serves the secure port, answers no four-letter word before
    one), and the ensemble then serves TLS on every member's secure port."""
    ensemble = Ensemble.on_free_ports(3)
    members = [EnsembleMember(tmp_path / f"member-{server.id}", ensemble, server.id, tls=files,
                              force_sync=False) for server in ensemble.servers]
    try:
        members[0].start(wait_for_quorum=False)
        assert members[0].running()
        for member in members[1:]:
            member.start(wait_for_quorum=False)
        assert sorted(member.wait_for_quorum(60) for member in members) == [
            "follower", "follower", "leader"]
        for name, value in environment(files).items():
            monkeypatch.setenv(name, value)
        secure = ",".join(str(member.secure_address) for member in members)
        with ClusterStore(ZooKeeperAddress.parse(secure).child("tls"), "secured") as store:
            store.ensure_layout()
            assert store.exists("/brokers")
        assert refused(KazooClient(hosts=secure))
    finally:
        for member in members:
            member.stop()
