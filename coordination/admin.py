"""Topic administration in ZooKeeper, as Kafka's `AdminZkClient` does it.

Creating a topic writes its replica assignment (`/brokers/topics/<t>`) and its config overrides
(`/config/topics/<t>`), atomically, and nothing else: as in Kafka, the controller notices the new
topic through its watch, elects the leaders and writes the initial partition states itself
(`PartitionStateStore.create_partition_states`). Deleting a topic is a request
(`/admin/delete_topics/<t>`) that the controller carries out; when its replicas are gone it
removes the topic's znodes with `delete_topic_znodes`.

Config values are stored as strings, as Kafka stores them (`True` becomes `"true"`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace

from rafka.common.topic_partition import PartitionKey, TopicPartition
from rafka.coordination import layout
from rafka.coordination.assignment import assign_replicas, validate_assignment
from rafka.coordination.errors import (
    InvalidPartitionsError,
    InvalidReplicaAssignmentError,
    InvalidTopicConfigError,
    InvalidTopicError,
    ReassignmentInProgressError,
    StaleVersionError,
    TopicExistsError,
    UnknownBrokerError,
    UnknownTopicError,
    UnknownTopicOrPartitionError,
    ZNodeExistsError,
    ZNodeMissingError,
    ZNodeNotEmptyError,
)
from rafka.coordination.models import (
    ControllerFence,
    TopicAssignment,
    TopicDescription,
    Versioned,
    topic_config_json,
)
from rafka.coordination.partition_state import PartitionStateStore, add_fence, commit_fenced
from rafka.coordination.registration import read_brokers
from rafka.coordination.store import ClusterStore, encode
from rafka.coordination.topic_ids import new_topic_id
from rafka.coordination.validation import (
    validate_broker_id,
    validate_partition,
    validate_topic_name,
)

_CONFLICT_RETRIES = 10

ReplicaAssignment = Mapping[int, Sequence[int]] | TopicAssignment


def config_value(name: str, value: object) -> str:
    """A config value as Kafka stores it: a string (booleans lower case)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (str, int, float)):
        return str(value)
    raise InvalidTopicConfigError(
        f"config {name!r} has a value of type {type(value).__name__}: use a string, number or "
        f"boolean, as in Kafka's topic configs"
    )


def normalise_config(config: Mapping[str, object] | None) -> dict[str, str]:
    normal = {}
    for name, value in (config or {}).items():
        if not isinstance(name, str) or not name.strip() or "/" in name:
            raise InvalidTopicConfigError(
                f"config name {name!r} is not allowed: use Kafka's names, such as 'retention.ms'"
            )
        normal[name] = config_value(name, value)
    return normal


def merge_config(
    current: Mapping[str, object], updates: Mapping[str, object | None]
) -> dict[str, object]:
    """`current` overrides with `updates` applied: a value sets its key, None removes it."""
    merged = {key: value for key, value in current.items() if key not in updates}
    merged.update({key: value for key, value in updates.items() if value is not None})
    return merged


Reassignment = dict[TopicPartition, tuple[int, ...]]


def reassignment_json(targets: Mapping[TopicPartition, Sequence[int]]) -> dict[str, object]:
    """The `/admin/reassign_partitions` content, in Kafka's format (also its tool's file)."""
    return {
        "version": 1,
        "partitions": [
            {"topic": tp.topic, "partition": tp.partition, "replicas": list(replicas)}
            for tp, replicas in sorted(targets.items())
        ],
    }


def parse_reassignment(data: object) -> Reassignment:
    """Kafka's reassignment JSON as `{TopicPartition: replicas}`; checks the shape only."""
    try:
        entries = data["partitions"]  # type: ignore[index]
        targets = {}
        for entry in entries:
            tp = TopicPartition(validate_topic_name(entry["topic"]),
                                validate_partition(int(entry["partition"])))
            if tp in targets:
                raise InvalidReplicaAssignmentError(
                    f"{tp.topic}-{tp.partition} appears twice in the reassignment: list each "
                    f"partition once")
            targets[tp] = tuple(validate_broker_id(int(b)) for b in entry["replicas"])
        return targets
    except (KeyError, TypeError, ValueError) as error:
        if isinstance(error, InvalidReplicaAssignmentError):
            raise
        raise InvalidReplicaAssignmentError(
            f"not a reassignment in Kafka's format ({type(error).__name__}: {error}): expected "
            f'{{"version": 1, "partitions": [{{"topic": "t", "partition": 0, '
            f'"replicas": [1, 2]}}]}}'
        ) from None


