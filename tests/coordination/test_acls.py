"""The cluster's ACLs in ZooKeeper: Kafka's znodes and JSON, change notifications that another
session's watch sees, and versioned writes that concurrent writers do not lose."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from rafka.common.acl import (
    AccessControlEntry,
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourceType,
)
from rafka.coordination.acls import (
    EXTENDED_CHANGES,
    LITERAL_CHANGES,
    AclStore,
    watch_acl_changes,
)
from rafka.coordination.store import ClusterStore
from tests.support.waiting import eventually

ORDERS = ResourcePattern(ResourceType.TOPIC, "orders")
TEAM = ResourcePattern(ResourceType.TOPIC, "team-", PatternType.PREFIXED)


def read(principal: str = "User:alice", operation: AclOperation = AclOperation.READ,
         ) -> AccessControlEntry:
    return AccessControlEntry(principal, "*", operation, AclPermissionType.ALLOW)


def test_acls_are_stored_where_and_as_kafka_stores_them(store: ClusterStore) -> None:
    acls = AclStore(store)
    acls.add([AclBinding(ORDERS, read()), AclBinding(TEAM, read("User:bob"))])
    assert store.read("/kafka-acl/Topic/orders").value == {"version": 1, "acls": [
        {"principal": "User:alice", "permissionType": "Allow", "operation": "Read",
         "host": "*"}]}
    assert store.read("/kafka-acl-extended/prefixed/Topic/team-").value["acls"][0][
        "principal"] == "User:bob"
    literal = store.children(LITERAL_CHANGES)
    extended = store.children(EXTENDED_CHANGES)
    assert len(literal) == 1 and literal[0].startswith("acl_changes_")
    assert store.get(f"{LITERAL_CHANGES}/{literal[0]}")[0] == b"Topic:orders"
    assert store.read(f"{EXTENDED_CHANGES}/{extended[0]}").value == {
        "version": 1, "resourceType": "Topic", "name": "team-", "patternType": "Prefixed"}
    assert acls.read_all() == {ORDERS: frozenset([read()]), TEAM: frozenset([read("User:bob")])}


def test_remove_deletes_what_each_filter_selects_and_the_empty_znode(store: ClusterStore) -> None:
    acls = AclStore(store)
    acls.add([AclBinding(ORDERS, read()), AclBinding(ORDERS, read("User:bob")),
              AclBinding(TEAM, read())])
    removed = acls.remove([AclBindingFilter(principal="User:bob"),
                           AclBindingFilter(ResourceType.TOPIC, "team-", PatternType.PREFIXED)])
    assert removed == [[AclBinding(ORDERS, read("User:bob"))], [AclBinding(TEAM, read())]]
    assert acls.read_all() == {ORDERS: frozenset([read()])}
    assert not store.exists("/kafka-acl-extended/prefixed/Topic/team-")
    assert acls.remove([AclBindingFilter(principal="User:nobody")]) == [[]]


def test_concurrent_writers_lose_none_of_each_others_acls(
    store: ClusterStore, make_store: Callable[..., ClusterStore],
) -> None:
    writers = [AclStore(make_store()) for _ in range(4)]
    start = threading.Barrier(len(writers))

    def write(index: int) -> None:
        start.wait()
        for n in range(5):
            writers[index].add([AclBinding(ORDERS, read(f"User:w{index}-{n}"))])

    threads = [threading.Thread(target=write, args=(i,)) for i in range(len(writers))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(AclStore(store).read_all()[ORDERS]) == 20


def test_a_watch_in_another_session_sees_each_change(
    store: ClusterStore, make_store: Callable[..., ClusterStore],
) -> None:
    seen: list[Any] = []
    watches = watch_acl_changes(make_store(), seen.append)
    try:
        assert eventually(lambda: seen and seen[-1] == {})
        acls = AclStore(store)
        acls.add([AclBinding(ORDERS, read())])
        assert eventually(lambda: seen[-1] == {ORDERS: frozenset([read()])})
        acls.add([AclBinding(TEAM, read())])
        assert eventually(lambda: TEAM in seen[-1])
        acls.remove([AclBindingFilter()])
        assert eventually(lambda: seen[-1] == {})
    finally:
        for watch in watches:
            watch.cancel()
