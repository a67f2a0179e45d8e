"""The replica's and the host's collaborators that need no Ray and no ZooKeeper: a leader's
answers from its log (`leader_reads`), the host's log maintenance and config changes
(`host_maintenance`), its fetch sessions (`FetchSessionCache`) and offset managers."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from rafka.actors.config import BrokerConfig
from rafka.actors.errors import ErrorCode, code_of
from rafka.actors.messages import (
    DeletedRecords,
    EpochEndOffset,
    ErrorReply,
    FetchedRecords,
    IsrWritten,
    LeaderAndIsrRequest,
    ListedOffset,
    ProducerDescription,
    TxnMarker,
)
from rafka.actors.offsets_topic import OFFSETS_TOPIC
from rafka.actors.server import leader_reads
from rafka.actors.server.fetch_session import FetchSessionCache
from rafka.actors.server.host_maintenance import HostMaintenance, maintain_log
from rafka.actors.server.isr_manager import IsrPartition
from rafka.actors.server.offset_manager import OffsetManagers
from rafka.actors.server.replica import LEADER, PartitionReplica
from rafka.common.sentinels import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP
from rafka.common.topic_partition import TopicPartition
from rafka.logstore.batch import build_batch


async def _never_written(_replica: IsrPartition, _isr: list[int]) -> IsrWritten | ErrorReply:
    raise AssertionError("no ISR change expected")


def replica_of(tmp_path: Path, *, leader: int = 1, topic: str = "orders",
               config: dict[str, Any] | None = None) -> PartitionReplica:
    """A replica of broker 1, the only one in its partition's ISR, led by `leader`."""
    replica = PartitionReplica(topic, 0, 1, tmp_path, config or {}, BrokerConfig.from_dict({}),
                               _never_written)
    reply = replica.leader_and_isr(LeaderAndIsrRequest(
        topic=topic, partition=0, leader=leader, leader_epoch=2, isr=(1,), replicas=(1,),
        controller_epoch=1, zk_version=0))
    assert reply is None, reply
    return replica


def append(replica: PartitionReplica, count: int) -> None:
    for index in range(count):
        info = replica.append_as_leader(build_batch([(None, b"v%d" % index)]))
        assert not isinstance(info, ErrorReply), info
        replica.advance_high_watermark()


def test_a_leader_answers_its_offsets_and_a_follower_refuses(tmp_path: Path) -> None:
    replica = replica_of(tmp_path)
    append(replica, 3)
    assert replica.log.high_watermark == 3
    assert leader_reads.list_offsets(replica, EARLIEST_TIMESTAMP) == ListedOffset(0, -1, 2)
    assert leader_reads.list_offsets(replica, LATEST_TIMESTAMP) == ListedOffset(3, -1, 2)
    assert leader_reads.offsets_for_leader_epoch(replica, 2) == EpochEndOffset(2, 3)
    assert code_of(leader_reads.offsets_for_leader_epoch(
        replica, 2, current_leader_epoch=1)) == ErrorCode.FENCED_LEADER_EPOCH
    assert leader_reads.describe_producer(replica, 42) == ProducerDescription(-1, -1, -1, 3)
    assert leader_reads.active_producers(replica) == {"producers": []}
    read = leader_reads.read(replica, 0, 1 << 20, follower=False)
    assert isinstance(read, FetchedRecords) and read.next_offset == 3
    assert leader_reads.describe(replica)["high_watermark"] == 3
    replica.release()
    follower = replica_of(tmp_path / "follower", leader=2)
    for refused in (leader_reads.list_offsets(follower, LATEST_TIMESTAMP),
                    leader_reads.read(follower, 0, 100, follower=True),
                    leader_reads.delete_records(follower, 0)):
        assert isinstance(refused, ErrorReply)
        assert refused.code == ErrorCode.NOT_LEADER_OR_FOLLOWER and refused.leader == 2
    follower.release()


def test_delete_records_stops_at_the_high_watermark(tmp_path: Path) -> None:
    replica = replica_of(tmp_path)
    append(replica, 4)
    assert code_of(leader_reads.delete_records(replica, 5)) == ErrorCode.OFFSET_OUT_OF_RANGE
    assert leader_reads.delete_records(replica, 2) == DeletedRecords(2)
    assert leader_reads.delete_records(
        replica, leader_reads.HIGH_WATERMARK_OFFSET) == DeletedRecords(4)
    replica.release()


def test_a_config_change_brings_the_log_maintenance_forward(tmp_path: Path) -> None:
    replica = replica_of(tmp_path)
    maintenance = HostMaintenance({replica.tp: replica}, BrokerConfig.from_dict({}),
                                  FetchSessionCache())
    queued = replica.next_maintenance_ms
    maintenance.update_config(replica, {})  # the same config: nothing to do
    assert replica.next_maintenance_ms == queued
    maintenance.update_config(replica, {"min.insync.replicas": 2})
    assert replica.config.min_insync_replicas == 2 and replica.next_maintenance_ms < queued
    due = replica.next_maintenance_ms
    maintain_log(replica, due)
    assert replica.next_maintenance_ms > due  # done, and the next turn queued
    replica.release()


def test_an_early_wake_wakes_the_session_that_comes_after_it() -> None:
    sessions = FetchSessionCache()
    sessions.wake(2, 7)  # before its full fetch
    session = sessions.open(2, 7)
    assert session.woken
    tp = TopicPartition("orders", 0)
    sessions.watchers.setdefault(tp, set()).add(session)
    session.members.add(tp)
    # A new full fetch replaces the session, and answers at once for the wake it had not.
    again = sessions.open(2, 7)
    assert again is not session and again.woken and tp not in sessions.watchers
    assert sessions.sessions == {(2, 7): again}
    sessions.close(again)
    assert sessions.sessions == {}


def test_offset_managers_follow_the_offsets_topic_leaders(tmp_path: Path) -> None:
    async def scenario() -> None:
        managers = OffsetManagers(broker_id=1)
        assert code_of(managers.get(0)) == ErrorCode.NOT_LEADER_OR_FOLLOWER
        other = replica_of(tmp_path / "orders")
        managers.role_changed(other)
        assert managers.by_partition == {}
        offsets = replica_of(tmp_path / "offsets", topic=OFFSETS_TOPIC)
        assert offsets.role == LEADER
        managers.role_changed(offsets)
        assert not isinstance(managers.get(0), ErrorReply)
        managers.marker_written(TxnMarker(OFFSETS_TOPIC, 0, 5, 0, True, 0), None)
        managers.stopped(OFFSETS_TOPIC, 0)
        assert managers.by_partition == {}
        other.release()
        offsets.release()

    asyncio.run(scenario())
