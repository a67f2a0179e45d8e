"""Consumer-group znodes, as Kafka's ZooKeeper-based consumers keep them (docs/zookeeper.md):

- `/consumers/<g>/ids/<member>` (ephemeral): a member and its subscription. Registered through
  `register_member`, which keeps it registered across session expiry like a broker's.
- `/consumers/<g>/owners/<t>/<p>` (ephemeral): the member that owns a partition. Creating it is
  the lock: a second claim fails (`try_claim_partition` returns False, `claim_partition` raises
  `PartitionOwnedError`), so a partition has at most one owner in a group at any moment. A
  claim holds the member id as plain text (as Kafka writes it) and lives as long as the
  claimant's session: after a session expiry the claims are gone and the member must rebalance
  (its `on_registered` callback tells it when it is back). They are not re-created silently,
  since another member may have taken the partition meanwhile.
- `/consumers/<g>/offsets/<t>/<p>` (persistent): the committed offset, a JSON integer (Kafka
  writes the number as text, which is the same bytes).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping
from typing import TypeVar

from rafka.coordination import layout
from rafka.coordination.errors import (
    CoordinationError,
    InconsistentGroupProtocolError,
    MemberIdInUseError,
    PartitionOwnedError,
    StaleVersionError,
    ZNodeExistsError,
    ZNodeMissingError,
)
from rafka.coordination.models import MemberSubscription, Versioned
from rafka.coordination.registration import EphemeralRegistration, Hook
from rafka.coordination.store import ClusterStore
from rafka.coordination.validation import (
    validate_member_id,
    validate_partition,
    validate_topic_name,
)

T = TypeVar("T")


class MemberRegistration(EphemeralRegistration):
    """A consumer's ephemeral `/consumers/<g>/ids/<member>`, registered again after expiry."""

    def __init__(
        self,
        store: ClusterStore,
        group: str,
        member_id: str,
        subscription: MemberSubscription,
        *,
        on_registered: Hook | None = None,
        on_unregistered: Hook | None = None,
    ) -> None:
        super().__init__(
            store,
            layout.member_path(group, member_id),
            subscription.to_json(),
            on_registered=on_registered,
            on_unregistered=on_unregistered,
        )
        self.group = group
        self.member_id = member_id
        self.subscription = subscription

    def register(self) -> MemberRegistration:
        super().register()
        return self

    def _conflict_error(self, stat: object) -> CoordinationError:
        owner = getattr(stat, "ephemeralOwner", 0)
        return MemberIdInUseError(
            f"member {self.member_id!r} of consumer group {self.group!r} is registered by "
            f"another live session (0x{owner:x}): give each consumer its own member id "
            f"(such as 'host:uuid')"
        )


