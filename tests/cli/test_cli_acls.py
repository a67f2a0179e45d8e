"""`rafka acls add|list|remove` against a real ZooKeeper: kafka-acls.sh's options make the
bindings Kafka would, stored where the brokers read them, listed in kafka-acls.sh's layout."""

from __future__ import annotations

import pytest

from rafka.cli.main import main
from rafka.common.acl import (
    AccessControlEntry,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourceType,
)
from rafka.coordination.acls import AclStore
from rafka.coordination.embedded import ZooKeeperAddress
from rafka.coordination.store import ClusterStore

CLUSTER = "acl-cli"


def rafka(capsys: pytest.CaptureFixture[str], zk: ZooKeeperAddress, *words: str) -> str:
    assert main(["acls", *words, "--zk", str(zk), "--name", CLUSTER]) == 0
    return capsys.readouterr().out


def test_add_list_and_remove(zk_address: ZooKeeperAddress,
                             capsys: pytest.CaptureFixture[str]) -> None:
    out = rafka(capsys, zk_address, "add", "--allow-principal", "User:alice",
                "--operation", "Read", "--operation", "Describe", "--topic", "orders",
                "--group", "billing")
    assert "Current ACLs for resource `ResourcePattern(resourceType=TOPIC, name=orders, " \
           "patternType=LITERAL)`:" in out
    assert "(principal=User:alice, host=*, operation=READ, permissionType=ALLOW)" in out
    rafka(capsys, zk_address, "add", "--deny-principal", "User:bob", "--deny-host", "10.0.0.9",
          "--operation", "write", "--topic", "team-", "--resource-pattern-type", "prefixed")
    with ClusterStore(zk_address, CLUSTER).start() as store:
        acls = AclStore(store).read_all()
    read = AclOperation.READ
    assert acls[ResourcePattern(ResourceType.TOPIC, "orders")] == {
        AccessControlEntry("User:alice", "*", read, AclPermissionType.ALLOW),
        AccessControlEntry("User:alice", "*", AclOperation.DESCRIBE, AclPermissionType.ALLOW)}
    assert acls[ResourcePattern(ResourceType.TOPIC, "team-", PatternType.PREFIXED)] == {
        AccessControlEntry("User:bob", "10.0.0.9", AclOperation.WRITE, AclPermissionType.DENY)}
    assert ResourcePattern(ResourceType.GROUP, "billing") in acls

    listed = rafka(capsys, zk_address, "list")
    assert listed.count("Current ACLs for resource") == 3
    matching = rafka(capsys, zk_address, "list", "--topic", "team-orders",
                     "--resource-pattern-type", "match")
    assert "name=team-, patternType=PREFIXED" in matching and "name=orders" not in matching
    assert "User:alice" not in rafka(capsys, zk_address, "list", "--principal", "User:bob")

    removed = rafka(capsys, zk_address, "remove", "--allow-principal", "User:alice",
                    "--operation", "Read", "--topic", "orders")
    assert "Removed 1 ACL(s)" in removed
    rafka(capsys, zk_address, "remove", "--group", "billing")
    rafka(capsys, zk_address, "remove", "--topic", "team-", "--resource-pattern-type", "prefixed")
    with ClusterStore(zk_address, CLUSTER).start() as store:
        assert AclStore(store).read_all() == {ResourcePattern(ResourceType.TOPIC, "orders"): {
            AccessControlEntry("User:alice", "*", AclOperation.DESCRIBE,
                               AclPermissionType.ALLOW)}}


def test_an_acl_without_a_principal_is_a_usage_error(
    zk_address: ZooKeeperAddress, capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["acls", "add", "--topic", "orders", "--zk", str(zk_address)]) == 2
    assert main(["acls", "add", "--allow-principal", "alice", "--topic", "orders",
                 "--zk", str(zk_address), "--name", CLUSTER]) == 2
