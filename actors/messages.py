"""The typed messages that rafka's actors send each other, and the roles a replica can take.

Everything here travels between Ray actors of one cluster (Ray pickles it; nothing from outside
the cluster is ever unpickled). Hot-path requests are NamedTuples, which cost no more to send
than the plain tuples they are; replies stay plain dicts with Kafka's error codes
(`rafka.actors.errors`), since `raise_for` reads them the same way wherever they come from.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, NamedTuple

from rafka.common.topic_partition import TopicPartition
from rafka.coordination.models import BrokerInfo


class ReplicaRole(str, Enum):
    LEADER = "leader"
    FOLLOWER = "follower"
    OFFLINE = "offline"

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True)
class LeaderAndIsrRequest:
    """The controller's word on one partition, as its broker hands it to the replica's host."""

    topic: str
    partition: int
    leader: int
    leader_epoch: int
    isr: tuple[int, ...]
    replicas: tuple[int, ...]
    controller_epoch: int
    zk_version: int = -1
    # The name of the leader's replica-host actor, where a follower fetches from.
    leader_host: str | None = None
    config: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_controller(
        cls, entry: dict[str, Any], controller_epoch: int, leader_host: str | None
    ) -> LeaderAndIsrRequest:
        return cls(
            topic=entry["topic"],
            partition=entry["partition"],
            leader=entry["leader"],
            leader_epoch=entry["leader_epoch"],
            isr=tuple(entry["isr"]),
            replicas=tuple(entry["replicas"]),
            controller_epoch=controller_epoch,
            zk_version=entry.get("zk_version", -1),
            leader_host=leader_host,
            config=dict(entry.get("config") or {}),
        )


class PartitionProduce(NamedTuple):
    """One partition's share of a produce request: record batches, as bytes; and, for a
    batch encoded from columns, where each of its records ends (`RecordsPayload.record_ends`),
    which spares the leader decoding them to check them."""

    topic: str
    partition: int
    records: bytes
    record_ends: bytes | None = None


class PartitionFetch(NamedTuple):
    """One partition's share of a consumer's fetch request."""

    topic: str
    partition: int
    offset: int
    max_bytes: int


class ReplicaFetchPartition(NamedTuple):
    """One partition's share of a follower host's fetch: where the follower's log ends, the
    leader epoch it follows (a leader of another epoch refuses it), and the high watermark it
    knows: a partition with no records and no news about its high watermark is left out of the
    answer, as in Kafka's incremental fetch sessions (KIP-227), so an idle fetch costs little
    however many partitions it carries."""

    topic: str
    partition: int
    offset: int
    leader_epoch: int
    high_watermark: int


class EpochQuery(NamedTuple):
    """OffsetsForLeaderEpoch for one partition: where does `epoch` end on the leader?"""

    topic: str
    partition: int
    epoch: int
    current_leader_epoch: int


# ListOffsets' special timestamps, as Kafka's ListOffsetsRequest names them.


class OffsetQuery(NamedTuple):
    """ListOffsets for one partition: EARLIEST_TIMESTAMP, LATEST_TIMESTAMP or a timestamp;
    `read_committed`: as a read_committed consumer sees the partition (up to its last stable
    offset, not its high watermark)."""

    topic: str
    partition: int
    timestamp_ms: int
    read_committed: bool = False


class ProducerQuery(NamedTuple):
    """DescribeProducers for one partition and one producer id: what its leader holds of the
    producer (epoch, last sequence and where that batch lies)."""

    topic: str
    partition: int
    producer_id: int


class RecordsDeletion(NamedTuple):
    """DeleteRecords for one partition: every record before `offset` goes (-1: before the high
    watermark)."""

    topic: str
    partition: int
    offset: int


class IsrChange(NamedTuple):
    """A leader's ISR change, written by its broker with a conditional ZooKeeper write."""

    topic: str
    partition: int
    leader: int
    leader_epoch: int
    isr: tuple[int, ...]
    controller_epoch: int
    zk_version: int


# ------------------------------------------------------------------------------ replies
#
# A partition's answer on the produce and fetch paths is one of these when it succeeded, and an
# error reply (`rafka.actors.errors.error_reply`, a dict with Kafka's error code) when it did
# not: `raise_for` returns the first as it is and raises the second as its typed error.


class Appended(NamedTuple):
    """A produce request's answer for one partition whose records were written (and, with
    acks=all, replicated to the ISR): their offsets."""

    base_offset: int
    last_offset: int
    log_append_time: int
    """The time the leader stamped (LogAppendTime topics), else -1."""
    log_start_offset: int


class FetchedRecords(NamedTuple):
    """A fetch's answer for one partition that could be read: whole batches from the offset
    asked (maybe none), and where the log stands."""

    records: bytes
    next_offset: int
    """The offset to fetch from next: after the last record sent, or the offset asked."""
    high_watermark: int
    log_start_offset: int
    log_end_offset: int
    last_stable_offset: int = -1
    """Where a `read_committed` reader stops (-1 in a follower's fetch, which does not ask)."""
    aborted_transactions: tuple[tuple[int, int], ...] = ()
    """For a `read_committed` read: `(producer_id, first_offset)` of each aborted transaction
    with records among those sent, as Kafka's Fetch answers them."""


class TxnMarker(NamedTuple):
    """A commit or abort marker the transaction coordinator has a partition's leader write
    (Kafka's WriteTxnMarkers entry, for one partition)."""

    topic: str
    partition: int
    producer_id: int
    producer_epoch: int
    committed: bool
    coordinator_epoch: int


class TableRead(NamedTuple):
    """What a host's `read_table` read of one partition, beside the table it returned: records
    up to `next_offset` are in it; `error` (an error reply) if the read could not start, for
    example on a replica that is not the leader."""

    rows: int
    next_offset: int
    high_watermark: int
    log_start_offset: int
    error: dict[str, Any] | None = None
    size_bytes: int = 0
    """The table's size in memory (Ray Data's block metadata)."""


class ReplicaFetchAnswer(NamedTuple):
    """A leader host's answer to a follower host for one partition of its fetch session: the
    fetch offset it was read for, so that a follower that truncated meanwhile drops it."""

    topic: str
    partition: int
    fetch_offset: int
    reply: FetchedRecords | dict[str, Any]


@dataclass(frozen=True)
class PartitionMetadata:
    """One partition as the controller last wrote it."""

    leader: int
    leader_epoch: int
    isr: tuple[int, ...]
    replicas: tuple[int, ...]
    zk_version: int

    def newer_than(self, other: PartitionMetadata) -> bool:
        return (self.leader_epoch, self.zk_version) >= (other.leader_epoch, other.zk_version)


@dataclass(frozen=True)
class UpdateMetadataRequest:
    """The controller's word on the cluster: every live broker, and the partitions it changed
    (every partition of every topic, when `full`)."""

    controller_id: int
    controller_epoch: int
    brokers: Mapping[int, BrokerInfo]
    partitions: Mapping[TopicPartition, PartitionMetadata] = field(default_factory=dict)
    deleted_topics: tuple[str, ...] = ()
    full: bool = False
