"""Consumer groups on a real cluster: membership and ownership in ZooKeeper, the rebalance
walk-through of docs/consumer-groups.md, incremental rebalancing, offsets and the offset manager,
failures."""

from __future__ import annotations

import os
import signal
import threading
import time
from collections import Counter

import msgpack
import pytest
import ray

from rafka import Cluster
from rafka.actors.clients.consumer import Consumer, ConsumerRecord, NoOffsetForPartitionError
from rafka.actors.clients.group_consumer import GroupConsumer
from rafka.actors.errors import CommitFailedError
from rafka.actors.offsets_topic import OFFSETS_TOPIC, legacy_commit_key, offsets_partition
from tests.support.cluster import fresh, module_cluster
from tests.support.kafka_coordinator_schemas import (
    OFFSET_COMMIT_KEY,
    OFFSET_COMMIT_VALUES,
    decode_whole,
)
from tests.support.replicas import ReplicaOnHost
from tests.support.waiting import wait_until

GROUP_CONFIG = {"session_timeout_ms": 4000, "auto_offset_reset": "earliest"}


shared = module_cluster("groups")


def produce(cluster: Cluster, topic: str, count: int, partitions: int) -> set[bytes]:
    producer = cluster.producer(acks="all")
    values = [f"{topic}-{i}".encode() for i in range(count)]
    for i, value in enumerate(values):
        producer.send(topic, value=value, partition=i % partitions)
    producer.flush()
    producer.close()
    return set(values)


def filled_topic(cluster: Cluster, prefix: str, count: int, *, partitions: int,
                 replication_factor: int) -> tuple[str, set[bytes]]:
    """A new topic holding `count` records spread over its partitions; its name and the values."""
    topic = fresh(prefix)
    cluster.create_topic(topic, partitions=partitions, replication_factor=replication_factor)
    return topic, produce(cluster, topic, count, partitions)


def poll_at_least(consumer: Consumer, count: int) -> list[ConsumerRecord]:
    """What `consumer` polls until it has at least `count` records."""
    got: list[ConsumerRecord] = []
    while len(got) < count:
        got += consumer.poll(500)
    return got


def settle(consumers: list[GroupConsumer], expected: list[set[int]], timeout_s: float = 30) -> None:
    """Poll every member until each owns the partitions expected of it."""
    got: list[set[int]] = []

    def owned_as_expected() -> bool:
        nonlocal got
        for consumer in consumers:
            consumer.poll(50)
        got = [{tp.partition for tp in c.assignment()} for c in consumers]
        return got == expected

    try:
        wait_until(owned_as_expected, timeout_s, interval_s=0)
    except AssertionError:
        raise AssertionError(f"assignment {got}, expected {expected}") from None


def test_the_seeds_walk_through_with_the_range_assignor(shared: Cluster) -> None:
    """topic1 with partitions 0, 1, 2; consumers join one at a time, then leave one at a time."""
    topic, group = fresh("topic1"), fresh("group1")
    shared.create_topic(topic, partitions=3, replication_factor=1)
    consumers: list[GroupConsumer] = []
    steps = [
        [{0, 1, 2}],
        [{0, 1}, {2}],
        [{0}, {1}, {2}],
        [{0}, {1}, {2}, set()],
    ]
    for expected in steps:
        consumers.append(shared.consumer([topic], group=group, **GROUP_CONFIG))
        settle(consumers, expected)
    for expected in [[{0}, {1}, {2}], [{0, 1}, {2}], [{0, 1, 2}]]:
        consumers.pop(0).close()
        settle(consumers, expected)
    consumers[0].close()


def test_groups_are_independent(shared: Cluster) -> None:
    """The example of docs/consumer-groups.md: group1's one consumer gets every record;
    group2's three consumers split them by partition."""
    topic, produced = filled_topic(shared, "topic1", 300, partitions=3, replication_factor=2)
    lonely = shared.consumer([topic], group=fresh("group1"), **GROUP_CONFIG)
    trio_group = fresh("group2")
    trio = [shared.consumer([topic], group=trio_group, **GROUP_CONFIG) for _ in range(3)]
    got_lonely: list = []
    got_trio: list[list] = [[], [], []]
    deadline = time.monotonic() + 60
    while (len(got_lonely) < 300 or sum(map(len, got_trio)) < 300) and time.monotonic() < deadline:
        got_lonely += lonely.poll(100)
        for i, consumer in enumerate(trio):
            got_trio[i] += consumer.poll(100)
    assert {r.value for r in got_lonely} == produced and len(got_lonely) == 300
    assert {r.value for part in got_trio for r in part} == produced
    partitions = [{r.partition for r in part} for part in got_trio]
    assert sorted(map(len, partitions)) == [1, 1, 1]
    assert set().union(*partitions) == {0, 1, 2}
    for consumer in [lonely, *trio]:
        consumer.close()


