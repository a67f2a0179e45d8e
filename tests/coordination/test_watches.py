"""Watches as callbacks: every kind the actor layer needs, across reconnects and expiry."""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable
from typing import Any

import pytest

from rafka.common.topic_partition import TopicPartition
from rafka.coordination.admin import TopicAdmin
from rafka.coordination.broker_config import alter_broker_config, read_broker_config
from rafka.coordination.election import ControllerElection
from rafka.coordination.embedded import ZooKeeperAddress
from rafka.coordination.groups import GroupStore
from rafka.coordination.models import BrokerInfo, PartitionState, Versioned
from rafka.coordination.partition_state import PartitionStateStore
from rafka.coordination.registration import BrokerRegistration
from rafka.coordination.store import ClusterStore
from rafka.coordination.watches import ClusterWatches
from tests.support.waiting import eventually
from tests.support.zookeeper import TcpProxy, expire_session


class Seen:
    """A callback that keeps every value it was called with, and the thread it ran on."""

    def __init__(self) -> None:
        self.values: list[Any] = []
        self.threads: set[str] = set()

    def __call__(self, value: Any) -> None:
        self.values.append(value)
        self.threads.add(threading.current_thread().name)

    @property
    def last(self) -> Any:
        return self.values[-1] if self.values else "nothing yet"

    def wait_for(self, predicate: Callable[[Any], bool]) -> bool:
        return eventually(lambda: bool(self.values) and predicate(self.values[-1]))


def broker(broker_id: int) -> BrokerInfo:
    return BrokerInfo(broker_id, f"broker-{broker_id}", "localhost")


def test_brokers_joining_and_leaving(store: ClusterStore, make_store: Callable[..., Any]) -> None:
    seen = Seen()
    ClusterWatches(store).watch_brokers(seen)
    assert seen.wait_for(lambda brokers: brokers == {})
    one = BrokerRegistration(store, broker(1)).register()
    other_store = make_store()
    BrokerRegistration(other_store, broker(2)).register()
    assert seen.wait_for(lambda brokers: set(brokers) == {1, 2})
    assert seen.last[2].actor == "broker-2"
    one.unregister()
    assert seen.wait_for(lambda brokers: set(brokers) == {2})
    # A bounce (re-registration after expiry) keeps the id but changes the broker epoch.
    epoch = seen.last[2].epoch
    expire_session(other_store)
    assert seen.wait_for(lambda brokers: 2 in brokers and brokers[2].epoch != epoch)
    assert all(name.startswith("rafka-zk-events") for name in seen.threads)


def test_a_registration_that_changes_is_delivered_with_its_epoch_unchanged(
    store: ClusterStore,
) -> None:
    """A broker that advertises a new address rewrites its registration: watchers see the new
    endpoints, and the same broker epoch (it did not bounce)."""
    seen = Seen()
    ClusterWatches(store).watch_brokers(seen)
    registration = BrokerRegistration(store, broker(1)).register()
    assert seen.wait_for(lambda brokers: set(brokers) == {1})
    epoch = seen.last[1].epoch
    registration.update_info(dataclasses.replace(registration.info,
                                                 endpoints=("PLAINTEXT://elsewhere:9092",)))
    assert seen.wait_for(lambda brokers: brokers[1].endpoints == ("PLAINTEXT://elsewhere:9092",))
    assert seen.last[1].epoch == epoch


def test_a_brokers_dynamic_settings_are_kept_merged_and_watched(store: ClusterStore) -> None:
    seen = Seen()
    ClusterWatches(store).watch_broker_config(4, seen)
    assert seen.wait_for(lambda value: value is None)
    assert read_broker_config(store, 4) == Versioned({}, -1)
    alter_broker_config(store, 4, {"advertised.listeners": "PLAINTEXT://a:1"})
    assert seen.wait_for(lambda value: value is not None
                         and value.value == {"advertised.listeners": "PLAINTEXT://a:1"})
    alter_broker_config(store, 4, {"other.setting": 5})
    assert read_broker_config(store, 4).value == {"advertised.listeners": "PLAINTEXT://a:1",
                                                  "other.setting": "5"}
    alter_broker_config(store, 4, {"advertised.listeners": None, "other.setting": None})
    assert seen.wait_for(lambda value: value is not None and value.value == {})
    assert read_broker_config(store, 5).value == {}  # another broker's are its own


def test_broker_ids_only(store: ClusterStore) -> None:
    seen = Seen()
    ClusterWatches(store).watch_broker_ids(seen)
    BrokerRegistration(store, broker(3)).register()
    assert seen.wait_for(lambda ids: ids == {3})


def test_topics_created_and_deleted_and_partition_counts(store: ClusterStore) -> None:
    admin = TopicAdmin(store)
    topics, assignment = Seen(), Seen()
    watches = ClusterWatches(store)
    watches.watch_topics(topics)
    watches.watch_topic_assignment("orders", assignment)
    assert topics.wait_for(lambda names: names == set())
    assert assignment.wait_for(lambda value: value is None)
    admin.create_topic("orders", {0: [1], 1: [1]})
    assert topics.wait_for(lambda names: names == {"orders"})
    assert assignment.wait_for(lambda value: value and value.value.partition_count == 2)
    admin.add_partitions("orders", {2: [1]})
    assert assignment.wait_for(lambda value: value and value.value.partition_count == 3)
    assert assignment.last.version == 1
    admin.request_topic_deletion("orders")
    admin.delete_topic_znodes("orders")
    assert topics.wait_for(lambda names: names == set())
    assert assignment.wait_for(lambda value: value is None)


