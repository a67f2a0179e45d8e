"""The new consumer group protocol (KIP-848) with librdkafka's consumer
(`group.protocol=consumer`): three members, each a process of its own, join, leave and crash
while a producer writes; every record is read, a partition is owned by one member at a time,
a member joining takes partitions without moving any between the others, and a classic group
reads the same topic beside it."""

from __future__ import annotations

import itertools
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import confluent_kafka
import pytest
from confluent_kafka.admin import AdminClient
from kafka.protocol.admin import DescribeGroupsRequest, ListGroupsRequest
from kafka.protocol.consumer import ConsumerProtocolAssignment, OffsetCommitRequest
from kafka.protocol.metadata import FindCoordinatorRequest, MetadataRequest

from rafka import Cluster
from rafka.actors.errors import ErrorCode
from rafka.wire.consumer_group_messages import (
    ConsumerGroupDescribeRequest,
    ConsumerGroupHeartbeatRequest,
)
from tests.kafka_clients.test_kafka_answers import address_of
from tests.support.cluster import CONSUMER_GROUPS_QUICKLY, fresh
from tests.support.group_member import logged_events, owned_partitions
from tests.support.kafka_wire import KafkaWire
from tests.support.waiting import wait_until

PARTITIONS = 6
REPO = Path(__file__).resolve().parents[2]


class Member:
    """A consumer in its own process (tests/support/group_member.py) and what it logged."""

    def __init__(self, name: str, cluster: Cluster, group: str, topic: str, protocol: str,
                 logs: Path) -> None:
        self.name = name
        self.log = logs / f"{name}.jsonl"
        self.process = subprocess.Popen(
            [sys.executable, "-m", "tests.support.group_member", cluster.bootstrap_servers(),
             group, topic, protocol, str(self.log)],
            stdin=subprocess.PIPE, cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)})
        self.ended_at: float | None = None

    def events(self) -> list[dict[str, Any]]:
        return logged_events(self.log)

    def owned(self) -> set[int]:
        return owned_partitions(self.events()) if self.ended_at is None else set()

    def leave(self) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(b"leave\n")
        self.process.stdin.close()
        self.process.wait(60)
        self.ended_at = time.time()

    def crash(self) -> None:
        os.kill(self.process.pid, signal.SIGKILL)
        self.process.wait(10)
        self.ended_at = time.time()

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait(10)


class Producer:
    """Numbered records, round robin over the partitions, 50 a second, until stopped."""

    def __init__(self, cluster: Cluster, topic: str) -> None:
        self.producer = confluent_kafka.Producer({"bootstrap.servers":
                                                  cluster.bootstrap_servers(), "acks": "all"})
        self.topic, self.sent = topic, 0
        self.running = threading.Event()
        self.running.set()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while self.running.is_set():
            self.producer.produce(self.topic, value=str(self.sent).encode(),
                                  partition=self.sent % PARTITIONS)
            self.sent += 1
            self.producer.poll(0)
            time.sleep(0.02)

    def stop(self) -> int:
        self.running.clear()
        self.thread.join(10)
        assert self.producer.flush(60) == 0
        return self.sent


def ownership_intervals(members: list[Member]) -> dict[int, list[tuple[float, float, str]]]:
    """Per partition, (from, to, member) for every stretch a member owned it; a member that
    ended owned nothing from then on."""
    intervals: dict[int, list[tuple[float, float, str]]] = {p: [] for p in range(PARTITIONS)}
    for member in members:
        since: dict[int, float] = {}
        for event in member.events():
            if event["event"] == "assign":
                for partition in event["partitions"]:
                    since[partition] = event["time"]
            elif event["event"] in ("revoke", "lost"):
                for partition in event["partitions"]:
                    intervals[partition].append((since.pop(partition), event["time"],
                                                 member.name))
        end = member.ended_at if member.ended_at is not None else float("inf")
        for partition, start in since.items():
            intervals[partition].append((start, end, member.name))
    return intervals


def stable(members: list[Member], owners: dict[str, int]) -> bool:
    """Whether each live member owns the number of partitions given, all of them between
    them."""
    owned = {member.name: member.owned() for member in members}
    return (all(len(owned[name]) == count for name, count in owners.items())
            and set().union(*owned.values()) == set(range(PARTITIONS)))


