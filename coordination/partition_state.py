"""Partition state (`/brokers/topics/<t>/partitions/<p>/state`) and ISR change notifications.

Who writes what, as in Kafka:

- The controller creates the initial states of a new topic's partitions
  (`create_partition_states`) and rewrites a state on every leader election. Its writes are
  fenced with its `ControllerFence`, so a controller that was replaced cannot write any more.
- A partition leader rewrites the ISR when it shrinks or expands (`update_partition_state`),
  conditional on the znode version it last saw: `StaleVersionError` means the controller (or
  anyone) moved the partition since, and the leader must step down and wait for instructions.
  It then records the change under `/isr_change_notification` (`write_isr_change_notification`)
  so the controller refreshes every broker's metadata; the controller reads and deletes those.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from kazoo.client import TransactionRequest

from rafka.common.topic_partition import TopicPartition
from rafka.coordination import layout
from rafka.coordination.errors import (
    ControllerMovedError,
    InvalidPartitionsError,
    StaleVersionError,
    UnknownTopicError,
    ZNodeExistsError,
    ZNodeMissingError,
)
from rafka.coordination.models import (
    ControllerFence,
    PartitionState,
    TopicAssignment,
    Versioned,
    isr_change_from_json,
    isr_change_json,
)
from rafka.coordination.store import ClusterStore, encode

# Partitions per multi-op: each carries two small znodes, far below ZooKeeper's 1 MB request cap.
CREATE_CHUNK = 500


def add_fence(transaction: TransactionRequest, fence: ControllerFence | None) -> None:
    """Make a multi-op conditional on the controller epoch still being the fence's."""
    if fence is not None:
        transaction.check(layout.CONTROLLER_EPOCH, fence.epoch_zk_version)


def commit_fenced(
    store: ClusterStore, transaction: TransactionRequest, fence: ControllerFence | None
) -> list[object]:
    """Commit a multi-op, reporting a failed fence check as `ControllerMovedError`."""
    try:
        return store.commit(transaction)
    except StaleVersionError as error:
        if fence is not None and error.path == layout.CONTROLLER_EPOCH:
            raise ControllerMovedError(
                f"the controller epoch moved past {fence.epoch}: another broker is the "
                f"controller now; stop acting as controller"
            ) from None
        raise


