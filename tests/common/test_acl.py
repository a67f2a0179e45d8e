"""The authorizer's rules, without ZooKeeper: patterns, implied operations, deny wins, hosts,
super users, allow-if-no-acl, and the filters of DescribeAcls and DeleteAcls."""

from __future__ import annotations

import pytest

from rafka.common.acl import (
    AccessControlEntry,
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    Authorizer,
    InvalidAclError,
    PatternType,
    ResourcePattern,
    ResourceType,
    allowing_operations,
    select,
)

TOPIC, GROUP, CLUSTER = ResourceType.TOPIC, ResourceType.GROUP, ResourceType.CLUSTER
READ, WRITE, DESCRIBE, ALL = (AclOperation.READ, AclOperation.WRITE, AclOperation.DESCRIBE,
                              AclOperation.ALL)
ALLOW, DENY = AclPermissionType.ALLOW, AclPermissionType.DENY
LITERAL, PREFIXED = PatternType.LITERAL, PatternType.PREFIXED


def entry(principal: str = "User:alice", operation: AclOperation = READ,
          permission: AclPermissionType = ALLOW, host: str = "*") -> AccessControlEntry:
    return AccessControlEntry(principal, host, operation, permission)


def authorizer(acls: dict[ResourcePattern, list[AccessControlEntry]], **options: object,
               ) -> Authorizer:
    return Authorizer(acls={pattern: frozenset(entries) for pattern, entries in acls.items()},
                      **options)  # type: ignore[arg-type]


def test_a_literal_acl_applies_to_its_resource_only() -> None:
    auth = authorizer({ResourcePattern(TOPIC, "orders"): [entry()]})
    assert auth.authorize("User:alice", "10.0.0.1", READ, TOPIC, "orders")
    assert not auth.authorize("User:alice", "10.0.0.1", READ, TOPIC, "orders-2")
    assert not auth.authorize("User:bob", "10.0.0.1", READ, TOPIC, "orders")
    assert not auth.authorize("User:alice", "10.0.0.1", WRITE, TOPIC, "orders")
    assert not auth.authorize("User:alice", "10.0.0.1", READ, GROUP, "orders")


def test_prefixed_and_wildcard_patterns_match_many_names() -> None:
    auth = authorizer({ResourcePattern(TOPIC, "team-", PREFIXED): [entry()],
                       ResourcePattern(GROUP, "*"): [entry("User:*")]})
    assert auth.authorize("User:alice", "h", READ, TOPIC, "team-orders")
    assert not auth.authorize("User:alice", "h", READ, TOPIC, "other")
    assert auth.authorize("User:anyone", "h", READ, GROUP, "any-group")


def test_describe_is_implied_by_read_write_delete_and_alter() -> None:
    for operation in (READ, WRITE, AclOperation.DELETE, AclOperation.ALTER, ALL):
        auth = authorizer({ResourcePattern(TOPIC, "t"): [entry(operation=operation)]})
        assert auth.authorize("User:alice", "h", DESCRIBE, TOPIC, "t"), operation
    auth = authorizer({ResourcePattern(TOPIC, "t"): [entry(operation=DESCRIBE)]})
    assert not auth.authorize("User:alice", "h", READ, TOPIC, "t")
    assert AclOperation.ALTER_CONFIGS in allowing_operations(AclOperation.DESCRIBE_CONFIGS)


def test_all_allows_every_operation() -> None:
    auth = authorizer({ResourcePattern(TOPIC, "t"): [entry(operation=ALL)]})
    assert auth.authorize("User:alice", "h", AclOperation.CREATE, TOPIC, "t")


def test_a_deny_wins_over_an_allow() -> None:
    auth = authorizer({ResourcePattern(TOPIC, "t"): [entry(operation=ALL)],
                       ResourcePattern(TOPIC, "t", PREFIXED): [entry(operation=WRITE,
                                                                      permission=DENY)]})
    assert auth.authorize("User:alice", "h", READ, TOPIC, "t")
    assert not auth.authorize("User:alice", "h", WRITE, TOPIC, "t")
    everyone_denied = authorizer({ResourcePattern(TOPIC, "*"): [
        entry(), entry("User:*", READ, DENY)]})
    assert not everyone_denied.authorize("User:alice", "h", READ, TOPIC, "t")


def test_a_deny_of_read_does_not_deny_the_describe_it_implies() -> None:
    auth = authorizer({ResourcePattern(TOPIC, "t"): [entry(operation=ALL),
                                                     entry(operation=READ, permission=DENY)]})
    assert not auth.authorize("User:alice", "h", READ, TOPIC, "t")
    assert auth.authorize("User:alice", "h", DESCRIBE, TOPIC, "t")


def test_hosts_limit_an_acl_to_an_address() -> None:
    auth = authorizer({ResourcePattern(TOPIC, "t"): [entry(host="10.0.0.1")]})
    assert auth.authorize("User:alice", "10.0.0.1", READ, TOPIC, "t")
    assert auth.authorize("User:alice", "/10.0.0.1", READ, TOPIC, "t")  # as the listener keeps it
    assert not auth.authorize("User:alice", "10.0.0.2", READ, TOPIC, "t")


