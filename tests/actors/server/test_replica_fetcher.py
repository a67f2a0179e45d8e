"""The follower's fetch loop with its leader host as a plain object (the actor-call transport
with a scripted leader): no Ray, no ZooKeeper. A fetcher is the only thing that fetches its
partitions, so no error may end it, and `describe_fetching` says how its fetching goes."""

from __future__ import annotations

import asyncio
import dataclasses
from pathlib import Path
from typing import Any

from rafka.actors.config import BrokerConfig
from rafka.actors.messages import (
    ErrorReply,
    FetchedRecords,
    LeaderAndIsrRequest,
    ReplicaFetchAnswer,
    ReplicaFetchResponse,
)
from rafka.actors.server.replica import FOLLOWER, PartitionReplica
from rafka.actors.server.replica_fetcher import ReplicaFetcher
from rafka.common.topic_partition import TopicPartition
from rafka.common.waiting import wait_within
from rafka.logstore.batch import build_batch

CONFIG = BrokerConfig.from_dict({"replica.fetch.transport": "ray",
                                 "replica.fetch.backoff.ms": 10})


class ScriptedLeader:
    """A leader host whose fetch answers come from `answers`, one per fetch; once they run out
    it answers nothing new (after a short wait, as a leader holding a fetch would)."""

    def __init__(self, *answers: ReplicaFetchResponse | ErrorReply) -> None:
        self.answers = list(answers)
        self.fetches = 0
        self.replica_fetch = self  # called as `leader.replica_fetch.remote(...)`

    async def remote(self, *_arguments: Any) -> ReplicaFetchResponse | ErrorReply:
        self.fetches += 1
        if self.answers:
            return self.answers.pop(0)
        await asyncio.sleep(0.01)
        return ReplicaFetchResponse([])


def follower(tmp_path: Path) -> PartitionReplica:
    replica = PartitionReplica("orders", 0, 1, tmp_path, {}, CONFIG, _no_isr_writes)
    replica.leader_and_isr(LeaderAndIsrRequest(
        topic="orders", partition=0, leader=2, leader_epoch=0, isr=(1, 2), replicas=(1, 2),
        controller_epoch=1, zk_version=1, leader_host="host-2"))
    assert replica.role == FOLLOWER
    return replica


async def _no_isr_writes(*_arguments: Any) -> Any:
    raise AssertionError("a follower writes no ISR")


def records(count: int) -> FetchedRecords:
    batch = build_batch([(None, f"r{i}".encode()) for i in range(count)])
    return FetchedRecords(batch, count, count, 0, count)


def test_a_fetcher_survives_a_bug_in_applying_an_answer_and_fetches_on(tmp_path: Path) -> None:
    async def scenario() -> None:
        replica = follower(tmp_path)
        # An answer for a partition that is not a (topic, partition) pair this process knows
        # how to apply: applying it raises, which no fetch error handler expects.
        broken = ReplicaFetchResponse([ReplicaFetchAnswer("orders", 0, 0, "not a reply")])
        leader = ScriptedLeader(broken, ReplicaFetchResponse(
            [ReplicaFetchAnswer("orders", 0, 0, records(3))]))

        async def handle(_name: str) -> ScriptedLeader:
            return leader

        fetcher = ReplicaFetcher("host-2", 1, CONFIG, handle, lambda *_: None)
        fetcher.add(replica)
        while replica.log.log_end_offset < 3:
            await wait_within(asyncio.sleep(0.01), 5)
        state = fetcher.describe_fetching(TopicPartition("orders", 0))
        assert state is not None
        assert state["fetcher_running"] and state["last_error"] is None, state
        assert state["records_s_ago"] is not None and state["leader_host"] == "host-2"
        assert leader.fetches >= 2
        fetcher.stop()
        replica.release()

    asyncio.run(asyncio.wait_for(scenario(), 30))


def test_a_resend_naming_the_leaders_host_is_taken_at_the_same_epoch(tmp_path: Path) -> None:
    """The leader's host is the broker's reading of the leader's registration, not partition
    state: a follower first told none (the leader not registered yet) takes the host a resend
    at the same epoch names."""
    replica = PartitionReplica("orders", 0, 1, tmp_path, {}, CONFIG, _no_isr_writes)
    request = LeaderAndIsrRequest(topic="orders", partition=0, leader=2, leader_epoch=0,
                                  isr=(1, 2), replicas=(1, 2), controller_epoch=1, zk_version=1)
    assert replica.leader_and_isr(request) is None
    assert replica.role == FOLLOWER and replica.leader_host is None
    assert replica.leader_and_isr(dataclasses.replace(request, leader_host="host-2")) is None
    assert replica.role == FOLLOWER and replica.leader_host == "host-2"
    replica.release()
