"""Client entities' configs (`/config/users`, `/config/clients`) as Kafka stores them, their
change notifications, and the watch a broker learns of changes by."""

from __future__ import annotations

import threading

import pytest

from rafka.coordination import layout
from rafka.coordination.entity_config import (
    DEFAULT_ENTITY,
    Entity,
    EntityConfigWatch,
    alter_entity_config,
    list_entities,
    read_entity_config,
)
from rafka.coordination.store import ClusterStore
from tests.support.waiting import eventually


def test_entity_paths_are_kafkas() -> None:
    assert Entity(user="alice").path == "users/alice"
    assert Entity(client_id="app").path == "clients/app"
    assert Entity("alice", "app").path == "users/alice/clients/app"
    assert Entity(user=DEFAULT_ENTITY).path == "users/<default>"
    assert Entity(user="CN=app,O=team").path == "users/CN%3Dapp%2CO%3Dteam"
    for entity in (Entity(user="a/b"), Entity("alice", "app"), Entity(client_id=DEFAULT_ENTITY)):
        assert Entity.from_path(entity.path) == entity
    with pytest.raises(ValueError):
        Entity.from_path("topics/orders")
    with pytest.raises(ValueError):
        _ = Entity().path


def test_a_config_is_stored_and_announced_as_kafka_does(store: ClusterStore) -> None:
    alice = Entity(user="alice")
    assert read_entity_config(store, alice).value == {}
    alter_entity_config(store, alice, {"producer_byte_rate": 1024, "SCRAM-SHA-256": "x"})
    alter_entity_config(store, alice, {"SCRAM-SHA-256": None, "consumer_byte_rate": "2048"})
    assert store.read(f"{layout.CONFIG}/users/alice").value == {
        "version": 1, "config": {"producer_byte_rate": "1024", "consumer_byte_rate": "2048"}}
    changes = sorted(store.children(layout.CONFIG_CHANGES))
    assert changes[-1].startswith("config_change_") and len(changes) == 2
    assert store.read(f"{layout.CONFIG_CHANGES}/{changes[-1]}").value == {
        "version": 2, "entity_path": "users/alice"}


def test_entities_are_listed(store: ClusterStore) -> None:
    alter_entity_config(store, Entity(user="bob"), {"k": "1"})
    alter_entity_config(store, Entity("alice", "app"), {"k": "2"})
    alter_entity_config(store, Entity(client_id=DEFAULT_ENTITY), {"k": "3"})
    # A user's client makes the user's znode too (empty), as in Kafka.
    assert list_entities(store, "users") == [Entity(user="alice"), Entity("alice", "app"),
                                             Entity(user="bob")]
    assert list_entities(store, "clients") == [Entity(client_id=DEFAULT_ENTITY)]
    with pytest.raises(ValueError):
        list_entities(store, "topics")


def test_the_watch_loads_everything_then_each_change(store: ClusterStore) -> None:
    alter_entity_config(store, Entity(user="alice"), {"k": "1"})
    seen: dict[Entity, dict[str, str]] = {}
    lock = threading.Lock()

    def record(entity: Entity, config: dict[str, str]) -> None:
        with lock:
            seen[entity] = config

    watch = EntityConfigWatch(store, record).start()
    try:
        assert eventually(lambda: seen.get(Entity(user="alice")) == {"k": "1"})
        alter_entity_config(store, Entity(user="alice"), {"k": "2"})
        alter_entity_config(store, Entity(client_id="app"), {"q": "3"})
        assert eventually(lambda: seen.get(Entity(user="alice")) == {"k": "2"}
                          and seen.get(Entity(client_id="app")) == {"q": "3"})
        alter_entity_config(store, Entity(user="alice"), {"k": None})
        assert eventually(lambda: seen.get(Entity(user="alice")) == {})
    finally:
        watch.cancel()