def test_super_users_may_do_anything() -> None:
    auth = authorizer({ResourcePattern(TOPIC, "t"): [entry("User:admin", ALL, DENY)]},
                      super_users=["User:admin"])
    assert auth.authorize("User:admin", "h", WRITE, TOPIC, "t")
    assert auth.authorize("User:admin", "h", AclOperation.ALTER, CLUSTER, "kafka-cluster")


def test_a_resource_no_acl_names_is_allowed_only_if_configured() -> None:
    acls = {ResourcePattern(TOPIC, "guarded"): [entry()]}
    closed, open_ = authorizer(acls), authorizer(acls, allow_if_no_acl=True)
    assert not closed.authorize("User:bob", "h", READ, TOPIC, "free")
    assert open_.authorize("User:bob", "h", READ, TOPIC, "free")
    assert not open_.authorize("User:bob", "h", READ, TOPIC, "guarded")  # named: ACLs decide


def test_update_replaces_the_acls() -> None:
    auth = authorizer({})
    assert not auth.authorize("User:alice", "h", READ, TOPIC, "t")
    auth.update({ResourcePattern(TOPIC, "t"): frozenset([entry()])})
    assert auth.authorize("User:alice", "h", READ, TOPIC, "t")
    auth.update({})
    assert not auth.authorize("User:alice", "h", READ, TOPIC, "t")


ACLS = {
    ResourcePattern(TOPIC, "orders"): frozenset([entry(), entry("User:bob", WRITE)]),
    ResourcePattern(TOPIC, "*"): frozenset([entry("User:ops", DESCRIBE)]),
    ResourcePattern(TOPIC, "ord", PREFIXED): frozenset([entry("User:carol")]),
    ResourcePattern(GROUP, "billing"): frozenset([entry()]),
}


def names(found: list[AclBinding]) -> list[tuple[str, str, str]]:
    return [(b.pattern.name, b.pattern.pattern_type.name, b.entry.principal) for b in found]


def test_a_filter_of_any_selects_everything() -> None:
    assert len(select(ACLS, AclBindingFilter())) == 5


def test_a_literal_filter_selects_its_pattern_exactly() -> None:
    found = select(ACLS, AclBindingFilter(TOPIC, "orders", LITERAL))
    assert names(found) == [("orders", "LITERAL", "User:alice"), ("orders", "LITERAL", "User:bob")]
    assert select(ACLS, AclBindingFilter(TOPIC, "ord", LITERAL)) == []
    assert names(select(ACLS, AclBindingFilter(TOPIC, "ord", PREFIXED))) == [
        ("ord", "PREFIXED", "User:carol")]


def test_match_selects_every_pattern_that_applies_to_a_name() -> None:
    found = select(ACLS, AclBindingFilter(TOPIC, "orders", PatternType.MATCH))
    assert sorted(names(found)) == [("*", "LITERAL", "User:ops"), ("ord", "PREFIXED", "User:carol"),
                                    ("orders", "LITERAL", "User:alice"),
                                    ("orders", "LITERAL", "User:bob")]


def test_any_pattern_type_selects_by_name_whatever_the_type() -> None:
    found = select(ACLS, AclBindingFilter(ResourceType.ANY, "orders", PatternType.ANY))
    assert len(found) == 2


def test_a_filter_selects_by_principal_host_operation_and_permission() -> None:
    assert names(select(ACLS, AclBindingFilter(principal="User:bob"))) == [
        ("orders", "LITERAL", "User:bob")]
    assert len(select(ACLS, AclBindingFilter(operation=WRITE))) == 1
    assert select(ACLS, AclBindingFilter(permission_type=DENY)) == []
    assert select(ACLS, AclBindingFilter(host="10.0.0.1")) == []
    assert len(select(ACLS, AclBindingFilter(resource_type=GROUP))) == 1


@pytest.mark.parametrize("binding", [
    AclBinding(ResourcePattern(ResourceType.ANY, "t"), entry()),
    AclBinding(ResourcePattern(TOPIC, "t", PatternType.MATCH), entry()),
    AclBinding(ResourcePattern(TOPIC, ""), entry()),
    AclBinding(ResourcePattern(TOPIC, "a/b"), entry()),
    AclBinding(ResourcePattern(TOPIC, "*", PREFIXED), entry()),
    AclBinding(ResourcePattern(CLUSTER, "other"), entry()),
    AclBinding(ResourcePattern(TOPIC, "t"), entry("alice")),
    AclBinding(ResourcePattern(TOPIC, "t"), entry(operation=AclOperation.ANY)),
    AclBinding(ResourcePattern(TOPIC, "t"), entry(permission=AclPermissionType.ANY)),
])
def test_what_cannot_be_stored_is_refused(binding: AclBinding) -> None:
    with pytest.raises(InvalidAclError):
        binding.validate()


def test_kafka_names_round_trip() -> None:
    assert ResourceType.TRANSACTIONAL_ID.kafka_name == "TransactionalId"
    assert ResourceType.from_kafka_name("TransactionalId") is ResourceType.TRANSACTIONAL_ID
    assert ResourceType.from_kafka_name("transactional-id".replace("-", "_")) \
        is ResourceType.TRANSACTIONAL_ID
    assert AclOperation.DESCRIBE_CONFIGS.kafka_name == "DescribeConfigs"
    assert AclOperation.from_kafka_name("DescribeConfigs") is AclOperation.DESCRIBE_CONFIGS
    assert AclPermissionType.from_kafka_name("Allow") is ALLOW
