"""The cluster's ACLs in ZooKeeper, where Kafka's `AclAuthorizer` keeps them.

A literal pattern's entries are in `/kafka-acl/<ResourceType>/<name>`, a prefixed one's in
`/kafka-acl-extended/prefixed/<ResourceType>/<name>`, each as
`{"version": 1, "acls": [{"principal", "permissionType", "operation", "host"}]}` with Kafka's
names (`Topic`, `Allow`, `Read`). Every change writes a sequential notification naming the
resource, `/kafka-acl-changes/acl_changes_<seq>` (`Topic:name`) for literal patterns and
`/kafka-acl-extended-changes/acl_changes_<seq>` (JSON) for prefixed ones, which each broker
watches (`watch_acl_changes`) to read the ACLs again. Each change to a resource's znode is
conditional on the version it was read at, and made again from a fresh read when another
writer got there first, so two concurrent CreateAcls never lose one another's entries.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from typing import Any

from rafka.common.acl import (
    AccessControlEntry,
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    Acls,
    PatternType,
    ResourcePattern,
    ResourceType,
)
from rafka.coordination.errors import StaleVersionError, ZNodeExistsError, ZNodeMissingError
from rafka.coordination.store import ClusterStore
from rafka.coordination.watches import ChildrenWatch, Watch

log = logging.getLogger(__name__)

LITERAL_ACLS = "/kafka-acl"
PREFIXED_ACLS = "/kafka-acl-extended/prefixed"
LITERAL_CHANGES = "/kafka-acl-changes"
EXTENDED_CHANGES = "/kafka-acl-extended-changes"
CHANGE_PREFIX = "acl_changes_"
# Kafka's AclAuthorizer drops change notifications older than this (its changeExpirationMs).
CHANGE_EXPIRATION_S = 15 * 60


def resource_path(pattern: ResourcePattern) -> str:
    root = PREFIXED_ACLS if pattern.pattern_type == PatternType.PREFIXED else LITERAL_ACLS
    return f"{root}/{pattern.resource_type.kafka_name}/{pattern.name}"


def encode_entries(entries: Iterable[AccessControlEntry]) -> dict[str, Any]:
    return {"version": 1, "acls": [
        {"principal": entry.principal, "permissionType": entry.permission_type.kafka_name,
         "operation": entry.operation.kafka_name, "host": entry.host}
        for entry in sorted(entries)]}


def decode_entries(value: Any) -> frozenset[AccessControlEntry]:
    return frozenset(
        AccessControlEntry(acl["principal"], acl["host"],
                           AclOperation.from_kafka_name(acl["operation"]),
                           AclPermissionType.from_kafka_name(acl["permissionType"]))
        for acl in (value or {}).get("acls", ()))


class AclStore:
    """Reads and changes the cluster's ACLs (blocking calls: run them off an event loop)."""

    def __init__(self, store: ClusterStore) -> None:
        self.store = store

    def read_all(self) -> dict[ResourcePattern, frozenset[AccessControlEntry]]:
        """Every pattern that has entries, with them."""
        patterns = [ResourcePattern(ResourceType.from_kafka_name(kind), name, pattern_type)
                    for root, pattern_type in ((LITERAL_ACLS, PatternType.LITERAL),
                                               (PREFIXED_ACLS, PatternType.PREFIXED))
                    for kind in self.store.children_or_empty(root)
                    if _known_type(kind)
                    for name in self.store.children_or_empty(f"{root}/{kind}")]
        values = self.store.read_many_optional([resource_path(p) for p in patterns])
        acls = {}
        for pattern, value in zip(patterns, values, strict=True):
            entries = decode_entries(value.value) if value is not None else frozenset()
            if entries:
                acls[pattern] = entries
        return acls

    def add(self, added: Iterable[AclBinding]) -> None:
        """Store `added` (each validated first: `InvalidAclError` stores none of them)."""
        by_pattern: dict[ResourcePattern, set[AccessControlEntry]] = {}
        for binding in added:
            binding.validate()
            by_pattern.setdefault(binding.pattern, set()).add(binding.entry)
        for pattern, entries in by_pattern.items():
            self._update(pattern, frozenset(entries).union)

    def remove(self, filters: list[AclBindingFilter]) -> list[list[AclBinding]]:
        """Delete what each filter selects; return, per filter, the bindings it deleted."""
        current = self.read_all()
        chosen: dict[ResourcePattern, set[AccessControlEntry]] = {}
        for pattern, entries in current.items():
            for wanted in filters:
                if wanted.matches_pattern(pattern):
                    chosen.setdefault(pattern, set()).update(
                        entry for entry in entries if wanted.matches_entry(entry))
        removed: dict[ResourcePattern, frozenset[AccessControlEntry]] = {}
        for pattern, selected in chosen.items():
            if selected:
                gone = frozenset(selected)
                removed[pattern] = self._update(pattern, _without(gone), gone)
        return [[AclBinding(pattern, entry) for pattern, entries in sorted(removed.items())
                 for entry in sorted(entries) if wanted.matches_entry(entry)
                 and wanted.matches_pattern(pattern)] for wanted in filters]

    def _update(self, pattern: ResourcePattern,
                change: Callable[[frozenset[AccessControlEntry]], frozenset[AccessControlEntry]],
                watched: Iterable[AccessControlEntry] = (),
                ) -> frozenset[AccessControlEntry]:
        """Apply `change` to the pattern's entries, conditional on the version read, again
        from a fresh read if someone else wrote in between; then notify the brokers. Returns
        those of `watched` that were there to change."""
        path = resource_path(pattern)
        while True:
            found = self.store.read_optional(path)
            before = decode_entries(found.value) if found is not None else frozenset()
            after = change(before)
            try:
                if after == before:
                    return before & frozenset(watched)
                if found is None:
                    self.store.create(path, encode_entries(after))
                elif after:
                    self.store.write(path, encode_entries(after), found.version)
                else:
                    self.store.delete(path, version=found.version)
            except (StaleVersionError, ZNodeExistsError, ZNodeMissingError):
                continue  # another writer changed it since: read again and decide afresh
            self._notify(pattern)
            return before & frozenset(watched)

    def _notify(self, pattern: ResourcePattern) -> None:
        if pattern.pattern_type == PatternType.LITERAL:
            root = LITERAL_CHANGES
            value: Any = f"{pattern.resource_type.kafka_name}:{pattern.name}".encode()
        else:
            root = EXTENDED_CHANGES
            value = {"version": 1, "resourceType": pattern.resource_type.kafka_name,
                     "name": pattern.name, "patternType": pattern.pattern_type.name.capitalize()}
        self.store.create(f"{root}/{CHANGE_PREFIX}", value, sequential=True)
        self._purge_changes(root)

    def _purge_changes(self, root: str) -> None:
        """Drop notifications older than CHANGE_EXPIRATION_S: every broker has read the ACLs
        since (a broker that starts reads them all)."""
        deadline_ms = (time.time() - CHANGE_EXPIRATION_S) * 1000
        for name in self.store.children_or_empty(root)[:-1]:
            stat = self.store.stat(f"{root}/{name}")
            if stat is None or stat.ctime >= deadline_ms:
                break  # sorted by sequence, hence by age
            self.store.delete(f"{root}/{name}")


def _without(gone: frozenset[AccessControlEntry],
             ) -> Callable[[frozenset[AccessControlEntry]], frozenset[AccessControlEntry]]:
    return lambda entries: entries - gone


def _known_type(kind: str) -> bool:
    try:
        ResourceType.from_kafka_name(kind)
    except KeyError:
        log.warning("ignoring the ACLs of an unknown resource type %r", kind)
        return False
    return True


def watch_acl_changes(store: ClusterStore, callback: Callable[[Acls], object],
                      ) -> list[Watch[Any]]:
    """Call `callback` with every ACL of the cluster, soon after the watch starts and after
    each change notification (on the store's event thread, as every watch's callback)."""
    acls = AclStore(store)

    def reread(_changes: list[str]) -> None:
        callback(acls.read_all())

    return [ChildrenWatch(store, root, reread).start()
            for root in (LITERAL_CHANGES, EXTENDED_CHANGES)]