class GroupStore:
    """Members, partition ownership and ZooKeeper-stored offsets of consumer groups."""

    def __init__(self, store: ClusterStore) -> None:
        self.store = store

    # --- groups and members ---------------------------------------------------------------------

    def list_groups(self) -> list[str]:
        """Every consumer group that has znodes (members, owners or offsets), sorted."""
        return self.store.children_or_empty(layout.CONSUMERS)

    def register_member(
        self,
        group: str,
        member_id: str,
        subscription: Mapping[str, int] | MemberSubscription,
        *,
        pattern: str = "static",
        on_registered: Hook | None = None,
        on_unregistered: Hook | None = None,
    ) -> MemberRegistration:
        """Register a member (ephemeral) with its subscription `{topic: streams}`.

        Raises `MemberIdInUseError` if another live session registered the same id, and
        `InconsistentGroupProtocolError` while Kafka clients are members of the group. Call
        `unregister()` on the result when the consumer leaves.
        """
        holder = self.kafka_coordinator(group)
        if holder is not None:
            raise InconsistentGroupProtocolError(
                f"group {group!r} has Kafka-protocol members (coordinated by broker {holder}): "
                f"a group id belongs to Kafka clients or to rafka's consumers, not both at once; "
                f"use another group id")
        if not isinstance(subscription, MemberSubscription):
            for topic in subscription:
                validate_topic_name(topic)
            subscription = MemberSubscription(dict(subscription), pattern=pattern)
        registration = MemberRegistration(
            self.store,
            group,
            member_id,
            subscription,
            on_registered=on_registered,
            on_unregistered=on_unregistered,
        )
        return registration.register()

    def kafka_coordinator(self, group: str) -> int | None:
        """The broker whose Kafka clients are members of `group` now, if any."""
        found = self.store.read_optional(layout.group_kafka_marker_path(group))
        return None if found is None else int(found.value["broker"])

    def mark_kafka_group(self, group: str, broker_id: int) -> None:
        """Say, for the life of this session, that Kafka clients are members of `group`."""
        with contextlib.suppress(ZNodeExistsError):  # marked already (by an earlier call)
            self.store.create(layout.group_kafka_marker_path(group), {"broker": broker_id},
                              ephemeral=True)

    def unmark_kafka_group(self, group: str) -> None:
        with contextlib.suppress(ZNodeMissingError):
            self.store.delete(layout.group_kafka_marker_path(group))

    def member_ids(self, group: str) -> list[str]:
        return self.store.children_or_empty(layout.group_ids_path(group))

    def members(self, group: str) -> dict[str, MemberSubscription]:
        """The live members of a group and their subscriptions."""
        members = {}
        for member in self.member_ids(group):
            found = self.store.read_optional(layout.member_path(group, member))
            if found is not None:
                members[member] = MemberSubscription.from_json(found.value)
        return members

    # --- ownership ------------------------------------------------------------------------------

    def try_claim_partition(self, group: str, topic: str, partition: int, member_id: str) -> bool:
        """Claim a partition for `member_id`; False if another member (or session) owns it.

        Claiming a partition this session already owns for the same member is True (so a
        retried claim is harmless).
        """
        validate_member_id(member_id)
        path = layout.owner_path(group, topic, partition)
        try:
            self.store.create(path, member_id.encode("utf-8"), ephemeral=True)
            return True
        except ZNodeExistsError:
            return self._owned_by_us(path, member_id) is not None

    def claim_partition(self, group: str, topic: str, partition: int, member_id: str) -> None:
        """Claim a partition for `member_id`, raising `PartitionOwnedError` if it is owned."""
        if not self.try_claim_partition(group, topic, partition, member_id):
            owner = self.owner(group, topic, partition)
            raise PartitionOwnedError(
                f"partition {topic}-{partition} of consumer group {group!r} is owned by member "
                f"{owner!r}: wait until it releases the partition (rebalance), then claim again"
            )

    def release_partition(self, group: str, topic: str, partition: int, member_id: str) -> bool:
        """Release a partition if `member_id` owns it through this session; True if released."""
        validate_member_id(member_id)
        path = layout.owner_path(group, topic, partition)
        version = self._owned_by_us(path, member_id)
        if version is None:
            return False
        try:
            self.store.delete(path, version=version)
        except StaleVersionError:
            return False
        return True

    def owner(self, group: str, topic: str, partition: int) -> str | None:
        """The member owning a partition, or None."""
        try:
            data, _ = self.store.get(layout.owner_path(group, topic, partition))
        except ZNodeMissingError:
            return None
        return data.decode("utf-8")

    def owners(self, group: str, topic: str) -> dict[int, str]:
        """`{partition: member}` of a topic's owned partitions in a group."""
        return self._per_partition(layout.owner_topic_path(group, topic),
                                   lambda partition: self.owner(group, topic, partition))

    def _per_partition(self, parent: str, read: Callable[[int], T | None]) -> dict[int, T]:
        """`{partition: read(partition)}` over the partition children of `parent`, leaving out
        the ones `read` finds nothing for (gone since the listing)."""
        found = {}
        for name in self.store.children_or_empty(parent):
            if name.isdigit():
                value = read(int(name))
                if value is not None:
                    found[int(name)] = value
        return found

    def _owned_by_us(self, path: str, member_id: str) -> int | None:
        """The znode version if `path` holds `member_id` and was created by our session."""
        try:
            data, stat = self.store.get(path)
        except ZNodeMissingError:
            return None
        ours = stat.ephemeralOwner == self.store.session_id and data == member_id.encode()
        return stat.version if ours else None

    # --- offsets --------------------------------------------------------------------------------

    def read_offset(self, group: str, topic: str, partition: int) -> Versioned[int] | None:
        """The committed offset with its znode version, or None if none was committed."""
        found = self.store.read_optional(layout.offset_path(group, topic, partition))
        return None if found is None else Versioned(int(found.value), found.version)

    def read_offsets(self, group: str, topic: str) -> dict[int, int]:
        """`{partition: offset}` of a topic's committed offsets in a group."""
        found = self._per_partition(layout.offset_topic_path(group, topic),
                                    lambda partition: self.read_offset(group, topic, partition))
        return {partition: offset.value for partition, offset in found.items()}

    def commit_offset(
        self,
        group: str,
        topic: str,
        partition: int,
        offset: int,
        *,
        expected_version: int | None = None,
    ) -> int:
        """Store a committed offset; return the znode version.

        With `expected_version` the write is conditional (`StaleVersionError` if another commit
        came in between, or if there is no committed offset yet); without it, last writer wins.
        """
        validate_partition(partition)
        if not isinstance(offset, int) or isinstance(offset, bool) or offset < 0:
            raise ValueError(f"an offset is an int >= 0, got {offset!r}")
        path = layout.offset_path(group, topic, partition)
        if expected_version is not None:
            try:
                return self.store.write(path, offset, expected_version)
            except ZNodeMissingError:
                raise StaleVersionError(
                    f"no offset is committed at {path} yet, so version {expected_version} "
                    f"cannot match: commit without expected_version the first time",
                    path=path,
                    expected_version=expected_version,
                ) from None
        for _ in range(3):
            with contextlib.suppress(ZNodeMissingError):
                return self.store.set(path, offset)
            with contextlib.suppress(ZNodeExistsError):
                self.store.create(path, offset)
                return 0
        raise StaleVersionError(f"{path} kept appearing and disappearing: try again", path=path)

    def delete_offsets(self, group: str, topic: str | None = None) -> None:
        """Forget a group's committed offsets (of one topic, or all)."""
        path = (
            layout.group_offsets_path(group)
            if topic is None
            else layout.offset_topic_path(group, topic)
        )
        self.store.delete(path, recursive=True)

