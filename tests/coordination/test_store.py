"""`ClusterStore` on the real server: chroot, layout, versioned JSON, typed errors, sessions."""

from __future__ import annotations

import json
import time
from collections.abc import Callable

import pytest
from kazoo.client import KazooClient

from rafka.coordination import layout
from rafka.coordination.embedded import ZooKeeperAddress, free_port
from rafka.coordination.errors import (
    InvalidClusterNameError,
    StaleVersionError,
    ZNodeExistsError,
    ZNodeMissingError,
    ZNodeNotEmptyError,
    ZooKeeperUnavailableError,
)
from rafka.coordination.models import Versioned
from rafka.coordination.store import ClusterStore, SessionEvent, encode
from tests.support.waiting import eventually
from tests.support.zookeeper import TcpProxy, expire_session


def test_start_creates_the_cluster_chroot_under_rafka(
    make_store: Callable[..., ClusterStore], zk_client: KazooClient
) -> None:
    store = make_store(cluster="prod")
    assert store.address.chroot.endswith("/rafka/prod")
    assert zk_client.exists("/rafka/prod")
    store.create("/hello", {"a": 1})
    assert zk_client.get("/rafka/prod/hello")[0] == b'{"a":1}'


def test_clusters_side_by_side_do_not_see_each_other(
    make_store: Callable[..., ClusterStore],
) -> None:
    one, two = make_store(cluster="one"), make_store(cluster="two")
    one.ensure_layout()
    two.ensure_layout()
    one.create("/brokers/topics/orders", {"version": 1, "partitions": {}})
    assert two.children("/brokers/topics") == []


def test_ensure_layout_creates_the_design_layout_idempotently(store: ClusterStore) -> None:
    for path in layout.PERSISTENT_PATHS:
        assert store.exists(path), path
    assert store.read(layout.CONTROLLER_EPOCH) == Versioned(0, 0)
    store.ensure_layout()
    assert store.read(layout.CONTROLLER_EPOCH) == Versioned(0, 0)


def test_reads_return_value_and_version_and_stale_writes_are_refused(store: ClusterStore) -> None:
    store.create("/config/topics/t", {"version": 1, "config": {}})
    first = store.read("/config/topics/t")
    assert first == Versioned({"version": 1, "config": {}}, 0)
    assert store.write("/config/topics/t", {"version": 1, "config": {"a": "1"}}, 0) == 1
    with pytest.raises(StaleVersionError, match="BadVersion") as raised:
        store.write("/config/topics/t", {"version": 1, "config": {"a": "2"}}, first.version)
    assert raised.value.path == "/config/topics/t"
    assert raised.value.expected_version == 0
    assert store.read("/config/topics/t").value["config"] == {"a": "1"}


def test_values_are_compact_json_and_bytes_are_kept_as_they_are(store: ClusterStore) -> None:
    store.create("/j", {"isr": [1, 2]})
    store.create("/b", b"member-1")
    assert store.get("/j")[0] == b'{"isr":[1,2]}'
    assert json.loads(store.get("/j")[0]) == {"isr": [1, 2]}
    assert store.get("/b")[0] == b"member-1"


def test_missing_and_existing_znodes_raise_typed_errors(store: ClusterStore) -> None:
    with pytest.raises(ZNodeMissingError, match="does not exist"):
        store.read("/nope")
    with pytest.raises(ZNodeMissingError):
        store.write("/nope", 1, 0)
    assert store.read_optional("/nope") is None
    store.create("/x", 1)
    with pytest.raises(ZNodeExistsError):
        store.create("/x", 2)
    with pytest.raises(ZNodeMissingError):
        store.create("/a/b/c", 1, makepath=False)
    assert store.create("/a/b/c", 1) == "/a/b/c"
    with pytest.raises(ZNodeNotEmptyError, match="recursive=True"):
        store.delete("/a")
    assert store.delete("/a", recursive=True)
    assert not store.delete("/a")


def test_commit_names_the_operation_that_failed(store: ClusterStore) -> None:
    store.create("/v", 1)
    transaction = store.transaction()
    transaction.create("/fresh", encode(1))
    transaction.check("/v", 5)
    with pytest.raises(StaleVersionError) as raised:
        store.commit(transaction)
    assert raised.value.path == "/v"
    assert not store.exists("/fresh"), "a failed multi-op changes nothing"


def test_sequential_creates_get_increasing_names(store: ClusterStore) -> None:
    first = store.create("/isr_change_notification/isr_change_", {}, sequential=True)
    second = store.create("/isr_change_notification/isr_change_", {}, sequential=True)
    assert first < second
    assert first.startswith("/isr_change_notification/isr_change_")


def test_an_unreachable_zookeeper_fails_fast_with_advice(zk_address: ZooKeeperAddress) -> None:
    nowhere = ZooKeeperAddress((("127.0.0.1", free_port()),))
    started = time.monotonic()
    with pytest.raises(ZooKeeperUnavailableError) as raised:
        ClusterStore(nowhere, "test", connect_timeout_s=1).start()
    assert time.monotonic() - started < 5
    message = str(raised.value)
    assert nowhere.servers in message
    assert "check the address" in message and "ZooKeeper is running" in message


def test_a_closed_store_says_so(make_store: Callable[..., ClusterStore]) -> None:
    store = make_store()
    store.close()
    with pytest.raises(ZooKeeperUnavailableError, match="not started"):
        store.read("/")


def test_bad_cluster_names_are_refused(zk_address: ZooKeeperAddress) -> None:
    with pytest.raises(InvalidClusterNameError):
        ClusterStore(zk_address, "../other")


@pytest.mark.parametrize("timeout_ms", [2000, 7000])
def test_session_timeout_is_configurable(
    make_store: Callable[..., ClusterStore], timeout_ms: int
) -> None:
    store = make_store(session_timeout_ms=timeout_ms)
    assert store.session_timeout_ms == timeout_ms  # what the server granted


def registered_broker(store: ClusterStore) -> list[SessionEvent]:
    """Broker 7's ephemeral znode, created in `store`'s session; the list its session events
    are appended to from now on."""
    events: list[SessionEvent] = []
    store.add_session_listener(events.append)
    store.ensure_layout()
    store.create("/brokers/ids/7", {"node_id": 7}, ephemeral=True)
    return events


def test_expiry_is_told_apart_from_connection_loss(
    make_store: Callable[..., ClusterStore],
) -> None:
    store = make_store()
    events = registered_broker(store)
    old_session = store.session_id
    expire_session(store)
    assert eventually(lambda: SessionEvent.CONNECTED in events)
    assert events == [SessionEvent.SUSPENDED, SessionEvent.EXPIRED, SessionEvent.CONNECTED]
    assert store.session_id not in (None, old_session)
    assert not store.exists("/brokers/ids/7"), "ephemerals die with their session"


def test_connection_loss_keeps_the_session_and_its_ephemerals(
    make_store: Callable[..., ClusterStore],
    proxy: TcpProxy,
    proxied_address: ZooKeeperAddress,
) -> None:
    store = make_store(proxied_address)
    observer = make_store()
    events = registered_broker(store)
    session = store.session_id
    proxy.cut()
    assert eventually(lambda: events == [SessionEvent.SUSPENDED])
    assert not store.connected
    assert store.session_id == session, "the session may still live while suspended"
    time.sleep(0.5)
    proxy.restore()
    assert eventually(lambda: store.connected)
    assert events == [SessionEvent.SUSPENDED, SessionEvent.RECONNECTED]
    assert store.session_id == session
    stat = observer.stat("/brokers/ids/7")
    assert stat is not None and stat.ephemeralOwner == session