def test_a_rebalance_pauses_only_the_partitions_that_move(shared: Cluster) -> None:
    topic, group = fresh("moves"), fresh("group")
    shared.create_topic(topic, partitions=4, replication_factor=1)
    revoked: dict[str, list] = {"first": [], "second": []}
    first = shared.consumer([topic], group=group, **GROUP_CONFIG,
                            on_partitions_revoked=revoked["first"].append)
    second = shared.consumer([topic], group=group, **GROUP_CONFIG,
                             on_partitions_revoked=revoked["second"].append)
    settle([first, second], [{0, 1}, {2, 3}])

    stop = threading.Event()

    def keep_producing() -> None:
        producer = shared.producer(acks=1)
        i = 0
        while not stop.is_set():
            producer.send(topic, value=str(i).encode(), partition=i % 4)
            i += 1
            time.sleep(0.002)
        producer.close()

    writer = threading.Thread(target=keep_producing, daemon=True)
    writer.start()
    third = shared.consumer([topic], group=group, **GROUP_CONFIG)
    # The second member does not poll yet, so it keeps partition 3 and the rebalance stays
    # open (the third waits to claim it) for as long as the first takes to read something.
    first_records_during: list = []
    deadline = time.monotonic() + 30
    while not first_records_during and time.monotonic() < deadline:
        first_records_during += first.poll(100)
        third.poll(50)
    assert third.assignment() == set()  # still waiting: these were read mid-rebalance
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        first_records_during += first.poll(50)
        second.poll(50)
        third.poll(50)
        if {tp.partition for tp in third.assignment()} == {3}:
            break
    stop.set()
    writer.join()
    assert {tp.partition for tp in first.assignment()} == {0, 1}
    assert {tp.partition for tp in second.assignment()} == {2}
    assert revoked["first"] == []  # nothing moved away from it: it never paused
    assert [{tp.partition for tp in r} for r in revoked["second"]] == [{3}]
    # It kept reading its own partitions while the others moved.
    assert first_records_during and {r.partition for r in first_records_during} <= {0, 1}
    for consumer in (first, second, third):
        consumer.close()


def test_commits_resume_a_group_where_it_left_off(shared: Cluster) -> None:
    topic, produced = filled_topic(shared, "resume", 200, partitions=2, replication_factor=3)
    group = fresh("group")
    consumer = shared.consumer([topic], group=group, enable_auto_commit=False, **GROUP_CONFIG)
    seen = []
    while len(seen) < 120:
        seen += consumer.poll(500, max_records=120 - len(seen))
    consumer.commit()
    positions = {tp: consumer.position(*tp) for tp in consumer.assignment()}
    assert consumer.committed(positions) == positions
    assert sum(positions.values()) == 120
    consumer.close()

    again = shared.consumer([topic], group=group, enable_auto_commit=False, **GROUP_CONFIG)
    rest = []
    deadline = time.monotonic() + 30
    while len(rest) < 80 and time.monotonic() < deadline:
        rest += again.poll(500)
    assert len(rest) == 80
    assert {r.value for r in seen} | {r.value for r in rest} == produced
    again.close()


def test_auto_commit_and_async_commit(shared: Cluster) -> None:
    topic, _ = filled_topic(shared, "auto", 50, partitions=1, replication_factor=1)
    group = fresh("group")
    consumer = shared.consumer([topic], group=group, enable_auto_commit=True,
                               auto_commit_interval_ms=100, **GROUP_CONFIG)
    poll_at_least(consumer, 50)
    wait_until(lambda: (consumer.poll(50) is not None
                        and consumer.committed([(topic, 0)])[(topic, 0)] == 50), 20,
               "the auto-commit")
    consumer.seek(topic, 0, 10)
    consumer.commit_async()
    wait_until(lambda: consumer.committed([(topic, 0)])[(topic, 0)] == 10, 20, "async commit")
    consumer.close(commit=False)


