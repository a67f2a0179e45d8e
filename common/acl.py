"""Kafka's ACLs and the rules of its authorizer, without I/O.

An ACL binds a resource pattern (a resource type, a name, LITERAL or PREFIXED; the literal
name `*` is every resource of its type) to an access control entry (a principal, a host, an
operation, ALLOW or DENY). `Authorizer.authorize` decides as Kafka's `AclAuthorizer` does: a
super user may do anything; a DENY that matches wins over any ALLOW; an operation is allowed by
an ALLOW of itself or of ALL, and DESCRIBE also by READ, WRITE, DELETE or ALTER (DESCRIBE_CONFIGS
by ALTER_CONFIGS); a resource no ACL names is allowed only with
`allow.everyone.if.no.acl.found`. Filters (`AclBindingFilter`) select bindings for DescribeAcls
and DeleteAcls, with ANY for any value and the MATCH pattern type for every pattern that would
apply to a name. The enums carry Kafka's wire codes and the names Kafka writes in ZooKeeper.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TypeVar

from rafka.common.errors import RafkaError

WILDCARD_RESOURCE = "*"
WILDCARD_HOST = "*"
WILDCARD_PRINCIPAL = "User:*"
# The one cluster resource's name, as Kafka names it.
CLUSTER_NAME = "kafka-cluster"

# Kafka's error codes of a refusal, and of an ACL request to a broker without an authorizer.
TOPIC_AUTHORIZATION_FAILED = 29
GROUP_AUTHORIZATION_FAILED = 30
CLUSTER_AUTHORIZATION_FAILED = 31
TRANSACTIONAL_ID_AUTHORIZATION_FAILED = 53
SECURITY_DISABLED = 54


class InvalidAclError(RafkaError, ValueError):
    """An ACL that cannot be stored: a filter value, a bad principal or name."""


_Named = TypeVar("_Named", bound="_KafkaNamed")


class _KafkaNamed(enum.IntEnum):
    """An enum of Kafka's wire codes that also goes by Kafka's written names."""

    @property
    def kafka_name(self) -> str:
        """The name Kafka writes (`Topic`, `TransactionalId`, `DescribeConfigs`, `Allow`): in
        znode paths, the stored JSON and kafka-acls.sh's options."""
        return "".join(part.capitalize() for part in self.name.split("_"))

    @classmethod
    def from_kafka_name(cls: type[_Named], name: str) -> _Named:
        """The member named `name` in any case, with or without underscores."""
        wanted = name.lower().replace("_", "").replace("-", "")
        for member in cls:
            if member.name.lower().replace("_", "") == wanted:
                return member
        raise KeyError(name)


class ResourceType(_KafkaNamed):
    UNKNOWN = 0
    ANY = 1
    TOPIC = 2
    GROUP = 3
    CLUSTER = 4
    TRANSACTIONAL_ID = 5
    DELEGATION_TOKEN = 6


class AclOperation(_KafkaNamed):
    UNKNOWN = 0
    ANY = 1
    ALL = 2
    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11
    IDEMPOTENT_WRITE = 12
    CREATE_TOKENS = 13
    DESCRIBE_TOKENS = 14


class AclPermissionType(_KafkaNamed):
    UNKNOWN = 0
    ANY = 1
    DENY = 2
    ALLOW = 3


class PatternType(_KafkaNamed):
    UNKNOWN = 0
    ANY = 1
    MATCH = 2
    LITERAL = 3
    PREFIXED = 4


# What else allows an operation, besides itself and ALL (Kafka's implied operations).
_IMPLIED_BY = {
    AclOperation.DESCRIBE: frozenset((AclOperation.READ, AclOperation.WRITE,
                                      AclOperation.DELETE, AclOperation.ALTER)),
    AclOperation.DESCRIBE_CONFIGS: frozenset((AclOperation.ALTER_CONFIGS,)),
}


