"""The `__consumer_offsets` topic, as the clients and the brokers both see it: which partition
holds a group's offsets, how a commit is written to it, and its creation.

The leader of partition `hash(group) % N` of `__consumer_offsets` is the group's offset manager
(Kafka's "offset manager", docs/consumer-groups.md). A commit is one record per partition, keyed
by (group, topic, partition) so that compaction keeps only the newest; a tombstone forgets it.
The records are in Kafka's format (OffsetCommitKey and OffsetCommitValue), so that tools that
read the topic directly (Burrow, Kafka's OffsetsMessageFormatter, lag exporters) understand
them; those rafka wrote in msgpack before are read too.
"""

from __future__ import annotations

import contextlib
import struct
from typing import NamedTuple

import msgpack

from rafka.actors.errors import BrokerUnavailableError
from rafka.common.coordinator_records import RecordFormatError, RecordReader, RecordWriter
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


# Kafka's record types in `__consumer_offsets` (the int16 that starts a key): versions 0 and 1
# of the key are an offset commit's (OffsetCommitKey), 2 a classic group's metadata
# (GroupMetadataKey), which rafka does not write and skips.
OFFSET_COMMIT_KEY_VERSIONS = (0, 1)
GROUP_METADATA_KEY_VERSION = 2
# The value version written: OffsetCommitValue v3 (the leader epoch, no expire timestamp), the
# newest that is not flexible, which Kafka's brokers and tools of every version since 2.1 read.
OFFSET_COMMIT_VALUE_VERSION = 3
# The first byte of a commit key rafka wrote before it wrote Kafka's format: msgpack's
# four-element array.
_LEGACY_KEY_START = 0x94


def encode_commit(
    group: str, topic: str, partition: int, committed: OffsetAndMetadata | None
) -> tuple[bytes, bytes | None]:
    """The key and value of one commit record, in Kafka's format (OffsetCommitKey v1,
    OffsetCommitValue v3); a None value (tombstone) forgets the offset."""
    key = (RecordWriter().int16(1).string(group).string(topic).int32(partition)).bytes()
    if committed is None:
        return key, None
    return key, (RecordWriter().int16(OFFSET_COMMIT_VALUE_VERSION).int64(committed.offset)
                 .int32(committed.leader_epoch).string(committed.metadata)
                 .int64(committed.commit_timestamp)).bytes()


def legacy_commit_key(group: str, topic: str, partition: int) -> bytes:
    """The key rafka gave a commit before it wrote Kafka's format: a tombstone under it
    removes such a record once a commit in Kafka's format replaces it."""
    return msgpack.packb([1, group, topic, partition])


def is_legacy_commit(key: bytes) -> bool:
    return key[:1] == bytes([_LEGACY_KEY_START])


def decode_commit(
    key: bytes, value: bytes | None
) -> tuple[str, str, int, OffsetAndMetadata | None] | None:
    """`(group, topic, partition, offset or None)` from a commit record, in Kafka's format or
    rafka's earlier msgpack one; None for a record of another kind (a group's metadata).
    `RecordFormatError` for anything else."""
    if is_legacy_commit(key):
        return _decode_legacy(key, value)
    reader = RecordReader(key)
    version = reader.int16()
    if version == GROUP_METADATA_KEY_VERSION:
        return None
    if version not in OFFSET_COMMIT_KEY_VERSIONS:
        raise RecordFormatError(f"__consumer_offsets key of unknown version {version}")
    group, topic, partition = reader.string(), reader.string(), reader.int32()
    reader.end()
    if value is None:
        return group, topic, partition, None
    return group, topic, partition, _decode_offset_value(value)


def _decode_offset_value(value: bytes) -> OffsetAndMetadata:
    """OffsetCommitValue, any of Kafka's versions (0-4)."""
    reader = RecordReader(value)
    version = reader.int16()
    if not 0 <= version <= 4:
        raise RecordFormatError(f"OffsetCommitValue of unknown version {version}")
    offset = reader.int64()
    leader_epoch = reader.int32() if version >= 3 else -1
    metadata = reader.compact_string() if version >= 4 else reader.string()
    timestamp = reader.int64()
    if version == 1:
        reader.int64()  # the expire timestamp, which Kafka no longer keeps
    if version >= 4:
        reader.skip_tagged_fields()
    reader.end()
    return OffsetAndMetadata(offset, metadata, timestamp, leader_epoch)


def _decode_legacy(key: bytes, value: bytes | None
                   ) -> tuple[str, str, int, OffsetAndMetadata | None]:
    try:
        version, group, topic, partition = msgpack.unpackb(key)
        if version != 1:
            raise RecordFormatError(f"unknown offset commit key version {version}")
        if value is None:
            return group, topic, partition, None
        # Commits written before the leader epoch was kept have four fields.
        _version, offset, metadata, timestamp, *leader_epoch = msgpack.unpackb(value)
    except (ValueError, TypeError, msgpack.UnpackException) as error:
        raise RecordFormatError(f"not a commit record: {error}") from None
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
