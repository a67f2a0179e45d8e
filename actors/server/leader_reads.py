"""What a partition's leader answers from its log without appending: the reads of consumers and
followers, and the offsets and producer queries (Kafka's ListOffsets, OffsetsForLeaderEpoch,
DescribeProducers) and DeleteRecords.

Functions of a `PartitionReplica`, called by its host on the host's event loop (the replica's
own), so that the replica class keeps its role, its produce path and its waits. None of them
waits: a fetch that waits does so in the host, across partitions.
"""

from __future__ import annotations

from typing import Any

from rafka.actors.errors import ErrorCode, error_reply
from rafka.actors.messages import (
    DeletedRecords,
    EpochEndOffset,
    ErrorReply,
    FetchedRecords,
    ListedOffset,
    ProducerDescription,
)
from rafka.actors.server.replica import FOLLOWER, LEADER, PartitionReplica
from rafka.common.clock import wall_clock_ms
from rafka.common.sentinels import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP, UNDEFINED_EPOCH
from rafka.logstore.batch import NO_TIMESTAMP
from rafka.logstore.errors import OffsetOutOfRangeError
from rafka.logstore.log import TimestampAndOffset

# DeleteRecords' offset for "every record below the high watermark".
HIGH_WATERMARK_OFFSET = -1

# ------------------------------------------------------------------------------ reads


def check_leader_epoch(replica: PartitionReplica, leader_epoch: int) -> ErrorReply | None:
    """An error reply if this replica cannot answer a request made at `leader_epoch`."""
    if replica.role != LEADER:
        return replica.not_leader()
    if leader_epoch >= 0 and leader_epoch != replica.leader_epoch:
        code = (
            ErrorCode.FENCED_LEADER_EPOCH
            if leader_epoch < replica.leader_epoch
            else ErrorCode.UNKNOWN_LEADER_EPOCH
        )
        return error_reply(code, f"leader epoch {leader_epoch}, this leader is at "
                                 f"{replica.leader_epoch}", leader=replica.leader_id)
    return None


def read(
    replica: PartitionReplica, offset: int, max_bytes: int, *, follower: bool,
    read_committed: bool = False, followers_answer: bool = False,
) -> FetchedRecords | ErrorReply:
    """Whole batches from `offset`: up to the high watermark for consumers (the last stable
    offset for `read_committed` ones, with the aborted transactions among what is sent),
    up to the log end for followers. Never waits: the host's fetch waits across
    partitions. `followers_answer`: a follower replica answers a consumer too, up to the high
    watermark its leader last told it (KIP-392)."""
    if replica.role != LEADER and not (followers_answer and replica.role == FOLLOWER):
        return replica.not_leader()
    log_ = replica.log
    if follower:
        limit = log_.log_end_offset
    else:
        limit = log_.last_stable_offset if read_committed else log_.high_watermark
    if offset == limit and offset >= log_.log_start_offset:
        # Nothing to read (most fetches of an idle partition): no need to touch the log.
        return nothing_at(replica, offset)
    try:
        data = log_.read(offset, max_bytes, max_offset=None if follower else limit)
    except OffsetOutOfRangeError as error:
        return error_reply(
            ErrorCode.OFFSET_OUT_OF_RANGE, str(error),
            log_start_offset=log_.log_start_offset,
            log_end_offset=log_.log_end_offset,
            high_watermark=log_.high_watermark,
        )
    aborted: tuple[tuple[int, int], ...] = ()
    if read_committed and data.records:
        aborted = tuple((entry.producer_id, entry.first_offset)
                        for entry in log_.aborted_transactions(offset, data.next_offset))
    return FetchedRecords(data.records, data.next_offset, log_.high_watermark,
                          data.log_start_offset, data.log_end_offset,
                          -1 if follower else data.last_stable_offset, aborted)


def nothing_at(replica: PartitionReplica, offset: int) -> FetchedRecords:
    """A fetch reply with no records for `offset`, with where the log stands."""
    log_ = replica.log
    return FetchedRecords(b"", offset, log_.high_watermark, log_.log_start_offset,
                          log_.log_end_offset, log_.last_stable_offset)


# ---------------------------------------------------------------------------- queries


def offsets_for_leader_epoch(replica: PartitionReplica, epoch: int,
                             current_leader_epoch: int = -1) -> EpochEndOffset | ErrorReply:
    """Where `epoch` ends in this leader's log (Kafka's OffsetsForLeaderEpoch)."""
    refused = check_leader_epoch(replica, current_leader_epoch)
    if refused is not None:
        return refused
    found_epoch, end_offset = replica.log.end_offset_for_epoch(epoch)
    return EpochEndOffset(found_epoch, end_offset)