def allowing_operations(operation: AclOperation) -> frozenset[AclOperation]:
    """The operations whose ALLOW allows `operation`: itself, ALL, and those implying it."""
    return frozenset((operation, AclOperation.ALL)) | _IMPLIED_BY.get(operation, frozenset())


@dataclass(frozen=True, order=True)
class ResourcePattern:
    resource_type: ResourceType
    name: str
    pattern_type: PatternType = PatternType.LITERAL

    def matches(self, resource_type: ResourceType, name: str) -> bool:
        """Whether this pattern applies to the resource `name` of `resource_type`."""
        if resource_type != self.resource_type:
            return False
        if self.pattern_type == PatternType.PREFIXED:
            return name.startswith(self.name)
        return self.name in (name, WILDCARD_RESOURCE)

    def validate(self) -> None:
        """Raise `InvalidAclError` unless this pattern may be stored (a filter's ANY, MATCH or
        UNKNOWN may not, nor an empty name, a name that is no znode's, or a cluster not
        named `kafka-cluster`)."""
        if self.resource_type in (ResourceType.ANY, ResourceType.UNKNOWN):
            raise InvalidAclError(f"an ACL names one resource type, not {self.resource_type.name}")
        if self.pattern_type not in (PatternType.LITERAL, PatternType.PREFIXED):
            raise InvalidAclError(f"an ACL's pattern type is LITERAL or PREFIXED, not "
                                  f"{self.pattern_type.name}")
        if not self.name or "/" in self.name or self.name in (".", ".."):
            raise InvalidAclError(f"{self.name!r} cannot name a resource of an ACL")
        if self.pattern_type == PatternType.PREFIXED and self.name == WILDCARD_RESOURCE:
            raise InvalidAclError("a prefixed ACL's name cannot be '*' (use a literal '*')")
        if self.resource_type == ResourceType.CLUSTER and self.name != CLUSTER_NAME:
            raise InvalidAclError(f"the cluster resource is named {CLUSTER_NAME!r}")


@dataclass(frozen=True, order=True)
class AccessControlEntry:
    principal: str
    host: str
    operation: AclOperation
    permission_type: AclPermissionType

    def validate(self) -> None:
        principal_type, colon, name = self.principal.partition(":")
        if not colon or not principal_type or not name:
            raise InvalidAclError(f"a principal is TYPE:NAME (User:alice), not "
                                  f"{self.principal!r}")
        if not self.host:
            raise InvalidAclError("an ACL's host is an address or '*'")
        if self.operation in (AclOperation.ANY, AclOperation.UNKNOWN):
            raise InvalidAclError(f"an ACL names one operation, not {self.operation.name}")
        if self.permission_type not in (AclPermissionType.ALLOW, AclPermissionType.DENY):
            raise InvalidAclError(f"an ACL allows or denies, not {self.permission_type.name}")

    def applies_to(self, principal: str, host: str) -> bool:
        return (self.principal in (principal, WILDCARD_PRINCIPAL)
                and self.host in (host, WILDCARD_HOST))


@dataclass(frozen=True, order=True)
class AclBinding:
    pattern: ResourcePattern
    entry: AccessControlEntry

    def validate(self) -> None:
        self.pattern.validate()
        self.entry.validate()


@dataclass(frozen=True)
class AclBindingFilter:
    """Selects bindings: None (a name, principal or host) and ANY match anything; the
    pattern type MATCH selects every pattern that applies to `name`."""

    resource_type: ResourceType = ResourceType.ANY
    name: str | None = None
    pattern_type: PatternType = PatternType.ANY
    principal: str | None = None
    host: str | None = None
    operation: AclOperation = AclOperation.ANY
    permission_type: AclPermissionType = AclPermissionType.ANY

    def matches_pattern(self, pattern: ResourcePattern) -> bool:
        if self.resource_type not in (ResourceType.ANY, pattern.resource_type):
            return False
        if self.pattern_type not in (PatternType.ANY, PatternType.MATCH, pattern.pattern_type):
            return False
        if self.name is None:
            return True
        if self.pattern_type in (PatternType.ANY, pattern.pattern_type):
            return self.name == pattern.name
        return pattern.matches(pattern.resource_type, self.name)  # MATCH

    def matches_entry(self, entry: AccessControlEntry) -> bool:
        return (self.principal in (None, entry.principal)
                and self.host in (None, entry.host)
                and self.operation in (AclOperation.ANY, entry.operation)
                and self.permission_type in (AclPermissionType.ANY, entry.permission_type))

    def matches(self, binding: AclBinding) -> bool:
        return self.matches_pattern(binding.pattern) and self.matches_entry(binding.entry)