class PartitionStateStore:
    """Reads and conditional writes of partition state, and the ISR change notifications."""

    def __init__(self, store: ClusterStore) -> None:
        self.store = store

    def read_partition_state(self, topic: str, partition: int) -> Versioned[PartitionState] | None:
        """The partition's state with its znode version; None until the controller wrote it."""
        found = self.store.read_optional(layout.partition_state_path(topic, partition))
        if found is None:
            return None
        return Versioned(PartitionState.from_json(found.value), found.version)

    def read_partition_states(
        self, topic: str, partitions: Iterable[int]
    ) -> dict[int, Versioned[PartitionState] | None]:
        """Many partitions' states in one pipelined pass."""
        partitions = list(partitions)
        found = self.store.read_many_optional(
            [layout.partition_state_path(topic, p) for p in partitions])
        return {p: None if versioned is None
                else Versioned(PartitionState.from_json(versioned.value), versioned.version)
                for p, versioned in zip(partitions, found, strict=True)}

    def create_partition_states(
        self,
        topic: str,
        states: Mapping[int, PartitionState],
        *,
        fence: ControllerFence | None = None,
    ) -> dict[int, int]:
        """The controller's initial write of partition states, all at once; return the versions.

        Raises `UnknownTopicError` if the topic is gone, `InvalidPartitionsError` for a
        partition the topic does not have, `StaleVersionError` if a state exists already (read
        it and use `update_partition_state`), and `ControllerMovedError` if the fence fails.
        """
        if not states:
            return {}
        assignment = self._assignment(topic)
        unknown = sorted(set(states) - set(assignment.partitions))
        if unknown:
            raise InvalidPartitionsError(
                f"topic {topic!r} has no partitions {unknown} (it has "
                f"{assignment.partition_count}): add them with add_partitions first"
            )
        # A few round trips, however many partitions: the parent once, the partitions that
        # already have a znode (an earlier attempt that died half way) in one listing, then the
        # znodes in transactions of CREATE_CHUNK partitions, each fenced.
        parent = layout.partition_path(topic, 0).rsplit("/", 1)[0]
        self.store.ensure_path(parent)
        existing = set(self.store.children_or_empty(parent))
        ordered = sorted(states.items())
        for start in range(0, len(ordered), CREATE_CHUNK):
            transaction = self.store.transaction()
            add_fence(transaction, fence)
            for partition, state in ordered[start:start + CREATE_CHUNK]:
                if str(partition) not in existing:
                    transaction.create(layout.partition_path(topic, partition), b"",
                                       acl=self.store.acl)
                transaction.create(layout.partition_state_path(topic, partition),
                                   encode(state.to_json()), acl=self.store.acl)
            try:
                commit_fenced(self.store, transaction, fence)
            except ZNodeExistsError:
                raise StaleVersionError(
                    f"a partition state of topic {topic!r} exists already (someone else wrote "
                    "it): read the states and use update_partition_state for those",
                ) from None
        return dict.fromkeys(states, 0)

    def update_partition_state(
        self,
        topic: str,
        partition: int,
        new_state: PartitionState,
        expected_version: int,
        *,
        fence: ControllerFence | None = None,
    ) -> int:
        """Write a partition's state if it is still at `expected_version`; return the new version.

        `StaleVersionError` means the state moved since it was read: re-read it (a leader steps
        down). With a `fence` (the controller's writes) it also fails, with
        `ControllerMovedError`, once another controller has won.
        """
        path = layout.partition_state_path(topic, partition)
        try:
            if fence is None:
                return self.store.write(path, new_state.to_json(), expected_version)
            transaction = self.store.transaction()
            add_fence(transaction, fence)
            transaction.set_data(path, encode(new_state.to_json()), expected_version)
            results = commit_fenced(self.store, transaction, fence)
            return int(results[1].version)  # type: ignore[attr-defined]
        except ZNodeMissingError:
            raise UnknownTopicError(
                f"partition {topic}-{partition} has no state: the topic was deleted, or the "
                f"controller has not created its partition states yet; refresh metadata"
            ) from None

    def update_leader_and_isr(
        self, topic: str, partition: int, new_state: PartitionState, expected_version: int
    ) -> int:
        """A leader's ISR change: `update_partition_state` without a fence, where finding the
        state already as asked counts as written.

        A write whose answer was lost (the connection dropped after ZooKeeper applied it) finds
        the version moved when it is tried again, by kazoo or by the leader; if the state is the
        one this write asked for, the write was applied (Kafka's checkLeaderAndIsrZkData).
        """
        try:
            return self.update_partition_state(topic, partition, new_state, expected_version)
        except StaleVersionError:
            current = self.read_partition_state(topic, partition)
            if current is not None and current.value == new_state:
                return current.version
            raise

    # --- ISR change notifications ---------------------------------------------------------------

    def write_isr_change_notification(self, partitions: Iterable[tuple[str, int]]) -> str:
        """Tell the controller that these partitions' ISR changed; return the notification name."""
        entries = [TopicPartition(t, p) for t, p in partitions]
        for topic, partition in entries:
            layout.partition_path(topic, partition)  # validates both
        path = self.store.create(
            f"{layout.ISR_CHANGE_NOTIFICATION}/{layout.ISR_CHANGE_PREFIX}",
            isr_change_json(entries),
            sequential=True,
        )
        return path.rsplit("/", 1)[1]

    def isr_change_notifications(self) -> list[str]:
        """The pending notifications' names, oldest first."""
        children = self.store.children_or_empty(layout.ISR_CHANGE_NOTIFICATION)
        return sorted(c for c in children if c.startswith(layout.ISR_CHANGE_PREFIX))

    def read_isr_change_notifications(
        self, names: Iterable[str] | None = None
    ) -> dict[str, list[TopicPartition]]:
        """The partitions named by each notification (all pending ones if `names` is None)."""
        found: dict[str, list[TopicPartition]] = {}
        for name in self.isr_change_notifications() if names is None else names:
            value = self.store.read_optional(layout.isr_change_path(name))
            if value is not None:
                found[name] = isr_change_from_json(value.value)
        return found

    def delete_isr_change_notifications(self, names: Iterable[str]) -> None:
        for name in names:
            self.store.delete(layout.isr_change_path(name))

    def consume_isr_change_notifications(self) -> set[TopicPartition]:
        """Read every pending notification, delete them, and return the partitions named."""
        found = self.read_isr_change_notifications()
        partitions = {tp for entries in found.values() for tp in entries}
        self.delete_isr_change_notifications(found)
        return partitions

    def _assignment(self, topic: str) -> TopicAssignment:
        found = self.store.read_optional(layout.topic_path(topic))
        if found is None:
            raise UnknownTopicError(f"topic {topic!r} does not exist: create it first")
        return TopicAssignment.from_json(found.value)