def list_offsets(replica: PartitionReplica, timestamp_ms: int,
                 read_committed: bool = False) -> ListedOffset | ErrorReply:
    """Kafka's ListOffsets: EARLIEST_TIMESTAMP the log start, LATEST_TIMESTAMP the high
    watermark (what a consumer can read; the last stable offset for a read_committed
    one), MAX_TIMESTAMP the record with the largest timestamp, else the first record at
    or after the timestamp; each with its `timestamp` (-1 for the log's ends) and the
    `leader_epoch` it was written in. A record not yet below that bound is not answered
    (`offset` None), as in Kafka."""
    if replica.role != LEADER:
        return replica.not_leader()
    bound = replica.log.last_stable_offset if read_committed else replica.log.high_watermark
    found: TimestampAndOffset | None
    if timestamp_ms == LATEST_TIMESTAMP:
        found = TimestampAndOffset(NO_TIMESTAMP, bound, replica.leader_epoch)
    else:
        found = replica.log.find_offset_by_timestamp(timestamp_ms)
    if found is not None and found.offset >= bound \
            and timestamp_ms != EARLIEST_TIMESTAMP:
        if high_watermark_lags(replica):
            return error_reply(
                ErrorCode.OFFSET_NOT_AVAILABLE,
                f"the leader of {replica.topic}-{replica.partition} (epoch {replica.leader_epoch}) "
                "has records its followers have not yet confirmed, so its high watermark "
                "may be behind the last one: retry",
            )
        if timestamp_ms != LATEST_TIMESTAMP:
            found = None  # only records a consumer may read count
    if found is None:
        return ListedOffset(None, NO_TIMESTAMP, UNDEFINED_EPOCH)
    return ListedOffset(found.offset, found.timestamp, found.leader_epoch)


def describe_producer(replica: PartitionReplica, producer_id: int
                      ) -> ProducerDescription | ErrorReply:
    """Kafka's DescribeProducers for one producer id: its epoch and the last sequence this
    leader's log holds of it, with that batch's last offset and the high watermark, so
    the caller can tell whether the batch is committed yet (-1 where the log has none)."""
    if replica.role != LEADER:
        return replica.not_leader()
    entry = replica.log.producer_state(producer_id)
    last_sequence, last_offset = -1, -1
    if entry is not None:
        # Both come from the newest batch the log remembers of the producer, if any.
        newest_sequence, newest_offset = entry.last_sequence, entry.last_offset
        if newest_sequence is not None and newest_offset is not None:
            last_sequence, last_offset = newest_sequence, newest_offset
    return ProducerDescription(entry.producer_epoch if entry is not None else -1,
                               last_sequence, last_offset, replica.log.high_watermark)


def active_producers(replica: PartitionReplica) -> dict[str, Any] | ErrorReply:
    """Kafka's DescribeProducers for this partition: every producer whose batches this
    leader's log still holds, with its epoch, last sequence and that batch's largest
    timestamp, the coordinator epoch of its last marker, and where its open transaction
    began (-1 for what it has none of)."""
    if replica.role != LEADER:
        return replica.not_leader()
    return {"producers": [
        {"producer_id": entry.producer_id, "producer_epoch": entry.producer_epoch,
         "last_sequence": -1 if entry.last_sequence is None else entry.last_sequence,
         "last_timestamp": entry.batches[-1].max_timestamp if entry.batches else -1,
         "coordinator_epoch": entry.coordinator_epoch,
         "current_txn_start_offset": -1 if entry.current_txn_first_offset is None
         else entry.current_txn_first_offset}
        for entry in sorted(replica.log.producers(), key=lambda entry: entry.producer_id)]}


def delete_records(replica: PartitionReplica, offset: int) -> DeletedRecords | ErrorReply:
    """Kafka's DeleteRecords: move the log start offset up to `offset` (-1: the high
    watermark), deleting the segments wholly below it; the followers move theirs when they
    next fetch (`append_from_leader`). Answers the new log start (`low_watermark`)."""
    if replica.role != LEADER:
        return replica.not_leader()
    target = replica.log.high_watermark if offset == HIGH_WATERMARK_OFFSET else offset
    if not 0 <= target <= replica.log.high_watermark:
        return error_reply(
            ErrorCode.OFFSET_OUT_OF_RANGE,
            f"cannot delete records of {replica.topic}-{replica.partition} before offset "
            f"{offset}: records can be deleted up to the high watermark "
            f"{replica.log.high_watermark} (-1 for all of them)")
    return DeletedRecords(replica.log.delete_records_before(target))


def high_watermark_lags(replica: PartitionReplica) -> bool:
    """Whether this leader's high watermark may be behind what consumers already saw.

    A new leader (or a leader whose host restarted) starts from the high watermark it had
    as a follower or checkpointed, which lags the previous leader's. Only once it passes
    the first offset of this leader's term is it known to be current (Kafka, KIP-207).
    """
    state = replica.leader_state
    return state is not None and state.epoch_start_offset > replica.log.high_watermark


def describe(replica: PartitionReplica) -> dict[str, Any]:
    """The replica as its host sees it; a leader adds what it knows of its followers."""
    facts: dict[str, Any] = {
        "topic": replica.topic,
        "partition": replica.partition,
        "broker": replica.broker_id,
        "role": str(replica.role),
        "leader": replica.leader_id,
        "leader_epoch": replica.leader_epoch,
        "isr": list(replica.isr),
        "log_start_offset": replica.log.log_start_offset,
        "log_end_offset": replica.log.log_end_offset,
        "high_watermark": replica.log.high_watermark,
        "size_bytes": replica.log.size_in_bytes,
    }
    state = replica.leader_state
    if state is not None:
        now_ms = wall_clock_ms()
        facts["epoch_start_offset"] = state.epoch_start_offset
        facts["isr_write_in_flight"] = replica.isr_manager.write_in_flight is not None
        facts["followers"] = {
            str(follower): {
                "log_end_offset": progress.log_end_offset,
                "caught_up_s_ago": (None if not progress.last_caught_up_ms
                                    else round((now_ms - progress.last_caught_up_ms) / 1000, 1)),
                "fetched_s_ago": (None if not progress.last_fetch_ms
                                  else round((now_ms - progress.last_fetch_ms) / 1000, 1)),
                "joining": follower in state.joining,
            }
            for follower, progress in sorted(state.followers.items())
        }
    return facts