def test_members_join_leave_and_crash_under_a_producer(kafka_cluster: Cluster,
                                                       tmp_path: Path) -> None:
    cluster = kafka_cluster
    topic, group, classic_group = fresh("kip848"), fresh("consumers"), fresh("classic")
    cluster.create_topic(topic, partitions=PARTITIONS, replication_factor=3)
    producer = Producer(cluster, topic)
    members: list[Member] = []
    classic = None
    try:
        a = Member("a", cluster, group, topic, "consumer", tmp_path)
        members.append(a)
        wait_until(lambda: stable(members, {"a": 6}), 60, "a owns every partition")
        classic = Member("classic", cluster, classic_group, topic, "classic", tmp_path)
        b = Member("b", cluster, group, topic, "consumer", tmp_path)
        members.append(b)
        wait_until(lambda: stable(members, {"a": 3, "b": 3}), 60, "a and b share")
        before = {member.name: member.owned() for member in members}
        joined_at = time.time()
        c = Member("c", cluster, group, topic, "consumer", tmp_path)
        members.append(c)
        wait_until(lambda: stable(members, {"a": 2, "b": 2, "c": 2}), 60, "three share")
        # c took two partitions from each, and no partition moved between a and b.
        for member in (a, b):
            assert member.owned() <= before[member.name]
            assigned = [event for event in member.events()
                        if event["event"] == "assign" and event["partitions"]
                        and event["time"] > joined_at]
            assert assigned == [], f"{member.name} was given {assigned} when c joined"
        assert c.owned() == set(range(PARTITIONS)) - a.owned() - b.owned()

        b.leave()
        wait_until(lambda: stable(members[::2], {"a": 3, "c": 3}), 60, "b left")
        c.crash()  # its session runs out (group.consumer.session.timeout.ms)
        wait_until(lambda: stable([a], {"a": 6}), 60, "c's partitions back with a")

        sent = producer.stop()
        read: set[str] = set()

        def every_record_read() -> bool:
            read.update(event["value"] for member in members for event in member.events()
                        if event["event"] == "record")
            return len(read) >= sent
        wait_until(every_record_read, 60, "every record read by the group")
        assert read == {str(n) for n in range(sent)}

        # Each partition had one owner at a time, and every record was read by its owner.
        intervals = ownership_intervals(members)
        for partition, stretches in intervals.items():
            stretches.sort()
            for (_, end, first), (start, _, second) in itertools.pairwise(stretches):
                assert end <= start, f"partition {partition}: {first} and {second} overlap"
        for member in members:
            for event in member.events():
                if event["event"] == "record":
                    assert any(start <= event["time"] <= end and name == member.name
                               for start, end, name in intervals[event["partition"]]), event

        # The classic group read every record beside it.
        def classic_read_all() -> bool:
            assert classic is not None
            return len({event["value"] for event in classic.events()
                        if event["event"] == "record"}) >= sent
        wait_until(classic_read_all, 60, "the classic group read every record")
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers()})
        listed = admin.list_consumer_groups().result(60)
        kinds = {listing.group_id: listing.type for listing in listed.valid}
        assert kinds[group] == confluent_kafka.ConsumerGroupType.CONSUMER
        assert kinds[classic_group] == confluent_kafka.ConsumerGroupType.CLASSIC
        described = admin.describe_consumer_groups([group])[group].result(60)
        assert described.type == confluent_kafka.ConsumerGroupType.CONSUMER
        assert [m.assignment.topic_partitions for m in described.members] and sorted(
            tp.partition for m in described.members
            for tp in m.assignment.topic_partitions) == list(range(PARTITIONS))
    finally:
        if producer.running.is_set():
            producer.stop()
        for member in [*members, *([classic] if classic else [])]:
            member.stop()


def test_a_regex_subscription_takes_topics_created_after_it(kafka_cluster: Cluster,
                                                           tmp_path: Path) -> None:
    """librdkafka sends `^...` subscriptions as a regular expression (ConsumerGroupHeartbeat
    v1), which the coordinator matches against the topics, again as topics are created."""
    cluster = kafka_cluster
    prefix = fresh("matched")
    cluster.create_topic(f"{prefix}-first", partitions=2, replication_factor=1)
    cluster.create_topic(fresh("unmatched"), partitions=1, replication_factor=1)
    member = Member("regex", cluster, fresh("regex"), f"^{prefix}-.*", "consumer", tmp_path)

    def topics() -> set[str]:
        held: set[str] = set()
        for event in member.events():
            if event["event"] == "assign":
                held |= set(event["topics"])
        return held
    try:
        wait_until(lambda: topics() == {f"{prefix}-first"}, 60, "the matching topic")
        cluster.create_topic(f"{prefix}-second", partitions=2, replication_factor=1)
        wait_until(lambda: topics() == {f"{prefix}-first", f"{prefix}-second"}, 60,
                   "the topic created after the subscription")
    finally:
        member.stop()


