"""The typed messages that rafka's actors send each other, and the roles a replica can take.

Everything here travels between Ray actors of one cluster (Ray pickles it; nothing from outside
the cluster is ever unpickled), and the data port's frames carry the produce and fetch ones as
msgpack (`rafka.actors.dataport.frames`). Hot-path requests and replies are NamedTuples, which
cost no more to send than the plain tuples they are. A request that fails is answered with an
`ErrorReply` (Kafka's error code), which `rafka.actors.errors.raise_for` raises as its typed
error wherever it comes from.
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
    """The controller's word on one partition (Kafka's LeaderAndIsrPartitionState): who leads
    at which epoch, the ISR, the assignment, the znode version it read them at, and the topic's
    config. The controller sends one per partition to each of its brokers, which names the
    leader's host in it and hands it to the replica's host."""

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
# A request's answer is one of these when it succeeded, and an `ErrorReply` when it did not:
# `raise_for` returns the first as it is and raises the second as its typed error. A request
# with nothing to say when it succeeds (UpdateMetadata, StopReplica, a transaction marker) is
# answered None.


class ErrorReply(NamedTuple):
    """A request refused or failed, with Kafka's error code (`rafka.common.errors.ErrorCode`;
    an int, since a newer broker may send one this process does not know) and what the
    client needs to recover: the partition's leader (NOT_LEADER_OR_FOLLOWER, fenced epochs),
    where the log stands (OFFSET_OUT_OF_RANGE), the sequence the leader expects
    (OUT_OF_ORDER_SEQUENCE_NUMBER)."""

    code: int
    message: str
    leader: int | None = None
    log_start_offset: int = -1
    log_end_offset: int = -1
    high_watermark: int = -1
    expected_sequence: int | None = None


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


class EpochEndOffset(NamedTuple):
    """OffsetsForLeaderEpoch's answer for one partition: the largest epoch at most the one
    asked, and the offset where it ends in the leader's log."""

    leader_epoch: int
    end_offset: int


class ListedOffset(NamedTuple):
    """ListOffsets' answer for one partition: the offset found (None: no record a consumer may
    read yet at that time), its record's timestamp (-1 for the log's ends) and the leader
    epoch it was written in."""

    offset: int | None
    timestamp: int
    leader_epoch: int


class DeletedRecords(NamedTuple):
    """DeleteRecords' answer for one partition: its log start offset now."""

    low_watermark: int


class ProducerDescription(NamedTuple):
    """DescribeProducers' answer for one partition and producer id: the epoch and the last
    sequence its leader's log holds of the producer, that batch's last offset and the high
    watermark, so the caller can tell whether the batch is committed yet (-1 where the log
    has none)."""

    producer_epoch: int
    last_sequence: int
    last_offset: int
    high_watermark: int


class IsrWritten(NamedTuple):
    """A leader's ISR change written to ZooKeeper: the partition state's new znode version."""

    zk_version: int


class PartitionErrors(NamedTuple):
    """A broker's (or a replica host's) answer to the controller's LeaderAndIsr or topic config
    change: the partitions it did not apply, each with why (empty when it applied them all),
    as Kafka's LeaderAndIsrResponse lists its partitions' errors."""

    errors: dict[TopicPartition, ErrorReply]


class CommittedOffset(NamedTuple):
    """One partition's offset a group committed, as its offset manager holds it."""

    topic: str
    partition: int
    offset: int
    metadata: str
    leader_epoch: int | None


class CommittedOffsets(NamedTuple):
    """OffsetFetch's answer: a group's committed offsets (of the partitions asked, if any)."""

    offsets: list[CommittedOffset]


class ProducerIdAndEpoch(NamedTuple):
    """InitProducerId's answer: the producer id and the epoch this instance holds it at."""

    producer_id: int
    producer_epoch: int


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
    error: ErrorReply | None = None
    size_bytes: int = 0
    """The table's size in memory (Ray Data's block metadata)."""


class ReplicaFetchAnswer(NamedTuple):
    """A leader host's answer to a follower host for one partition of its fetch session: the
    fetch offset it was read for, so that a follower that truncated meanwhile drops it."""

    topic: str
    partition: int
    fetch_offset: int
    reply: FetchedRecords | ErrorReply


class ReplicaFetchResponse(NamedTuple):
    """A leader host's answer to a follower host's fetch: the partitions of its session with
    news (records, an error or a new high watermark)."""

    partitions: list[ReplicaFetchAnswer]


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
    # The ids (KIP-516, as text) of the topics of `partitions`.
    topic_ids: Mapping[str, str] = field(default_factory=dict)
