"""Consumer-group znodes: members, the owner znode as a lock, ZooKeeper-stored offsets."""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest

from rafka.coordination.errors import (
    InvalidGroupIdError,
    InvalidMemberIdError,
    MemberIdInUseError,
    PartitionOwnedError,
    StaleVersionError,
)
from rafka.coordination.groups import GroupStore
from rafka.coordination.models import MemberSubscription
from rafka.coordination.store import ClusterStore
from tests.support.waiting import eventually
from tests.support.zookeeper import expire_session


def test_members_register_ephemerally_with_their_subscription(groups: GroupStore) -> None:
    member = groups.register_member("billing", "host-a:1234", {"orders": 1})
    data, stat = groups.store.get("/consumers/billing/ids/host-a:1234")
    value = json.loads(data)
    assert value["version"] == 1 and value["subscription"] == {"orders": 1}
    assert value["pattern"] == "static" and value["timestamp"].isdigit()
    assert stat.ephemeralOwner == groups.store.session_id
    assert groups.member_ids("billing") == ["host-a:1234"]
    assert groups.members("billing")["host-a:1234"].subscription == {"orders": 1}
    assert groups.list_groups() == ["billing"]
    member.unregister()
    assert groups.member_ids("billing") == []


def test_a_member_id_is_taken_by_one_session_only(
    groups: GroupStore, make_store: Callable[..., ClusterStore]
) -> None:
    groups.register_member("billing", "m1", {"orders": 1})
    with pytest.raises(MemberIdInUseError, match="its own member id"):
        GroupStore(make_store()).register_member("billing", "m1", MemberSubscription({"x": 1}))


def test_a_member_registers_again_after_session_expiry(groups: GroupStore) -> None:
    calls: list[str] = []
    member = groups.register_member(
        "billing",
        "m1",
        {"orders": 1},
        on_registered=lambda: calls.append("registered"),
        on_unregistered=lambda: calls.append("unregistered"),
    )
    expire_session(groups.store)
    assert eventually(lambda: calls == ["registered", "unregistered", "registered"])
    assert member.registered
    assert groups.member_ids("billing") == ["m1"]


def test_the_owner_znode_is_a_lock(
    groups: GroupStore, make_store: Callable[..., ClusterStore]
) -> None:
    rival = GroupStore(make_store())
    assert groups.try_claim_partition("billing", "orders", 0, "m1")
    assert groups.try_claim_partition("billing", "orders", 0, "m1"), "a retried claim is ours"
    assert not rival.try_claim_partition("billing", "orders", 0, "m2")
    with pytest.raises(PartitionOwnedError, match="owned by member 'm1'"):
        rival.claim_partition("billing", "orders", 0, "m2")
    assert not groups.try_claim_partition("billing", "orders", 0, "m3"), "another member"
    assert groups.owner("billing", "orders", 0) == "m1"
    assert groups.store.get("/consumers/billing/owners/orders/0")[0] == b"m1"
    # Only the owner, through its own session, may release.
    assert not rival.release_partition("billing", "orders", 0, "m1")
    assert not groups.release_partition("billing", "orders", 0, "m2")
    assert groups.owner("billing", "orders", 0) == "m1"
    assert groups.release_partition("billing", "orders", 0, "m1")
    assert groups.owner("billing", "orders", 0) is None
    rival.claim_partition("billing", "orders", 0, "m2")
    groups.claim_partition("billing", "orders", 1, "m1")
    assert groups.owners("billing", "orders") == {0: "m2", 1: "m1"}


def test_claims_go_with_the_session(
    groups: GroupStore, make_store: Callable[..., ClusterStore]
) -> None:
    groups.claim_partition("billing", "orders", 0, "m1")
    expire_session(groups.store)
    assert eventually(lambda: groups.store.connected)
    assert GroupStore(make_store()).try_claim_partition("billing", "orders", 0, "m2")


def test_offsets_are_stored_and_conditionally_updated(groups: GroupStore) -> None:
    assert groups.read_offset("billing", "orders", 0) is None
    with pytest.raises(StaleVersionError, match="first time"):
        groups.commit_offset("billing", "orders", 0, 5, expected_version=0)
    assert groups.commit_offset("billing", "orders", 0, 5) == 0
    assert groups.store.get("/consumers/billing/offsets/orders/0")[0] == b"5"
    assert groups.commit_offset("billing", "orders", 0, 9, expected_version=0) == 1
    with pytest.raises(StaleVersionError):
        groups.commit_offset("billing", "orders", 0, 7, expected_version=0)
    assert groups.commit_offset("billing", "orders", 0, 11) == 2
    read = groups.read_offset("billing", "orders", 0)
    assert read is not None and (read.value, read.version) == (11, 2)
    groups.commit_offset("billing", "orders", 3, 1)
    assert groups.read_offsets("billing", "orders") == {0: 11, 3: 1}
    groups.delete_offsets("billing", "orders")
    assert groups.read_offsets("billing", "orders") == {}
    with pytest.raises(ValueError, match="offset"):
        groups.commit_offset("billing", "orders", 0, -1)


def test_group_and_member_ids_are_validated(groups: GroupStore) -> None:
    with pytest.raises(InvalidGroupIdError):
        groups.register_member("../x", "m1", {"orders": 1})
    with pytest.raises(InvalidMemberIdError):
        groups.try_claim_partition("billing", "orders", 0, "m/1")
    with pytest.raises(InvalidGroupIdError):
        groups.commit_offset("a/b", "orders", 0, 1)
