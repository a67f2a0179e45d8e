"""The `__consumer_offsets` topic, as the clients and the brokers both see it: which partition
holds a group's offsets, how a commit is written to it, and its creation.

The leader of partition `hash(group) % N` of `__consumer_offsets` is the group's offset manager
(Kafka's "offset manager", docs/consumer-groups.md). A commit is one record per partition, keyed
by (group, topic, partition) so that compaction keeps only the newest; a tombstone forgets it.
"""

from __future__ import annotations

import contextlib
import struct
from typing import NamedTuple

import msgpack

from rafka.actors.errors import BrokerUnavailableError
from rafka.coordination.admin import TopicAdmin
from rafka.coordination.errors import TopicExistsError
from rafka.coordination.registration import read_brokers
from rafka.coordination.store import ClusterStore

OFFSETS_TOPIC = "__consumer_offsets"
# Kafka's default is 50. Here each partition replica is an actor process, so 50 partitions at
# replication factor 3 would be 150 processes: 3 spreads the groups' offsets over the brokers.
DEFAULT_OFFSETS_PARTITIONS = 3
OFFSETS_TOPIC_CONFIG = {"cleanup.policy": "compact", "segment.bytes": str(16 * 1024 * 1024)}
# How long a commit (OffsetCommit or TxnOffsetCommit) may wait at its offset manager for its
# records to be replicated, whoever sends it: the Kafka coordinator or rafka's producer.
COMMIT_TIMEOUT_MS = 5000


def java_string_hash(text: str) -> int:
    """Java's `String.hashCode`, which Kafka uses to place a group's offsets."""
    data = text.encode("utf-16-be")  # Java strings are UTF-16 code units
    value = 0
    for unit in struct.unpack(f">{len(data) // 2}H", data):
        value = (31 * value + unit) & 0xFFFFFFFF
    return value - (1 << 32) if value & 0x80000000 else value


def offsets_partition(group: str, num_partitions: int) -> int:
    """The `__consumer_offsets` partition whose leader manages `group` (Kafka's formula)."""
    # Kafka's Utils.abs maps Integer.MIN_VALUE to 0, unlike Math.abs.
    return (java_string_hash(group) & 0x7FFFFFFF) % num_partitions


class OffsetAndMetadata(NamedTuple):
    offset: int
    metadata: str = ""
    commit_timestamp: int = -1
    # The leader epoch of the record at `offset - 1`, as the consumer knew it (-1: unknown).
    leader_epoch: int = -1


def encode_commit(
    group: str, topic: str, partition: int, committed: OffsetAndMetadata | None
) -> tuple[bytes, bytes | None]:
    """The key and value of one commit record; a None value (tombstone) forgets the offset."""
    key = msgpack.packb([1, group, topic, partition])
    if committed is None:
        return key, None
    return key, msgpack.packb([1, committed.offset, committed.metadata,
                               committed.commit_timestamp, committed.leader_epoch])


def decode_commit(
    key: bytes, value: bytes | None
) -> tuple[str, str, int, OffsetAndMetadata | None]:
    """`(group, topic, partition, offset or None)` from a commit record."""
    version, group, topic, partition = msgpack.unpackb(key)
    if version != 1:
        raise ValueError(f"unknown offset commit key version {version}")
    if value is None:
        return group, topic, partition, None
    # Commits written before the leader epoch was kept have four fields.
    _version, offset, metadata, timestamp, *leader_epoch = msgpack.unpackb(value)
    return group, topic, partition, OffsetAndMetadata(offset, metadata, timestamp,
                                                      *leader_epoch[:1])


def ensure_offsets_topic(store: ClusterStore, partitions: int = DEFAULT_OFFSETS_PARTITIONS) -> None:
    """Create `__consumer_offsets` if missing: compacted, replication factor min(3, brokers)."""
    ensure_internal_topic(store, OFFSETS_TOPIC, partitions, OFFSETS_TOPIC_CONFIG)


def ensure_internal_topic(
    store: ClusterStore, topic: str, partitions: int, config: dict[str, str]
) -> None:
    """Create an internal topic (`__…`) if missing, replication factor min(3, brokers)."""
    admin = TopicAdmin(store)
    if admin.topic_exists(topic):
        return
    brokers = len(read_brokers(store))
    if brokers == 0:
        raise BrokerUnavailableError("no broker is registered: start the cluster first")
    with contextlib.suppress(TopicExistsError):  # another member created it first
        admin.create_topic_auto(topic, partitions, min(3, brokers), config)