def test_async_commits_are_stored_in_the_order_they_were_made(shared: Cluster) -> None:
    topic, _ = filled_topic(shared, "order", 40, partitions=1, replication_factor=1)
    group = fresh("group")
    consumer = shared.consumer([topic], group=group, enable_auto_commit=False, **GROUP_CONFIG)
    poll_at_least(consumer, 40)
    for offset in range(1, 41):
        consumer.commit_async({(topic, 0): offset})
    # Each commit waits for its predecessor, so the last one asked for is the one that stays.
    wait_until(lambda: consumer.committed([(topic, 0)])[(topic, 0)] == 40, 20, "the last commit")
    time.sleep(0.5)
    assert consumer.committed([(topic, 0)])[(topic, 0)] == 40
    consumer.close(commit=False)


def test_offset_reset_policies_without_a_committed_offset(shared: Cluster) -> None:
    topic, _ = filled_topic(shared, "reset", 5, partitions=1, replication_factor=1)
    settings = {**GROUP_CONFIG, "enable_auto_commit": False}
    settings.pop("auto_offset_reset")
    strict = shared.consumer([topic], group=fresh("none"), auto_offset_reset="none", **settings)
    with pytest.raises(NoOffsetForPartitionError, match=r"auto\.offset\.reset"):
        for _ in range(100):
            strict.poll(100)
    strict.close()
    latest = shared.consumer([topic], group=fresh("latest"), auto_offset_reset="latest",
                             **settings)
    assert all(latest.poll(200) == [] for _ in range(3))
    produce(shared, topic, 5, 1)
    got = []
    deadline = time.monotonic() + 20
    while len(got) < 5 and time.monotonic() < deadline:
        got += latest.poll(200)
    assert [r.offset for r in got] == [5, 6, 7, 8, 9]
    latest.close()


def test_zookeeper_offset_storage(shared: Cluster, zookeeper) -> None:
    topic, _ = filled_topic(shared, "zkstore", 30, partitions=1, replication_factor=1)
    group = fresh("group")
    consumer = shared.consumer([topic], group=group, offsets_storage="zookeeper",
                               enable_auto_commit=False, **GROUP_CONFIG)
    poll_at_least(consumer, 30)
    consumer.commit()
    consumer.close()
    value, _stat = shared.store.get(f"/consumers/{group}/offsets/{topic}/0")
    assert int(value) == 30
    assert shared.describe_group(group)["partitions"][0]["committed_offset"] == 30


def test_commit_of_a_partition_no_longer_owned_fails(shared: Cluster) -> None:
    topic, group = fresh("owned"), fresh("group")
    shared.create_topic(topic, partitions=2, replication_factor=1)
    consumer = shared.consumer([topic], group=group, **GROUP_CONFIG)
    settle([consumer], [{0, 1}])
    with pytest.raises(CommitFailedError, match="no longer owns"):
        consumer.commit({(topic, 7): 3})
    consumer.close()


def test_describe_group_reports_members_offsets_and_lag(shared: Cluster) -> None:
    topic, _ = filled_topic(shared, "lag", 100, partitions=2, replication_factor=2)
    group = fresh("group")
    consumer = shared.consumer([topic], group=group, enable_auto_commit=False, **GROUP_CONFIG)
    poll_at_least(consumer, 100)
    consumer.commit({(topic, 0): 50, (topic, 1): 20})
    description = shared.describe_group(group)
    assert list(description["members"]) == [consumer.member_id]
    rows = {row["partition"]: row for row in description["partitions"]}
    assert rows[0]["member"] == rows[1]["member"] == consumer.member_id
    assert (rows[0]["committed_offset"], rows[0]["log_end_offset"], rows[0]["lag"]) == (50, 50, 0)
    assert (rows[1]["committed_offset"], rows[1]["log_end_offset"], rows[1]["lag"]) == (20, 50, 30)
    assert group in shared.list_groups()
    consumer.close(commit=False)