@pytest.mark.parametrize("protocol_first", ["consumer", "classic"])
def test_a_group_id_is_one_kind_while_it_has_members(kafka_cluster: Cluster, tmp_path: Path,
                                                     protocol_first: str) -> None:
    """A member of the other protocol is refused while the group has members, and takes the
    group (with its committed offsets) once it is empty: Kafka 4.0's conversion of an empty
    group."""
    cluster = kafka_cluster
    topic, group = fresh("kinds"), fresh("kinds")
    cluster.create_topic(topic, partitions=2, replication_factor=1)
    other = "classic" if protocol_first == "consumer" else "consumer"
    first = Member("first", cluster, group, topic, protocol_first, tmp_path)
    try:
        wait_until(lambda: len(first.owned()) == 2, 60, "the first member owns both")
        second = Member("second", cluster, group, topic, other, tmp_path)
        try:
            wait_until(lambda: any(e["event"] == "error" for e in second.events())
                       or second.process.poll() is not None, 60, "the other kind refused")
            assert second.owned() == set()
        finally:
            second.stop()
        first.leave()
        third = Member("third", cluster, group, topic, other, tmp_path)
        try:
            wait_until(lambda: len(third.owned()) == 2, 60, "the empty group changes kind")
        finally:
            third.leave()
    finally:
        first.stop()


def test_the_protocol_as_a_client_speaks_it(kafka_cluster: Cluster) -> None:
    """ConsumerGroupHeartbeat, ConsumerGroupDescribe and the requests around them, field by
    field: a first member's join, a second's, revoke before assign, fencing, commits at the
    member epoch, and the group as ListGroups v5 and DescribeGroups show it."""
    cluster = kafka_cluster
    topic, group = fresh("wire848"), fresh("wire848")
    cluster.create_topic(topic, partitions=4, replication_factor=1)
    with KafkaWire(cluster.bootstrap_servers()) as wire:
        found = wire.ask(FindCoordinatorRequest(key=group, key_type=0), 3)
        topic_id = wire.ask(MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(
            name=topic, topic_id=None)], allow_auto_topic_creation=False), 12).topics[0].topic_id
    with KafkaWire(f"{found.host}:{found.port}") as wire:
        def beat(member: str, epoch: int, owned: list[int] | None = None, **fields: Any) -> Any:
            request = ConsumerGroupHeartbeatRequest(
                group_id=group, member_id=member, member_epoch=epoch,
                topic_partitions=None if owned is None else [
                    ConsumerGroupHeartbeatRequest.TopicPartitions(topic_id=topic_id,
                                                                  partitions=owned)],
                **fields)
            return wire.ask(request, 1)

        def partitions(answer: Any) -> list[int]:
            assert answer.assignment is not None
            assert {tp.topic_id for tp in answer.assignment.topic_partitions} <= {topic_id}
            return sorted(p for tp in answer.assignment.topic_partitions for p in tp.partitions)

        first = beat("m1", 0, [], rebalance_timeout_ms=30_000, subscribed_topic_names=[topic])
        assert first.error_code == 0 and first.heartbeat_interval_ms == 500
        assert partitions(first) == [0, 1, 2, 3]
        second = beat("m2", 0, [], rebalance_timeout_ms=30_000, subscribed_topic_names=[topic],
                      server_assignor="range")
        assert second.error_code == 0 and partitions(second) == []  # m1 holds them all
        revoke = beat("m1", first.member_epoch, [0, 1, 2, 3])
        assert revoke.member_epoch == first.member_epoch and partitions(revoke) == [0, 1]
        assert beat("m2", second.member_epoch, []).assignment is None  # not released yet
        released = beat("m1", first.member_epoch, [0, 1])
        assert released.member_epoch == second.member_epoch
        assert partitions(beat("m2", second.member_epoch, [])) == [2, 3]
        fenced = beat("m1", released.member_epoch + 1, [0, 1])
        assert fenced.error_code == ErrorCode.FENCED_MEMBER_EPOCH

        described = wire.ask(ConsumerGroupDescribeRequest(
            group_ids=[group], include_authorized_operations=False), 1).groups[0]
        assert (described.error_code, described.group_state) == (0, "Stable")
        assert described.assignor_name == "range"  # the one the members named
        members = {m.member_id: m for m in described.members}
        assert set(members) == {"m1", "m2"}
        assert [(tp.topic_name, tp.partitions)
                for tp in members["m2"].assignment.topic_partitions] == [(topic, [2, 3])]
        assert members["m1"].subscribed_topic_names == [topic]

        def commit(version: int, epoch: int) -> int:
            request = OffsetCommitRequest(
                group_id=group, generation_id_or_member_epoch=epoch, member_id="m1",
                topics=[OffsetCommitRequest.OffsetCommitRequestTopic(name=topic, partitions=[
                    OffsetCommitRequest.OffsetCommitRequestTopic.OffsetCommitRequestPartition(
                        partition_index=0, committed_offset=0)])])
            return wire.ask(request, version).topics[0].partitions[0].error_code
        assert commit(9, released.member_epoch) == 0
        assert commit(9, released.member_epoch - 1) == ErrorCode.STALE_MEMBER_EPOCH
        assert commit(8, released.member_epoch) == ErrorCode.UNSUPPORTED_VERSION

        listed = wire.ask(ListGroupsRequest(states_filter=[], types_filter=["consumer"]), 5)
        assert any(g.group_id == group and g.group_type == "consumer" for g in listed.groups)
        classic_view = wire.ask(DescribeGroupsRequest(groups=[group]), 5).groups[0]
        assert classic_view.protocol_type == "consumer"
        shares = {m.member_id: sorted(p for t in ConsumerProtocolAssignment.decode(
            m.member_assignment).assigned_partitions for p in t.partitions)
            for m in classic_view.members}
        assert shares == {"m1": [0, 1], "m2": [2, 3]}

        assert beat("m1", -1).member_epoch == -1 and beat("m2", -1).error_code == 0
        gone = wire.ask(ConsumerGroupDescribeRequest(
            group_ids=[group], include_authorized_operations=False), 1).groups[0]
        assert gone.error_code == ErrorCode.GROUP_ID_NOT_FOUND
        # A member's commit to a group this coordinator has no trace of may come from a group
        # whose coordinator moved here: retriable once, then as for a classic group gone.
        assert commit(9, released.member_epoch) == ErrorCode.COORDINATOR_NOT_AVAILABLE
        assert commit(9, released.member_epoch) == ErrorCode.ILLEGAL_GENERATION