def _collision_key(topic: str) -> str:
    # Kafka refuses topics that differ only by '.' versus '_': their metric names collide.
    return topic.replace(".", "_")


class TopicAdmin:
    """Create, list, describe, configure, grow and delete topics."""

    def __init__(self, store: ClusterStore) -> None:
        self.store = store
        self.partition_states = PartitionStateStore(store)

    # --- create ---------------------------------------------------------------------------------

    def create_topic(
        self,
        topic: str,
        assignment: ReplicaAssignment,
        config: Mapping[str, object] | None = None,
    ) -> TopicAssignment:
        """Write a new topic's replica assignment and config overrides (one multi-op).

        Partition states are not written: the controller does that when it sees the topic.
        Raises `TopicExistsError`, `InvalidTopicError` (including a name that collides with an
        existing topic when '.' and '_' are confused), `InvalidReplicaAssignmentError`.
        """
        validate_topic_name(topic)
        normal = replace(validate_assignment(assignment), topic_id=new_topic_id())
        overrides = normalise_config(config)
        existing = self.list_topics()
        if topic in existing:
            raise TopicExistsError(f"topic {topic!r} exists already: choose another name")
        colliding = [t for t in existing if _collision_key(t) == _collision_key(topic)]
        if colliding:
            raise InvalidTopicError(
                f"topic {topic!r} collides with existing topic(s) {colliding}: names that differ "
                f"only by '.' and '_' are not allowed (as in Kafka); choose another name"
            )
        for parent in (layout.TOPICS, layout.TOPIC_CONFIGS):
            if not self.store.exists(parent):
                self.store.ensure_path(parent)
        config_path = layout.topic_config_path(topic)
        transaction = self.store.transaction()
        # Config first, as Kafka writes it, though the multi-op makes the order moot.
        leftover = self.store.stat(config_path)
        config_data = encode(topic_config_json(overrides))
        if leftover is None:
            transaction.create(config_path, config_data, acl=self.store.acl)
        else:  # left by a deletion that did not finish: overwrite it
            transaction.set_data(config_path, config_data, leftover.version)
        transaction.create(
            layout.topic_path(topic), encode(normal.to_json()), acl=self.store.acl
        )
        try:
            self.store.commit(transaction)
        except (ZNodeExistsError, StaleVersionError):
            if self.topic_exists(topic):
                raise TopicExistsError(
                    f"topic {topic!r} exists already: choose another name"
                ) from None
            raise
        return normal

    def create_topic_auto(
        self,
        topic: str,
        partitions: int,
        replication_factor: int,
        config: Mapping[str, object] | None = None,
        *,
        start_index: int | None = None,
    ) -> TopicAssignment:
        """Create a topic with replicas assigned over the live brokers (rack-aware if racks)."""
        validate_topic_name(topic)
        brokers = {b: info.rack for b, info in read_brokers(self.store).items()}
        assignment = assign_replicas(
            brokers, partitions, replication_factor, start_index=start_index
        )
        return self.create_topic(topic, assignment, config)

    # --- read -----------------------------------------------------------------------------------

    def list_topics(self) -> list[str]:
        """All topics, sorted (including those marked for deletion)."""
        return self.store.children_or_empty(layout.TOPICS)

    def topic_exists(self, topic: str) -> bool:
        return self.store.exists(layout.topic_path(topic))

    def read_assignment(self, topic: str) -> Versioned[TopicAssignment]:
        """The replica assignment with its znode version (`UnknownTopicError` if missing)."""
        found = self.store.read_optional(layout.topic_path(topic))
        if found is None:
            raise UnknownTopicError(
                f"topic {topic!r} does not exist in cluster {self.store.cluster!r}: create it "
                f"first, or check the name (list_topics() lists them)"
            )
        return Versioned(TopicAssignment.from_json(found.value), found.version)

    def assign_topic_id(self, topic: str) -> Versioned[TopicAssignment]:
        """Give a topic created before topics had ids one (the controller's, as Kafka's
        controller gives one to each topic it finds without); the assignment as it stands
        after. A write conditional on the assignment's version: one that lost a race reads
        the id the winner wrote."""
        for _ in range(_CONFLICT_RETRIES):
            current = self.read_assignment(topic)
            if current.value.topic_id is not None:
                return current
            named = replace(current.value, topic_id=new_topic_id())
            try:
                version = self.store.write(layout.topic_path(topic), named.to_json(),
                                           current.version)
            except StaleVersionError:
                continue
            return Versioned(named, version)
        raise StaleVersionError(f"topic {topic!r}'s assignment kept changing while an id was "
                                "given to it", path=layout.topic_path(topic))

    def read_config(self, topic: str) -> Versioned[dict[str, str]]:
        """The topic's config overrides with the znode version."""
        found = self.store.read_optional(layout.topic_config_path(topic))
        if found is None:
            self.read_assignment(topic)  # UnknownTopicError if the topic is missing too
            return Versioned({}, -1)
        return Versioned(dict((found.value or {}).get("config", {})), found.version)

    def topics_marked_for_deletion(self) -> list[str]:
        return self.store.children_or_empty(layout.DELETE_TOPICS)

    def describe_topic(self, topic: str) -> TopicDescription:
        """Assignment, config and partition states (None where the controller has not written)."""
        assignment = self.read_assignment(topic)
        return TopicDescription(
            name=topic,
            assignment=assignment,
            config=self.read_config(topic).value,
            states=self.partition_states.read_partition_states(
                topic, assignment.value.partitions
            ),
            marked_for_deletion=self.store.exists(layout.delete_topic_path(topic)),
        )

    # --- change ---------------------------------------------------------------------------------

    def alter_config(
        self, topic: str, updates: Mapping[str, object | None]
    ) -> Versioned[dict[str, str]]:
        """Set config overrides (a value of None removes the override); return the result.

        A read-modify-write conditional on the version read, retried if someone else changed
        the config meanwhile, so concurrent changes of different keys are all kept.
        """
        for _ in range(_CONFLICT_RETRIES):
            current = self.read_config(topic)
            config = normalise_config(merge_config(current.value, updates))
            path = layout.topic_config_path(topic)
            try:
                if current.version < 0:
                    self.store.create(path, topic_config_json(config))
                    return Versioned(config, 0)
                version = self.store.write(path, topic_config_json(config), current.version)
                return Versioned(config, version)
            except (StaleVersionError, ZNodeExistsError):
                continue
        raise StaleVersionError(
            f"the config of topic {topic!r} kept changing under us: try again",
            path=layout.topic_config_path(topic),
        )

    def add_partitions(
        self,
        topic: str,
        new_assignment: ReplicaAssignment,
        *,
        expected_version: int | None = None,
    ) -> Versioned[TopicAssignment]:
        """Grow a topic to `new_assignment`: the full assignment, or only the new partitions.

        Existing partitions keep their replicas; new ones must follow them without gaps. The
        write is conditional on `expected_version` (or on the version read now):
        `StaleVersionError` if the assignment changed meanwhile. Shrinking, or adding nothing,
        raises `InvalidPartitionsError`: Kafka never removes partitions.
        """
        current = self.read_assignment(topic)
        if expected_version is not None and expected_version != current.version:
            raise StaleVersionError(
                f"topic {topic!r}'s assignment is at version {current.version}, not "
                f"{expected_version}: read it again and decide afresh",
                path=layout.topic_path(topic),
                expected_version=expected_version,
            )
        new = (
            new_assignment.partitions
            if isinstance(new_assignment, TopicAssignment)
            else new_assignment
        )
        old = current.value.partitions
        combined = dict(old)
        for partition, replicas in new.items():
            if partition in old:
                if tuple(replicas) != old[partition]:
                    raise InvalidReplicaAssignmentError(
                        f"add_partitions cannot move existing partition {topic}-{partition} "
                        f"from {list(old[partition])} to {list(replicas)}: reassign it separately"
                    )
            else:
                combined[partition] = tuple(replicas)
        if len(combined) == len(old):
            requested = max(new, default=-1) + 1
            raise InvalidPartitionsError(
                f"topic {topic!r} has {len(old)} partitions and the request adds none "
                f"(asked for {requested}): the number of partitions can only grow, never shrink"
            )
        normal = replace(validate_assignment(combined), topic_id=current.value.topic_id)
        version = self.store.write(layout.topic_path(topic), normal.to_json(), current.version)
        return Versioned(normal, version)

    def add_partitions_auto(
        self, topic: str, total_partitions: int
    ) -> Versioned[TopicAssignment]:
        """Grow a topic to `total_partitions`, assigning the new ones over the live brokers."""
        current = self.read_assignment(topic)
        count = current.value.partition_count
        if total_partitions <= count:
            raise InvalidPartitionsError(
                f"topic {topic!r} has {count} partitions; asked for {total_partitions}: the "
                f"number of partitions can only grow, never shrink"
            )
        brokers = {b: info.rack for b, info in read_brokers(self.store).items()}
        new = assign_replicas(
            brokers,
            total_partitions - count,
            current.value.replication_factor,
            first_partition=count,
            existing=current.value.partitions,
        )
        return self.add_partitions(topic, new, expected_version=current.version)

    # --- delete ---------------------------------------------------------------------------------

    def request_topic_deletion(self, topic: str) -> None:
        """Ask the controller to delete a topic (`/admin/delete_topics/<t>`); idempotent."""
        if not self.topic_exists(topic):
            raise UnknownTopicError(
                f"topic {topic!r} does not exist in cluster {self.store.cluster!r}: nothing to "
                f"delete"
            )
        with contextlib.suppress(ZNodeExistsError):
            self.store.create(layout.delete_topic_path(topic))

    def delete_topic_znodes(self, topic: str, *, fence: ControllerFence | None = None) -> None:
        """Remove a topic's znodes: states, assignment, config and deletion request (one multi-op).

        Used by the controller once the topic's replicas are deleted; idempotent. With a `fence`
        it fails with `ControllerMovedError` if this is no longer the controller.
        """
        for _ in range(_CONFLICT_RETRIES):
            paths = self._topic_znodes(topic)
            if not paths:
                return
            transaction = self.store.transaction()
            add_fence(transaction, fence)
            for path in paths:
                transaction.delete(path)
            try:
                commit_fenced(self.store, transaction, fence)
                return
            except (ZNodeMissingError, ZNodeNotEmptyError):
                continue  # a partition added or a znode removed meanwhile: list again
        raise StaleVersionError(f"the znodes of topic {topic!r} kept changing: try again")

    def _topic_znodes(self, topic: str) -> list[str]:
        """Every znode of a topic, children before parents."""
        paths: list[str] = []
        topic_path = layout.topic_path(topic)
        if self.store.exists(topic_path):
            partitions_path = layout.topic_partitions_path(topic)
            for partition in self.store.children_or_empty(partitions_path):
                partition_path = f"{partitions_path}/{partition}"
                paths.extend(f"{partition_path}/{c}" for c in self.store.children_or_empty(
                    partition_path
                ))
                paths.append(partition_path)
            if self.store.exists(partitions_path):
                paths.append(partitions_path)
            paths.append(topic_path)
        for path in (layout.topic_config_path(topic), layout.delete_topic_path(topic)):
            if self.store.exists(path):
                paths.append(path)
        return paths

    # --- reassignment ---------------------------------------------------------------------------

    def read_reassignment(self) -> Versioned[Reassignment] | None:
        """The reassignment in progress (what is left of it), None if there is none."""
        found = self.store.read_optional(layout.REASSIGN_PARTITIONS)
        if found is None:
            return None
        return Versioned(parse_reassignment(found.value), found.version)

    def request_reassignment(self, targets: Mapping[PartitionKey, Sequence[int]]) -> None:
        """Ask the controller to move replicas, as `kafka-reassign-partitions --execute` does.

        Checked first, as Kafka's tool checks: every partition exists, every broker is
        registered, no broker twice in a partition, at least one replica. The replication factor
        may change. `ReassignmentInProgressError` while an earlier request is not finished.
        """
        if not targets:
            raise InvalidReplicaAssignmentError("the reassignment names no partitions")
        live = set(read_brokers(self.store))
        normal: Reassignment = {}
        for key, replicas in targets.items():
            tp = TopicPartition(*key)
            replicas = tuple(int(b) for b in replicas)
            assignment = self.read_assignment(tp.topic).value  # UnknownTopicError
            if tp.partition not in assignment.partitions:
                raise UnknownTopicOrPartitionError(
                    f"topic {tp.topic!r} has no partition {tp.partition} (it has "
                    f"{assignment.partition_count}): reassign partitions that exist"
                )
            if not replicas:
                raise InvalidReplicaAssignmentError(
                    f"{tp.topic}-{tp.partition} would have no replicas: name at least one broker")
            if len(set(replicas)) != len(replicas):
                raise InvalidReplicaAssignmentError(
                    f"{tp.topic}-{tp.partition} lists a broker twice: {list(replicas)}; each "
                    f"replica must be on a different broker"
                )
            unknown = sorted(set(replicas) - live)
            if unknown:
                raise UnknownBrokerError(
                    f"{tp.topic}-{tp.partition} names brokers {unknown} that are not "
                    f"registered (live: {sorted(live)}): start them first (`rafka brokers add`)"
                )
            normal[tp] = replicas
        try:
            self.store.create(layout.REASSIGN_PARTITIONS, reassignment_json(normal))
        except ZNodeExistsError:
            pending = self.read_reassignment()
            left = sorted(f"{tp.topic}-{tp.partition}" for tp in (pending.value if pending else {}))
            raise ReassignmentInProgressError(
                f"a partition reassignment is in progress ({', '.join(left) or 'finishing'}): "
                f"wait until it is done (`rafka reassign --verify`), then try again"
            ) from None

    def complete_reassignment(
        self, partitions: Iterable[TopicPartition], *, fence: ControllerFence | None = None
    ) -> Reassignment:
        """The controller's: drop finished partitions from the request, deleting the znode when
        nothing is left; returns what is left. Conditional on the version read, and fenced."""
        done = set(partitions)
        for _ in range(_CONFLICT_RETRIES):
            current = self.read_reassignment()
            if current is None:
                return {}
            left = {tp: r for tp, r in current.value.items() if tp not in done}
            transaction = self.store.transaction()
            add_fence(transaction, fence)
            if left:
                transaction.set_data(layout.REASSIGN_PARTITIONS, encode(reassignment_json(left)),
                                     current.version)
            else:
                transaction.delete(layout.REASSIGN_PARTITIONS, current.version)
            try:
                commit_fenced(self.store, transaction, fence)
                return left
            except (StaleVersionError, ZNodeMissingError) as error:
                if isinstance(error, StaleVersionError) and error.path == layout.CONTROLLER_EPOCH:
                    raise
                continue
        raise StaleVersionError("the reassignment request kept changing: try again",
                                path=layout.REASSIGN_PARTITIONS)

    def write_partition_replicas(
        self,
        topic: str,
        partition: int,
        replicas: Sequence[int],
        *,
        fence: ControllerFence | None = None,
    ) -> Versioned[TopicAssignment]:
        """The controller's: set one partition's replicas (reassignment), leaving the others.

        A read-modify-write conditional on the assignment's version (retried if partitions were
        added meanwhile) and fenced. Not `validate_assignment`: mid-reassignment a partition
        has more replicas than the others, as in Kafka.
        """
        path = layout.topic_path(topic)
        for _ in range(_CONFLICT_RETRIES):
            current = self.read_assignment(topic)
            partitions = dict(current.value.partitions)
            if partition not in partitions:
                raise UnknownTopicOrPartitionError(f"topic {topic!r} has no partition {partition}")
            partitions[partition] = tuple(replicas)
            new = replace(current.value, partitions=partitions)
            transaction = self.store.transaction()
            add_fence(transaction, fence)
            transaction.set_data(path, encode(new.to_json()), current.version)
            try:
                results = commit_fenced(self.store, transaction, fence)
            except StaleVersionError as error:
                if error.path == layout.CONTROLLER_EPOCH:
                    raise
                continue
            return Versioned(new, int(results[-1].version))  # type: ignore[attr-defined]
        raise StaleVersionError(f"the assignment of topic {topic!r} kept changing: try again",
                                path=path)
