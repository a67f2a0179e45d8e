"""Fixtures of the coordination tests: stores on the session's real ZooKeeper (and the topic
admin and group store on one), and a TCP proxy to cut connections. Every test runs in its own
chroot (`zk_address`), so the cluster name can be the same everywhere."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from rafka.coordination.admin import TopicAdmin
from rafka.coordination.embedded import EmbeddedZooKeeper, ZooKeeperAddress
from rafka.coordination.groups import GroupStore
from rafka.coordination.store import ClusterStore
from tests.support.zookeeper import TcpProxy

CLUSTER = "test"
# Short enough that a test waiting on a real timeout stays quick, long enough for a 2-core box.
SESSION_TIMEOUT_MS = 4000


@pytest.fixture
def make_store(zk_address: ZooKeeperAddress) -> Iterator[Callable[..., ClusterStore]]:
    """Start stores (each its own ZooKeeper session) in this test's chroot; closed afterwards."""
    stores: list[ClusterStore] = []

    def make(address: ZooKeeperAddress | None = None, **options: Any) -> ClusterStore:
        options.setdefault("session_timeout_ms", SESSION_TIMEOUT_MS)
        cluster = options.pop("cluster", CLUSTER)
        store = ClusterStore(address or zk_address, cluster, **options)
        stores.append(store)
        return store.start()

    yield make
    for store in reversed(stores):
        store.close()


@pytest.fixture
def store(make_store: Callable[..., ClusterStore]) -> ClusterStore:
    """A started store with the cluster layout created."""
    started = make_store()
    started.ensure_layout()
    return started


@pytest.fixture
def proxy(zookeeper: EmbeddedZooKeeper) -> Iterator[TcpProxy]:
    """A TCP proxy to the server, to cut a client's connection without expiring its session."""
    with TcpProxy.to(zookeeper.address) as tcp_proxy:
        yield tcp_proxy


@pytest.fixture
def proxied_address(proxy: TcpProxy, zk_address: ZooKeeperAddress) -> ZooKeeperAddress:
    """This test's chroot, reached through the proxy."""
    return proxy.address(zk_address.chroot)


@pytest.fixture
def admin(store: ClusterStore) -> TopicAdmin:
    """Topic administration on `store`."""
    return TopicAdmin(store)


@pytest.fixture
def groups(store: ClusterStore) -> GroupStore:
    """The consumer groups' znodes on `store`."""
    return GroupStore(store)