def test_partition_state_changes(store: ClusterStore) -> None:
    TopicAdmin(store).create_topic("orders", {0: [1, 2]})
    states = PartitionStateStore(store)
    seen = Seen()
    ClusterWatches(store).watch_partition_state("orders", 0, seen)
    assert seen.wait_for(lambda value: value is None)
    state = PartitionState(leader=1, leader_epoch=0, isr=(1, 2), controller_epoch=1)
    states.create_partition_states("orders", {0: state})
    assert seen.wait_for(lambda value: value is not None and value.value == state)
    shrunk = PartitionState(leader=1, leader_epoch=0, isr=(1,), controller_epoch=1)
    states.update_partition_state("orders", 0, shrunk, 0)
    assert seen.wait_for(lambda value: value.value.isr == (1,) and value.version == 1)


def test_group_members_including_a_group_that_does_not_exist_yet(store: ClusterStore) -> None:
    groups = GroupStore(store)
    seen = Seen()
    ClusterWatches(store).watch_group_members("billing", seen)
    assert seen.wait_for(lambda members: members == set())
    member = groups.register_member("billing", "host:1", {"orders": 1})
    assert seen.wait_for(lambda members: members == {"host:1"})
    member.unregister()
    assert seen.wait_for(lambda members: members == set())


def test_isr_change_notifications_are_seen_and_consumed(store: ClusterStore) -> None:
    states = PartitionStateStore(store)
    seen = Seen()
    ClusterWatches(store).watch_isr_change_notifications(seen)
    assert seen.wait_for(lambda names: names == [])
    states.write_isr_change_notification([("orders", 0), ("orders", 1)])
    assert seen.wait_for(lambda names: len(names) == 1)
    assert states.consume_isr_change_notifications() == {
        TopicPartition("orders", 0),
        TopicPartition("orders", 1),
    }
    assert seen.wait_for(lambda names: names == [])


def test_deletion_requests_and_config_and_controller(store: ClusterStore) -> None:
    admin = TopicAdmin(store)
    admin.create_topic("orders", {0: [1]}, {"retention.ms": 10})
    deletions, config, controller = Seen(), Seen(), Seen()
    watches = ClusterWatches(store)
    watches.watch_topic_deletions(deletions)
    watches.watch_topic_config("orders", config)
    watches.watch_controller(controller)
    assert config.wait_for(lambda value: value.value == {"retention.ms": "10"})
    admin.alter_config("orders", {"retention.ms": 20})
    assert config.wait_for(lambda value: value.value == {"retention.ms": "20"})
    admin.request_topic_deletion("orders")
    assert deletions.wait_for(lambda names: names == {"orders"})
    assert controller.wait_for(lambda value: value is None)
    ControllerElection(store, 7).start()
    assert controller.wait_for(lambda value: value is not None and value.value.brokerid == 7)


def test_cancel_stops_the_callbacks(store: ClusterStore) -> None:
    seen = Seen()
    watch = ClusterWatches(store).watch_topics(seen)
    assert seen.wait_for(lambda names: names == set())
    watch.cancel()
    assert not watch.active
    TopicAdmin(store).create_topic("orders", {0: [1]})
    assert not eventually(lambda: seen.last == {"orders"}, timeout_s=0.5)


def test_watches_survive_a_connection_loss(
    make_store: Callable[..., ClusterStore],
    proxy: TcpProxy,
    proxied_address: ZooKeeperAddress,
) -> None:
    watching = make_store(proxied_address)
    changing = make_store()
    changing.ensure_layout()
    seen = Seen()
    ClusterWatches(watching).watch_topics(seen)
    assert seen.wait_for(lambda names: names == set())
    proxy.cut()
    TopicAdmin(changing).create_topic("made-while-cut", {0: [1]})
    assert eventually(lambda: not watching.connected)
    proxy.restore()
    assert seen.wait_for(lambda names: names == {"made-while-cut"})
    TopicAdmin(changing).create_topic("made-after", {0: [1]})
    assert seen.wait_for(lambda names: names == {"made-while-cut", "made-after"})


def test_watches_survive_session_expiry(
    store: ClusterStore, make_store: Callable[..., ClusterStore]
) -> None:
    changing = make_store()
    seen = Seen()
    ClusterWatches(store).watch_topics(seen)
    assert seen.wait_for(lambda names: names == set())
    expire_session(store)
    assert eventually(lambda: store.connected)
    TopicAdmin(changing).create_topic("after-expiry", {0: [1]})
    assert seen.wait_for(lambda names: names == {"after-expiry"})


def test_a_failing_callback_does_not_break_the_watch(store: ClusterStore) -> None:
    calls: list[set[str]] = []

    def flaky(names: set[str]) -> None:
        calls.append(names)
        if len(calls) == 1:
            raise RuntimeError("boom")

    ClusterWatches(store).watch_topics(flaky)
    assert eventually(lambda: len(calls) == 1)
    TopicAdmin(store).create_topic("orders", {0: [1]})
    assert eventually(lambda: calls[-1] == {"orders"})


@pytest.mark.parametrize("bad", ["../x", "a/b"])
def test_watch_paths_are_validated(store: ClusterStore, bad: str) -> None:
    with pytest.raises(ValueError):
        ClusterWatches(store).watch_topic_assignment(bad, Seen())
