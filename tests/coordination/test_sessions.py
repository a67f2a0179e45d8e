"""Connection loss and session expiry, told apart, across registration, election and watches.

A connection loss shorter than the session timeout keeps the session: ephemerals stay ours and
nothing registers again. An expiry loses them: everything is re-established on the new session.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from rafka.coordination.admin import TopicAdmin
from rafka.coordination.election import ControllerElection
from rafka.coordination.embedded import ZooKeeperAddress
from rafka.coordination.models import BrokerInfo
from rafka.coordination.registration import BrokerRegistration
from rafka.coordination.store import ClusterStore
from rafka.coordination.watches import ClusterWatches
from tests.support.waiting import eventually
from tests.support.zookeeper import TcpProxy, expire_session


class Broker:
    """What a broker holds in ZooKeeper: registration, candidacy, a topics watch."""

    def __init__(self, store: ClusterStore, broker_id: int = 1) -> None:
        self.store = store
        self.calls: list[Any] = []
        self.topics: list[set[str]] = []
        self.registration = BrokerRegistration(
            store,
            BrokerInfo(broker_id, f"broker-{broker_id}", "localhost"),
            on_registered=lambda: self.calls.append("registered"),
            on_unregistered=lambda: self.calls.append("unregistered"),
        ).register()
        self.election = ControllerElection(
            store,
            broker_id,
            on_elected=lambda epoch: self.calls.append(("elected", epoch)),
            on_resigned=lambda: self.calls.append("resigned"),
        ).start()
        ClusterWatches(store).watch_topics(self.topics.append)
        assert eventually(lambda: self.election.is_controller and self.topics)


def broker_through_proxy(make_store: Callable[..., ClusterStore],
                         proxied_address: ZooKeeperAddress, session_timeout_ms: int) -> Broker:
    """A broker whose session reaches ZooKeeper through the proxy, so that a test can cut it."""
    store = make_store(proxied_address, session_timeout_ms=session_timeout_ms)
    store.ensure_layout()
    return Broker(store)


def test_a_short_connection_loss_keeps_everything(
    make_store: Callable[..., ClusterStore],
    proxy: TcpProxy,
    proxied_address: ZooKeeperAddress,
) -> None:
    broker = broker_through_proxy(make_store, proxied_address, session_timeout_ms=4000)
    observer = make_store()
    registered = observer.stat("/brokers/ids/1")
    proxy.cut()
    assert eventually(lambda: not broker.election.is_controller, timeout_s=1)
    assert broker.registration.registered, "the session, and the znode, may still be alive"
    TopicAdmin(observer).create_topic("while-cut", {0: [1]})
    time.sleep(1)  # well under the 4 s session timeout
    proxy.restore()
    assert eventually(lambda: broker.election.is_controller)
    assert eventually(lambda: broker.topics[-1] == {"while-cut"})
    assert broker.registration.registered
    again = observer.stat("/brokers/ids/1")
    assert registered is not None and again is not None
    assert again.czxid == registered.czxid, "the same znode: not registered again"
    assert again.ephemeralOwner == registered.ephemeralOwner
    assert broker.election.epoch == 1
    assert eventually(
        lambda: broker.calls == ["registered", ("elected", 1), "resigned", ("elected", 1)]
    )


def test_an_expiry_re_establishes_everything_on_the_new_session(
    make_store: Callable[..., ClusterStore],
) -> None:
    store = make_store()
    store.ensure_layout()
    broker = Broker(store)
    registered = store.stat("/brokers/ids/1")
    old_session = store.session_id
    expire_session(store)
    assert eventually(lambda: broker.registration.registered and broker.election.is_controller)
    assert store.session_id != old_session
    again = store.stat("/brokers/ids/1")
    assert registered is not None and again is not None
    assert again.czxid != registered.czxid and again.ephemeralOwner == store.session_id
    assert broker.election.epoch == 2, "a new win bumps the epoch"
    TopicAdmin(make_store()).create_topic("after-expiry", {0: [1]})
    assert eventually(lambda: broker.topics[-1] == {"after-expiry"})
    assert eventually(lambda: len(broker.calls) == 6)
    assert set(broker.calls[2:4]) == {"unregistered", "resigned"}
    assert set(broker.calls[4:]) == {"registered", ("elected", 2)}


def test_a_connection_loss_longer_than_the_session_timeout_is_an_expiry(
    make_store: Callable[..., ClusterStore],
    proxy: TcpProxy,
    proxied_address: ZooKeeperAddress,
) -> None:
    """The real thing, without the expiry trick: the server times the session out."""
    broker = broker_through_proxy(make_store, proxied_address, session_timeout_ms=1500)
    observer = make_store()
    proxy.cut()
    assert eventually(lambda: not observer.exists("/brokers/ids/1"), timeout_s=10)
    proxy.restore()
    assert eventually(lambda: broker.registration.registered and broker.election.is_controller)
    assert "unregistered" in broker.calls
    assert broker.election.epoch == 2
