"""Requests that wait, against a real cluster: a follower's or a consumer's fetch that finds
nothing new, and an acks=all produce whose records are not yet replicated, are held (Kafka's
delayed-fetch and delayed-produce purgatories) and end the moment what they wait for happens,
not when their timers run out (issue 26, point 3)."""

from __future__ import annotations

import asyncio
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
import ray

from rafka.actors.dataport import frames
from rafka.actors.dataport.async_client import LeaderConnection
from rafka.actors.messages import ReplicaFetchResponse
from tests.support.replicas import ReplicaOnHost

# Every timer on the path: the followers' and the consumer's fetch waits. A hop that waited
# one out would take a record this long; one that ends on its event takes milliseconds.
WAIT_MS = 30_000


def poll_one(consumer, timeout_s: float) -> tuple[list, float]:
    """What the consumer's first poll with records returned, and when (monotonic s)."""
    deadline = time.monotonic() + timeout_s
    records: list = []
    while not records and time.monotonic() < deadline:
        records = consumer.poll(timeout_ms=500)
    return records, time.monotonic()


@pytest.mark.parametrize("transport", ["tcp", "ray"])
def test_a_record_does_not_wait_out_any_fetch_or_produce_timer_on_its_way(
        start_cluster, transport: str) -> None:
    # The lag time above the fetch wait, as Kafka requires: a follower idle in a held fetch
    # stays in sync.
    cluster = start_cluster(3, broker_config={
        "replica.fetch.transport": transport,
        "replica.fetch.wait.max.ms": WAIT_MS,
        "replica.lag.time.max.ms": 2 * WAIT_MS,
    })
    # All three replicas must have each record before its produce is answered.
    cluster.create_topic("held", partitions=1, replication_factor=3,
                         config={"min.insync.replicas": 3})
    producer = cluster.producer(acks="all", linger_ms=0, transport=transport)
    consumer = cluster.consumer(["held"], auto_offset_reset="earliest", transport=transport,
                                fetch_max_wait_ms=WAIT_MS, request_timeout_ms=2 * WAIT_MS)
    # A new topic's first record too: a follower whose first fetch found the partition not
    # yet led (an error, then replica.fetch.backoff.ms) must not then sit in a fetch the
    # leader holds for the whole wait, unable to list it.
    started = time.monotonic()
    producer.send("held", value=b"first").result(timeout=2 * WAIT_MS / 1000)
    records, returned_at = poll_one(consumer, 2 * WAIT_MS / 1000)
    assert [r.value for r in records] == [b"first"]
    assert returned_at - started < WAIT_MS / 1000 / 2, (
        f"a new topic's first record delivered after {returned_at - started:.1f} s")
    with ThreadPoolExecutor(1) as reader:
        for number in range(3):
            # The consumer polls from its own thread, and the record is sent once its fetch
            # has been held at the leader for a second; the followers' fetches have been
            # held since the last record. Each of their timers has about 29 s to go.
            reading = reader.submit(poll_one, consumer, 2 * WAIT_MS / 1000)
            time.sleep(1.0)
            value = b"record-%d" % number
            started = time.monotonic()
            producer.send("held", value=value).result(timeout=2 * WAIT_MS / 1000)
            acknowledged_s = time.monotonic() - started
            records, returned_at = reading.result(timeout=2 * WAIT_MS / 1000)
            delivered_s = returned_at - started
            assert [r.value for r in records] == [value]
            assert delivered_s < WAIT_MS / 1000 / 2, (
                f"{value!r}: acknowledged after {acknowledged_s:.1f} s, delivered after "
                f"{delivered_s:.1f} s: a hop waited for its {WAIT_MS / 1000:.0f} s timer, "
                "not for the record")
    producer.close()
    consumer.close()
    leader = ReplicaOnHost(cluster, "held", 0)
    assert len(leader.describe()["isr"]) == 3


def test_a_wake_that_comes_before_the_fetch_it_is_for_still_answers_it(start_cluster) -> None:
    """A follower host that starts following a partition while its fetch waits at the leader
    wakes that fetch with an actor call, and the fetch may come over the data port: the wake
    can arrive before the full fetch that starts (or starts over) its session. The fetch it was
    for is then answered at once, not after replica.fetch.wait.max.ms."""
    cluster = start_cluster(1)
    cluster.create_topic("woken", partitions=1, replication_factor=1)
    leader = ReplicaOnHost(cluster, "woken", 0).host
    follower_id = 7  # no such broker: the leader answers sessions whoever holds them

    def full_fetch(session_id: int, max_wait_ms: int) -> float:
        started = time.monotonic()
        reply = ray.get(leader.replica_fetch.remote(
            follower_id, session_id, True, [], [], max_wait_ms, 1 << 20, 1 << 20), timeout=60)
        assert isinstance(reply, ReplicaFetchResponse), reply
        return time.monotonic() - started

    # No session yet: the wake comes first.
    ray.get(leader.wake_session.remote(follower_id, 1), timeout=30)
    assert full_fetch(1, WAIT_MS) < WAIT_MS / 1000 / 2
    # A session that exists, started over by a full fetch the wake came before.
    assert full_fetch(2, 0) < WAIT_MS / 1000 / 2
    ray.get(leader.wake_session.remote(follower_id, 2), timeout=30)
    assert full_fetch(2, WAIT_MS) < WAIT_MS / 1000 / 2


def test_a_fetch_held_on_the_data_port_is_woken_over_the_data_port(start_cluster) -> None:
    """Over TCP a follower's wake-up takes a second connection to the leader host's data port
    (its fetch holds the first), so waking a held fetch does not wait on Ray: the fetch is
    answered as soon as the wake arrives."""
    cluster = start_cluster(1)
    cluster.create_topic("woken-tcp", partitions=1, replication_factor=1)
    leader = ReplicaOnHost(cluster, "woken-tcp", 0).host
    follower_id, session_id = 7, 3

    async def held_then_woken() -> tuple[bool, float]:
        async def host() -> object:
            return leader

        fetching, waking = LeaderConnection(10, host), LeaderConnection(10, host)
        try:
            # The session, opened by a full fetch that lists nothing and waits for nothing.
            opened = await fetching.fetch(
                (follower_id, session_id, True, [], [], 0, 1 << 20, 1 << 20), 30, 1 << 20)
            assert isinstance(opened, ReplicaFetchResponse), opened
            started = time.monotonic()
            held = asyncio.ensure_future(fetching.fetch(
                (follower_id, session_id, False, [], [], WAIT_MS, 1 << 20, 1 << 20),
                2 * WAIT_MS / 1000, 1 << 20))
            await asyncio.sleep(1.0)
            held_at_wake = not held.done()
            await waking.call(frames.WAKE_SESSION, (follower_id, session_id), 10, 64)
            reply = await held
            assert isinstance(reply, ReplicaFetchResponse), reply
            return held_at_wake, time.monotonic() - started
        finally:
            fetching.close()
            waking.close()

    held_at_wake, answered_after_s = asyncio.run(held_then_woken())
    assert held_at_wake, "the fetch was answered before anything woke it"
    assert answered_after_s < WAIT_MS / 1000 / 2, (
        f"answered after {answered_after_s:.1f} s: the wake-up did not reach the held fetch")