def test_a_new_offset_manager_rebuilds_its_cache_from_the_topic(start_cluster) -> None:
    cluster = start_cluster(3)
    cluster.create_topic("paid", partitions=1, replication_factor=3)
    produce(cluster, "paid", 40, 1)
    consumer = cluster.consumer(["paid"], group="billing", enable_auto_commit=False,
                                **GROUP_CONFIG)
    poll_at_least(consumer, 40)
    consumer.commit()
    consumer.close(commit=False)
    managed = offsets_partition("billing", 3)
    # The commit is Kafka's OffsetCommitKey and OffsetCommitValue (v3), as Burrow or Kafka's
    # OffsetsMessageFormatter read the topic.
    reader = cluster.consumer()
    reader.assign([(OFFSETS_TOPIC, managed)])
    reader.seek_to_beginning()
    stored = [record for record in poll_at_least(reader, 1)
              if decode_whole(OFFSET_COMMIT_KEY, record.key)[1:] == ("billing", "paid", 0)]
    reader.close()
    assert [decode_whole(OFFSET_COMMIT_VALUES[3], record.value)[:2]
            for record in stored] == [(3, 40)]
    # A commit rafka wrote in msgpack before (a group placed on the same partition) loads too.
    old_group = next(name for name in (f"billing-{n}" for n in range(1000))
                     if offsets_partition(name, 3) == managed)
    producer = cluster.producer(acks="all")
    producer.send(OFFSETS_TOPIC, msgpack.packb([1, 17, "", 1_600_000_000_000, -1]),
                  legacy_commit_key(old_group, "paid", 0), partition=managed).result(30)
    producer.close()
    manager = cluster.describe_topic(OFFSETS_TOPIC)["partitions"][managed]["leader"]
    cluster.kill_broker(manager)
    wait_until(lambda: cluster.describe_topic(OFFSETS_TOPIC)["partitions"][managed]["leader"]
               not in (manager, -1), 30, "a new offset manager")
    again = cluster.consumer(["paid"], group="billing", enable_auto_commit=False,
                             **GROUP_CONFIG)
    assert again.committed([("paid", 0)]) == {("paid", 0): 40}
    again.close(commit=False)
    assert cluster.committed_offsets(old_group, [("paid", 0)]) == {("paid", 0): 17}


def test_a_commit_that_times_out_raises_commit_failed(start_cluster) -> None:
    cluster = start_cluster(1)
    cluster.create_topic("slow", partitions=1, replication_factor=1)
    consumer = cluster.consumer(["slow"], group="stuck", **GROUP_CONFIG)
    settle([consumer], [{0}])
    leader = cluster.describe_topic(OFFSETS_TOPIC)["partitions"][offsets_partition("stuck", 3)]
    pid = ReplicaOnHost(cluster, OFFSETS_TOPIC, offsets_partition("stuck", 3),
                        leader["leader"]).pid()
    os.kill(pid, signal.SIGSTOP)
    try:
        consumer.commit_async({("slow", 0): 0})  # waits on the silent manager for 10 s
        time.sleep(0.5)
        started = time.monotonic()
        with pytest.raises(CommitFailedError, match="did not complete"):
            consumer.commit({("slow", 0): 0}, timeout_s=2)
        assert time.monotonic() - started < 8, "the commit waited out the asynchronous one"
    finally:
        os.kill(pid, signal.SIGCONT)
    consumer.close(commit=False)


def test_a_member_waits_for_committed_offsets_it_cannot_read_yet(shared: Cluster) -> None:
    """While the group's offset manager does not answer (its replica is still starting, say),
    a new member's poll returns nothing instead of failing, and reading starts at the committed
    offset once the manager answers."""
    topic, _ = filled_topic(shared, "late", 10, partitions=1, replication_factor=1)
    group = fresh("group")
    shared.commit_offsets(group, {(topic, 0): 4})
    partition = offsets_partition(group, shared.partition_count(OFFSETS_TOPIC))
    leader = shared.describe_topic(OFFSETS_TOPIC)["partitions"][partition]["leader"]
    pid = ReplicaOnHost(shared, OFFSETS_TOPIC, partition, leader).pid()
    consumer = shared.consumer([topic], group=group, **GROUP_CONFIG)
    os.kill(pid, signal.SIGSTOP)
    try:
        assert consumer.poll(500) == []  # waits out the fetch of committed offsets (10 s)
        assert consumer.assignment() == set()
    finally:
        os.kill(pid, signal.SIGCONT)
    records = []
    deadline = time.monotonic() + 30
    while len(records) < 6 and time.monotonic() < deadline:
        records += consumer.poll(200)
    assert [record.offset for record in records] == list(range(4, 10))
    consumer.close(commit=False)


