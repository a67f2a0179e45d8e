"""A leader's ISR writes, with the writer (the broker's ZooKeeper write) as a plain callback: no
Ray, no ZooKeeper. A write ZooKeeper did not answer is asked for again; a refused one makes the
leader step down until the controller speaks."""

from __future__ import annotations

import asyncio
from pathlib import Path

from rafka.actors.config import BrokerConfig
from rafka.actors.errors import ErrorCode, error_reply
from rafka.actors.messages import ErrorReply, IsrWritten, LeaderAndIsrRequest
from rafka.actors.server.isr_manager import IsrPartition
from rafka.actors.server.replica import LEADER, OFFLINE, PartitionReplica
from rafka.logstore.batch import build_batch


class ScriptedWriter:
    """Answers each ISR write with the next reply of its script, and records what was asked."""

    def __init__(self, *replies: IsrWritten | ErrorReply) -> None:
        self.replies = list(replies)
        self.asked: list[list[int]] = []

    async def __call__(self, _replica: IsrPartition, isr: list[int]) -> IsrWritten | ErrorReply:
        self.asked.append(isr)
        return self.replies.pop(0)


def leader(tmp_path: Path, writer: ScriptedWriter) -> PartitionReplica:
    replica = PartitionReplica("orders", 0, 1, tmp_path, {}, BrokerConfig.from_dict({}), writer)
    reply = replica.leader_and_isr(LeaderAndIsrRequest(
        topic="orders", partition=0, leader=1, leader_epoch=3, isr=(1, 2, 3),
        replicas=(1, 2, 3), controller_epoch=1, zk_version=7))
    assert reply is None and replica.role == LEADER, reply
    return replica


async def shrink(replica: PartitionReplica) -> None:
    replica.isr_manager.change_isr({1, 2}, "shrink")
    while replica.isr_manager.write_in_flight is not None:
        await asyncio.sleep(0)


def test_an_unanswered_isr_write_keeps_the_leader_and_the_old_isr_until_written(
    tmp_path: Path,
) -> None:
    async def scenario() -> None:
        writer = ScriptedWriter(
            error_reply(ErrorCode.REQUEST_TIMED_OUT, "ZooKeeper did not answer"),
            IsrWritten(8))
        replica = leader(tmp_path, writer)
        await shrink(replica)
        # Not written: still the leader, with the ISR ZooKeeper has.
        assert replica.role == LEADER and replica.isr == (1, 2, 3)
        await shrink(replica)
        assert writer.asked == [[1, 2], [1, 2]]
        assert replica.role == LEADER and replica.isr == (1, 2) and replica.zk_version == 8
        replica.release()

    asyncio.run(scenario())


def test_a_refused_isr_write_makes_the_leader_step_down(tmp_path: Path) -> None:
    async def scenario() -> None:
        writer = ScriptedWriter(
            error_reply(ErrorCode.NOT_LEADER_OR_FOLLOWER, "the partition state moved"))
        replica = leader(tmp_path, writer)
        await shrink(replica)
        assert replica.role == OFFLINE and replica.isr == (1, 2, 3)
        replica.release()

    asyncio.run(scenario())


def test_followers_an_unanswered_expansion_adds_hold_the_high_watermark(tmp_path: Path) -> None:
    """The expansion may have landed in ZooKeeper without an answer, and the controller may elect
    its new member: until a write is confirmed, no record that member lacks is acknowledged."""
    async def scenario() -> None:
        writer = ScriptedWriter(
            error_reply(ErrorCode.REQUEST_TIMED_OUT, "ZooKeeper did not answer"),
            IsrWritten(8))
        replica = PartitionReplica("orders", 0, 1, tmp_path, {}, BrokerConfig.from_dict({}),
                                   writer)
        replica.leader_and_isr(LeaderAndIsrRequest(
            topic="orders", partition=0, leader=1, leader_epoch=3, isr=(1, 2),
            replicas=(1, 2, 3), controller_epoch=1, zk_version=7))
        isr = replica.isr_manager
        isr.record_follower_fetch(2, 0)
        isr.record_follower_fetch(3, 0)  # caught up: asks ZooKeeper to add broker 3
        while isr.write_in_flight is not None:
            await asyncio.sleep(0)
        assert writer.asked == [[1, 2, 3]] and replica.isr == (1, 2)
        replica.log.append_as_leader(build_batch([(None, b"x")]), replica.leader_epoch)
        isr.record_follower_fetch(2, 1)  # broker 2 has it, broker 3 does not
        assert replica.log.high_watermark == 0
        while isr.write_in_flight is not None or writer.replies:  # the retry, confirmed
            isr.maybe_expand_isr()
            await asyncio.sleep(0)
        assert replica.isr == (1, 2, 3) and replica.log.high_watermark == 0
        isr.record_follower_fetch(3, 1)
        assert replica.log.high_watermark == 1
        replica.release()

    asyncio.run(scenario())
