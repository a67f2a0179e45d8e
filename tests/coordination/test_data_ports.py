"""The replica hosts' data port addresses in ZooKeeper (rafka.coordination.data_ports): what a
broker publishes is what a client reads, a newer address replaces an older one, and in a
cluster with credentials nobody without them reads the token."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from rafka.common.tls import PemFiles
from rafka.coordination.data_ports import DataPortAddress, publish_data_port, read_data_port
from rafka.coordination.errors import ZooKeeperAuthError
from rafka.coordination.store import ClusterStore

CREDENTIALS = "rafka:s3cret"


def test_a_published_address_is_read_back_and_a_new_one_replaces_it(
        make_store: Callable[..., ClusterStore]) -> None:
    store = make_store()
    store.ensure_layout()
    assert read_data_port(store, "replica-host-1-0") is None
    first = DataPortAddress("10.0.0.1", 4100, b"\x01" * 16)
    publish_data_port(store, "replica-host-1-0", first)
    assert read_data_port(make_store(), "replica-host-1-0") == first
    moved = DataPortAddress("10.0.0.1", 4200, b"\x02" * 16,
                            PemFiles("/etc/rafka/cert.pem", "/etc/rafka/ca.pem", "pw"))
    publish_data_port(store, "replica-host-1-0", moved)
    assert read_data_port(store, "replica-host-1-0") == moved
    assert read_data_port(store, "replica-host-1-1") is None


def test_only_the_clusters_credentials_read_a_hosts_token(
        make_store: Callable[..., ClusterStore]) -> None:
    broker = make_store(credentials=CREDENTIALS)
    broker.ensure_layout()
    address = DataPortAddress("10.0.0.2", 4300, b"\x03" * 16)
    publish_data_port(broker, "replica-host-2-0", address)
    assert read_data_port(make_store(credentials=CREDENTIALS), "replica-host-2-0") == address
    with pytest.raises(ZooKeeperAuthError):
        read_data_port(make_store(), "replica-host-2-0")
    with pytest.raises(ZooKeeperAuthError):
        read_data_port(make_store(credentials="rafka:guess"), "replica-host-2-0")


def test_a_znode_that_is_not_an_address_is_refused_by_name() -> None:
    with pytest.raises(ValueError, match="not a data port address"):
        DataPortAddress.from_json({"host": "h", "port": "many"})
