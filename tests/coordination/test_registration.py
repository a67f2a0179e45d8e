"""Broker registration: ephemeral `/brokers/ids/<id>`, refused twice, re-registered after expiry."""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest

from rafka.coordination.embedded import ZooKeeperAddress
from rafka.coordination.errors import BrokerIdInUseError
from rafka.coordination.models import BrokerInfo
from rafka.coordination.registration import BrokerRegistration, read_brokers
from rafka.coordination.store import ClusterStore
from tests.support.waiting import eventually
from tests.support.zookeeper import TcpProxy, expire_session


class Recorder:
    """Records the callbacks of a registration with what `registered` said at that moment."""

    def __init__(self) -> None:
        self.registration: BrokerRegistration | None = None
        self.calls: list[tuple[str, bool]] = []

    def registered(self) -> None:
        assert self.registration is not None
        self.calls.append(("registered", self.registration.registered))

    def unregistered(self) -> None:
        assert self.registration is not None
        self.calls.append(("unregistered", self.registration.registered))

    def register(self, store: ClusterStore, info: BrokerInfo) -> BrokerRegistration:
        self.registration = BrokerRegistration(
            store, info, on_registered=self.registered, on_unregistered=self.unregistered
        )
        return self.registration.register()


def info(broker_id: int = 1, actor: str = "broker-1") -> BrokerInfo:
    return BrokerInfo(broker_id, actor, "10.0.0.5", rack="r1", timestamp=1_700_000_000_000)


def test_registers_an_ephemeral_znode_with_kafka_fields(store: ClusterStore) -> None:
    recorder = Recorder()
    registration = recorder.register(store, info())
    assert registration.registered
    data, stat = store.get("/brokers/ids/1")
    assert json.loads(data) == {
        "node_id": 1,
        "actor": "broker-1",
        "host": "10.0.0.5",
        "rack": "r1",
        "replica_hosts": 0,
        "endpoints": [],
        "listener_security_protocol_map": {},
        "version": 1,
        "timestamp": "1700000000000",
    }
    assert stat.ephemeralOwner == store.session_id
    assert registration.broker_epoch == stat.czxid
    assert eventually(lambda: recorder.calls == [("registered", True)])
    assert read_brokers(store)[1] == info()
    assert read_brokers(store)[1].epoch == stat.czxid


def test_a_second_live_broker_with_the_same_id_is_refused(
    make_store: Callable[..., ClusterStore],
) -> None:
    first = make_store()
    BrokerRegistration(first, info()).register()
    second = make_store()
    with pytest.raises(BrokerIdInUseError) as raised:
        BrokerRegistration(second, info(actor="broker-1-again")).register()
    message = str(raised.value)
    assert "broker id 1 is already registered" in message
    assert "'broker-1'" in message and "another broker id" in message
    assert json.loads(first.get("/brokers/ids/1")[0])["actor"] == "broker-1"


def test_after_expiry_it_knows_it_is_unregistered_and_registers_again(store: ClusterStore) -> None:
    recorder = Recorder()
    registration = recorder.register(store, info())
    old_epoch = registration.broker_epoch
    expire_session(store)
    assert eventually(lambda: len(recorder.calls) == 3)
    # While unregistered it said so (the actor layer drops leadership on that).
    assert recorder.calls == [
        ("registered", True),
        ("unregistered", False),
        ("registered", True),
    ]
    stat = store.stat("/brokers/ids/1")
    assert stat is not None and stat.ephemeralOwner == store.session_id
    assert registration.broker_epoch == stat.czxid != old_epoch


def test_it_waits_for_a_usurper_to_leave_before_registering_again(
    make_store: Callable[..., ClusterStore],
    proxy: TcpProxy,
    proxied_address: ZooKeeperAddress,
    zk_address: ZooKeeperAddress,
) -> None:
    victim_store = make_store(proxied_address)
    recorder = Recorder()
    victim = recorder.register(victim_store, info())
    proxy.cut()  # the victim cannot reconnect until restored
    expire_session(victim_store, servers=zk_address)
    usurper = BrokerRegistration(make_store(), info(actor="usurper")).register()
    proxy.restore()
    assert eventually(lambda: ("unregistered", False) in recorder.calls)
    assert eventually(lambda: victim_store.connected)
    assert not victim.registered
    usurper.unregister()
    assert eventually(lambda: victim.registered)
    assert json.loads(victim_store.get("/brokers/ids/1")[0])["actor"] == "broker-1"
    assert recorder.calls[-1] == ("registered", True)


def test_unregister_deletes_the_znode_and_stops_re_registering(store: ClusterStore) -> None:
    recorder = Recorder()
    registration = recorder.register(store, info())
    registration.unregister()
    assert not store.exists("/brokers/ids/1")
    assert not registration.registered
    expire_session(store)
    assert eventually(lambda: store.connected)
    assert not store.exists("/brokers/ids/1")


def test_unregister_never_deletes_someone_elses_registration(
    make_store: Callable[..., ClusterStore],
) -> None:
    first_store = make_store()
    first = BrokerRegistration(first_store, info()).register()
    expire_session(first_store)
    assert eventually(lambda: first.registered)
    first_store.close()  # drops the registration with the session
    holder = BrokerRegistration(make_store(), info(actor="next")).register()
    first.unregister()
    assert holder.registered


def test_update_info_rewrites_the_registration(store: ClusterStore) -> None:
    registration = BrokerRegistration(store, info()).register()
    registration.update_info(BrokerInfo(1, "broker-1", "10.0.0.6", rack="r2"))
    assert json.loads(store.get("/brokers/ids/1")[0])["host"] == "10.0.0.6"
    with pytest.raises(ValueError, match="new BrokerRegistration"):
        registration.update_info(info(broker_id=2))