# The ACLs of a cluster: each pattern's entries.
Acls = Mapping[ResourcePattern, frozenset[AccessControlEntry]]


def bindings(acls: Acls) -> list[AclBinding]:
    """Every binding of `acls`, sorted."""
    return sorted(AclBinding(pattern, entry) for pattern, entries in acls.items()
                  for entry in entries)


def select(acls: Acls, wanted: AclBindingFilter) -> list[AclBinding]:
    """The bindings `wanted` selects, sorted."""
    return [binding for binding in bindings(acls) if wanted.matches(binding)]


def client_host(address: str) -> str:
    """A client's host as ACLs name it: its IP address (`/10.0.0.1` as the listener keeps it
    becomes `10.0.0.1`)."""
    return address.lstrip("/")


class Authorizer:
    """Kafka's `AclAuthorizer` over a snapshot of the cluster's ACLs (`update` replaces it;
    reads never see half of one)."""

    def __init__(self, super_users: Iterable[str] = (), allow_if_no_acl: bool = False,
                 acls: Acls | None = None) -> None:
        self.super_users = frozenset(super_users)
        self.allow_if_no_acl = allow_if_no_acl
        self._literal: dict[tuple[ResourceType, str], frozenset[AccessControlEntry]] = {}
        self._prefixed: dict[ResourceType, list[tuple[str, frozenset[AccessControlEntry]]]] = {}
        self.acls: Acls = {}
        self.update(acls or {})

    def update(self, acls: Acls) -> None:
        """Decide from `acls` from now on."""
        literal: dict[tuple[ResourceType, str], frozenset[AccessControlEntry]] = {}
        prefixed: dict[ResourceType, list[tuple[str, frozenset[AccessControlEntry]]]] = {}
        for pattern, entries in acls.items():
            if not entries:
                continue
            if pattern.pattern_type == PatternType.PREFIXED:
                prefixed.setdefault(pattern.resource_type, []).append((pattern.name, entries))
            else:
                literal[(pattern.resource_type, pattern.name)] = entries
        # One assignment after another: a reader between them sees an old prefixed index
        # with new literals for an instant, never a torn dict.
        self._literal, self._prefixed, self.acls = literal, prefixed, dict(acls)

    def matching_entries(self, resource_type: ResourceType, name: str
                         ) -> list[AccessControlEntry]:
        """Every entry of a pattern that applies to the resource."""
        found = [*self._literal.get((resource_type, name), ()),
                 *self._literal.get((resource_type, WILDCARD_RESOURCE), ())]
        for prefix, entries in self._prefixed.get(resource_type, ()):
            if name.startswith(prefix):
                found.extend(entries)
        return found

    def authorize(self, principal: str, host: str, operation: AclOperation,
                  resource_type: ResourceType, name: str) -> bool:
        """Whether `principal`, connected from `host`, may do `operation` on the resource."""
        if principal in self.super_users:
            return True
        entries = self.matching_entries(resource_type, name)
        if not entries:
            return self.allow_if_no_acl
        host = client_host(host)
        applying = [entry for entry in entries if entry.applies_to(principal, host)]
        denying = (operation, AclOperation.ALL)
        if any(entry.permission_type == AclPermissionType.DENY and entry.operation in denying
               for entry in applying):
            return False
        allowing = allowing_operations(operation)
        return any(entry.permission_type == AclPermissionType.ALLOW
                   and entry.operation in allowing for entry in applying)