def test_a_group_follows_its_coordinator_to_another_broker(start_cluster, tmp_path: Path,
                                                           ) -> None:
    """The group's coordinator is killed while two members read under a producer: the
    members find the new coordinator, which rebuilds the group from their heartbeats (its
    membership is kept in memory), and they carry on with the partitions they hold, without
    a revocation, reading every record."""
    cluster = start_cluster(3, kafka_listeners="PLAINTEXT://127.0.0.1:0",
                            broker_config=CONSUMER_GROUPS_QUICKLY)
    topic, group = fresh("moving"), fresh("moving")
    cluster.create_topic(topic, partitions=PARTITIONS, replication_factor=3,
                         config={"min.insync.replicas": "2"})
    producer = Producer(cluster, topic)
    members = [Member(name, cluster, group, topic, "consumer", tmp_path) for name in "ab"]
    try:
        wait_until(lambda: stable(members, {"a": 3, "b": 3}), 90, "a and b share")
        held = {member.name: member.owned() for member in members}
        with KafkaWire(cluster.bootstrap_servers()) as wire:
            coordinator = wire.ask(FindCoordinatorRequest(key=group, key_type=0), 3).node_id
        survivor = address_of(cluster, (coordinator + 1) % 3)
        killed_at = time.time()
        cluster.kill_broker(coordinator)

        def on_the_new_coordinator() -> bool:
            with KafkaWire(survivor) as wire:
                found = wire.ask(FindCoordinatorRequest(key=group, key_type=0), 3)
            if found.error_code or found.node_id == coordinator:
                return False
            with KafkaWire(f"{found.host}:{found.port}") as wire:
                described = wire.ask(ConsumerGroupDescribeRequest(
                    group_ids=[group], include_authorized_operations=False), 1).groups[0]
            return described.error_code == 0 and described.group_state == "Stable" and {
                m.member_id for m in described.members} and sorted(
                p for m in described.members for tp in m.assignment.topic_partitions
                for p in tp.partitions) == list(range(PARTITIONS))
        wait_until(on_the_new_coordinator, 120, "the group rebuilt on its new coordinator")
        sent = producer.stop()

        def every_record_read() -> bool:
            return {event["value"] for member in members for event in member.events()
                    if event["event"] == "record"} >= {str(n) for n in range(sent)}
        wait_until(every_record_read, 90, "every record read by the group")
        for member in members:  # nothing was taken from anyone: no rebalance
            assert member.owned() == held[member.name]
            assert not [event for event in member.events() if event["time"] > killed_at
                        and event["event"] in ("revoke", "lost", "assign")], member.name
    finally:
        if producer.running.is_set():
            producer.stop()
        for member in members:
            member.stop()