def test_consumer_actors_share_a_topic(shared: Cluster) -> None:
    topic, produced = filled_topic(shared, "actors", 400, partitions=4, replication_factor=2)
    group = fresh("group")
    members = shared.consumer_group(topic, group, members=2, **GROUP_CONFIG)
    got = []
    deadline = time.monotonic() + 60
    while len(got) < 400 and time.monotonic() < deadline:
        for records in members.poll(200):
            got += records
    assert {record[5] for record in got} == produced and len(got) == 400
    assignments = members.assignment()
    assert sorted(len(a) for a in assignments) == [2, 2]
    members.close()


def test_at_least_once_when_a_member_dies_mid_batch(shared: Cluster) -> None:
    topic, produced = filled_topic(shared, "alo", 2000, partitions=4, replication_factor=2)
    group = fresh("group")
    config = {**GROUP_CONFIG, "enable_auto_commit": False, "max_poll_records": 50}
    members = shared.consumer_group(topic, group, members=2, **config)
    processed = Counter()
    victim, survivor = members.members
    # Both process and commit a few batches; then the victim dies holding an uncommitted batch.
    for _ in range(5):
        for member in (victim, survivor):
            records = ray.get(member.poll.remote(500))
            processed.update(record[5] for record in records)
            ray.get(member.commit.remote())
    processed.update(record[5] for record in ray.get(victim.poll.remote(500)))
    ray.kill(victim)
    deadline = time.monotonic() + 60
    while set(processed) != produced and time.monotonic() < deadline:
        records = ray.get(survivor.poll.remote(500))
        processed.update(record[5] for record in records)
        ray.get(survivor.commit.remote())
    assert set(processed) == produced  # nothing lost
    assert ray.get(survivor.assignment.remote()) == [(topic, p) for p in range(4)]
    members.members = [survivor]
    members.close()


def test_no_partition_is_read_by_two_members_under_churn(shared: Cluster) -> None:
    """Members join and leave while the group reads; with commits on revocation every record is
    read exactly once, which two owners at once would break."""
    topic, produced = filled_topic(shared, "churn", 3000, partitions=6, replication_factor=1)
    group = fresh("group")
    config = {**GROUP_CONFIG, "max_poll_records": 20, "auto_commit_interval_ms": 60_000}
    members = [shared.consumer([topic], group=group, **config) for _ in range(2)]
    read = Counter()
    for round_number in range(12):
        for consumer in members:
            read.update(r.value for r in consumer.poll(100))
        if round_number % 3 == 0:
            members.append(shared.consumer([topic], group=group, **config))
        elif round_number % 3 == 2 and len(members) > 1:
            members.pop(0).close()
    deadline = time.monotonic() + 60
    while sum(read.values()) < 3000 and time.monotonic() < deadline:
        for consumer in members:
            read.update(r.value for r in consumer.poll(100))
    for consumer in members:
        consumer.close()
    assert set(read) == produced
    twice = [value for value, count in read.items() if count > 1]
    assert not twice, f"{len(twice)} records read twice, e.g. {twice[:3]}"


def everything_to_the_last(members, partitions_per_topic, current_assignment=None):
    """A user-supplied assignor: the member whose id sorts last reads every partition."""
    last = max(members)
    return {member: ([(topic, p) for topic, count in sorted(partitions_per_topic.items())
                      for p in range(count)] if member == last else [])
            for member in members}


@pytest.mark.parametrize(
    ("strategy", "expected"),
    [("roundrobin", [{0, 2}, {1, 3}]), ("sticky", None),
     (everything_to_the_last, [set(), {0, 1, 2, 3}])],
)
def test_live_groups_use_the_configured_assignor(shared: Cluster, strategy, expected) -> None:
    topic, group = fresh("strategy"), fresh("group")
    shared.create_topic(topic, partitions=4, replication_factor=1)
    config = {**GROUP_CONFIG, "partition_assignment_strategy": strategy}
    first = shared.consumer([topic], group=group, **config)
    settle([first], [{0, 1, 2, 3}])
    second = shared.consumer([topic], group=group, **config)
    if expected is not None:
        settle([first, second], expected)
    else:  # sticky: balanced, and the first member keeps two of the partitions it had
        deadline = time.monotonic() + 30
        while [len(c.assignment()) for c in (first, second)] != [2, 2]:
            for consumer in (first, second):
                consumer.poll(50)
            assert time.monotonic() < deadline, [c.assignment() for c in (first, second)]
    for consumer in (first, second):
        consumer.close()
