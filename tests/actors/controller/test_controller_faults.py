"""Faults that a controller survives (`actors/controller/recovery.py`), with real ZooKeeper and
Ray, checked as a user would: who `/controller` names, its epoch, and whether topics get leaders.

- A controller that resigns (`ControllerElection.resign`) stops believing at once, deletes
  `/controller` fenced by its epoch, and lets the other candidates win; alone, it wins again
  after its hold-off.
- The controller's broker loses its ZooKeeper connection (a severed TCP proxy) while the
  controller initializes, several times, each shorter than the session timeout: the broker
  takes the role back at the same epoch each time, with a fresh controller, and it works.
- The controller cannot carry out an event (ZooKeeper refuses it the deletion of an ISR change
  notification: an `ip` ACL that only its broker falls under): it resigns, another broker becomes
  controller, handles the notification that the first could not, and gives a new topic leaders.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator

import pytest
import ray
from kazoo.security import make_acl

from rafka import Cluster
from rafka.coordination import layout
from rafka.coordination.election import ControllerElection, read_controller, read_controller_epoch
from rafka.coordination.embedded import ZooKeeperAddress
from rafka.coordination.partition_state import PartitionStateStore
from rafka.coordination.store import ClusterStore
from tests.support.waiting import eventually, wait_until
from tests.support.zookeeper import TcpProxy

SESSION_TIMEOUT_MS = 4000  # the test brokers' (tests/support/cluster.py)


def _epoch(cluster: Cluster) -> int:
    found = read_controller_epoch(cluster.store)
    assert found is not None
    return found.value


def _all_led(cluster: Cluster, topic: str, brokers: set[int]) -> bool:
    return all(p["leader"] in brokers for p in cluster.describe_topic(topic)["partitions"])


def _believes(cluster: Cluster, broker: int) -> bool:
    handle = ray.get_actor(f"broker-{broker}", namespace=cluster.namespace)
    return bool(ray.get(handle.describe.remote(), timeout=30)["controller"])


# --- the election's resignation --------------------------------------------------------------


@pytest.fixture
def make_store(zk_address: ZooKeeperAddress) -> Iterator[Callable[[], ClusterStore]]:
    stores: list[ClusterStore] = []

    def make() -> ClusterStore:
        store = ClusterStore(zk_address, "resign", session_timeout_ms=SESSION_TIMEOUT_MS).start()
        store.ensure_layout()
        stores.append(store)
        return store

    yield make
    for store in reversed(stores):
        store.close()


def test_a_resigning_candidate_gives_way_and_competes_again_after_its_hold_off(
    make_store: Callable[[], ClusterStore],
) -> None:
    first = ControllerElection(make_store(), 1).start()
    assert eventually(lambda: first.is_controller)
    second = ControllerElection(make_store(), 2).start()
    fence = first.fence
    assert fence is not None and fence.epoch == 1

    first.resign(fence, hold_off_s=2.0)
    assert not first.is_controller  # at once, before /controller goes
    assert eventually(lambda: second.is_controller)
    assert second.epoch == 2
    observer = make_store()
    controller = read_controller(observer)
    assert controller is not None and controller.value.brokerid == 2
    # A late word from the first term changes nothing: that term is over.
    first.resign(fence)
    time.sleep(2.5)  # past the hold-off too: the first watches, it does not take over
    assert second.is_controller and not first.is_controller
    controller = read_controller(observer)
    assert controller is not None and controller.value.brokerid == 2

    second.stop()
    assert eventually(lambda: first.is_controller)
    assert first.epoch == 3
    first.stop()


def test_a_candidate_alone_takes_the_role_back_after_its_hold_off(
    make_store: Callable[[], ClusterStore],
) -> None:
    store = make_store()
    alone = ControllerElection(store, 1).start()
    assert eventually(lambda: alone.is_controller)
    fence = alone.fence
    assert fence is not None
    resigned_at = time.monotonic()
    alone.resign(fence, hold_off_s=1.5)
    assert eventually(lambda: read_controller(store) is None, 5)
    assert eventually(lambda: alone.is_controller, 10)
    assert time.monotonic() - resigned_at >= 1.5
    assert alone.epoch == fence.epoch + 1  # a new term, a new epoch
    alone.stop()


# --- a connection loss while the controller initializes --------------------------------------


def test_a_controller_cut_off_while_initializing_takes_the_role_back_and_works(
    start_cluster: Callable[..., Cluster], zk_address: ZooKeeperAddress,
) -> None:
    with TcpProxy.to(zk_address) as proxy:
        # Broker 0 reaches ZooKeeper through the proxy, and is controller: it starts first.
        cluster = start_cluster(1, broker_overrides={
            0: {"zookeeper.connect": str(proxy.address(zk_address.chroot))}})
        assert cluster.controller() == 0
        cluster.start_broker(1)
        cluster.start_broker(2)
        # Enough partitions that initializing (every topic read, LeaderAndIsr to every
        # broker) lasts long enough for the cuts below to land in it.
        topics = [f"t{i}" for i in range(12)]
        for topic in topics:
            cluster.create_topic(topic, partitions=4, replication_factor=3)
        epoch = _epoch(cluster)

        # Each reconnect within the session gives broker 0 the role back, with a controller
        # that initializes afresh; the next cut lands at another point of that initialization.
        cuts = [None, 0.0, 0.02, 0.1, 0.3]
        for delay_s in cuts:
            if delay_s is not None:
                wait_until(lambda: _believes(cluster, 0), 15, "broker 0 controller again",
                           interval_s=0.01)
                time.sleep(delay_s)
            proxy.cut()
            wait_until(lambda: not _believes(cluster, 0), 5, "broker 0 to notice the cut",
                       interval_s=0.01)
            time.sleep(0.5)
            proxy.restore()
        wait_until(lambda: _believes(cluster, 0), 15, "broker 0 controller again")

        # Its session lived through: the same broker is controller, at the same epoch; no
        # other broker was elected and it did not resign.
        assert cluster.controller() == 0
        assert _epoch(cluster) == epoch
        # And it works: every partition has a leader, a new topic gets leaders, and a broker
        # that dies has its partitions led elsewhere.
        assert all(_all_led(cluster, topic, {0, 1, 2}) for topic in topics)
        cluster.create_topic("after-the-cuts", partitions=6, replication_factor=2)
        assert _all_led(cluster, "after-the-cuts", {0, 1, 2})
        cluster.kill_broker(2)
        wait_until(lambda: all(_all_led(cluster, topic, {0, 1})
                               for topic in [*topics, "after-the-cuts"]),
                   60, "the partitions broker 2 led led elsewhere")
        assert cluster.controller() == 0 and _epoch(cluster) == epoch


# --- an event the controller cannot carry out -----------------------------------------------


def test_a_controller_that_cannot_handle_an_event_resigns_and_another_takes_over(
    start_cluster: Callable[..., Cluster], zk_address: ZooKeeperAddress,
) -> None:
    host, port = zk_address.hosts[0]
    assert host == "127.0.0.1", "the ACL below tells the brokers apart by loopback address"
    proxy = TcpProxy(host, port, source_host="127.0.0.2")
    try:
        # Broker 0 reaches ZooKeeper from 127.0.0.2, through the proxy, and is controller.
        cluster = start_cluster(1, broker_overrides={
            0: {"zookeeper.connect": str(proxy.address(zk_address.chroot))}})
        assert cluster.controller() == 0
        cluster.start_broker(1)
        cluster.start_broker(2)
        cluster.create_topic("before", partitions=3, replication_factor=3)
        epoch = _epoch(cluster)

        # From 127.0.0.2, ISR change notifications can be read and written (broker 0 leads
        # partitions too) but not deleted, which the controller does once it has read them.
        cluster.store.client.set_acls(layout.ISR_CHANGE_NOTIFICATION, [
            make_acl("ip", "127.0.0.1", all=True),
            make_acl("ip", "127.0.0.2", read=True, create=True),
        ])
        # A leader's broker says an ISR changed: the controller reads the notification and
        # fails to delete it (ZooKeeper's NoAuth), whatever it tries.
        PartitionStateStore(cluster.store).write_isr_change_notification([("before", 0)])

        new = wait_until(lambda: (found := cluster.controller()) not in (None, 0) and found, 30,
                         "another broker to become controller")
        assert new in (1, 2)
        assert _epoch(cluster) > epoch
        # Broker 0 resigned: its session lives on (it is still registered), it is no controller.
        assert 0 in {broker["id"] for broker in cluster.brokers()}
        assert not _believes(cluster, 0)
        # The new controller did what the first could not: the notification is handled.
        wait_until(lambda: not cluster.store.children_or_empty(layout.ISR_CHANGE_NOTIFICATION),
                   30, "the ISR change notification handled")
        # It works: a new topic gets leaders, on every broker.
        cluster.create_topic("after", partitions=6, replication_factor=2)
        assert _all_led(cluster, "after", {0, 1, 2})
        # Past broker 0's hold-off (a session timeout) the role stays where it went.
        time.sleep(SESSION_TIMEOUT_MS / 1000 + 1)
        assert cluster.controller() == new and not _believes(cluster, 0)
        assert _all_led(cluster, "before", {0, 1, 2})
    finally:
        proxy.close()
