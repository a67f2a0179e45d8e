"""Fetch sessions, the ISR arithmetic of partitions a session does not list, and how long a
follower lets its leader hold a fetch (pure logic)."""

from __future__ import annotations

from rafka.actors.messages import ReplicaFetchPartition
from rafka.actors.server.fetch_session import FetchSession
from rafka.actors.server.replica_fetcher import fetch_wait_ms
from rafka.actors.server.replication import FetchClock, LeaderState
from rafka.common.topic_partition import TopicPartition

LAG_MS = 10_000


def leader(now_ms: int = 0) -> LeaderState:
    return LeaderState.become_leader(1, (1, 2, 3), (1, 2, 3), leader_epoch=0, log_end_offset=0,
                                     high_watermark=0, now_ms=now_ms)


def test_a_follower_silent_in_its_session_is_not_taken_for_lagging_after_an_append() -> None:
    # Both followers caught up at offset 100 at t=1000, then fetch every 500 ms in their
    # sessions without listing the partition (nothing changed for it) until t=60_000.
    state = leader()
    clocks = {2: FetchClock(), 3: FetchClock()}
    for follower, clock in clocks.items():
        state.record_follower_fetch(follower, 100, 100, now_ms=1_000, clock=clock)
    for now in range(1_500, 60_001, 500):
        for clock in clocks.values():
            clock.last_fetch_ms = now
    state.before_append(100)
    # The leader appends at t=60_010: the followers were level with it at their last fetch.
    assert state.followers_to_remove(150, now_ms=60_010, lag_time_max_ms=LAG_MS) == set()


def test_a_follower_that_stopped_fetching_is_lagging_after_an_append() -> None:
    state = leader()
    alive, dead = FetchClock(), FetchClock()
    state.record_follower_fetch(2, 100, 100, now_ms=1_000, clock=alive)
    state.record_follower_fetch(3, 100, 100, now_ms=1_000, clock=dead)
    alive.last_fetch_ms = 60_000  # follower 3's session fetched last at t=1000
    state.before_append(100)
    assert state.followers_to_remove(150, now_ms=60_010, lag_time_max_ms=LAG_MS) == {3}


def test_a_follower_behind_the_log_end_gains_nothing_from_its_session_clock() -> None:
    # Follower 3 holds up to 90 of 100: its session fetching without listing the partition
    # (it is waiting for an answer about it) does not make it caught up.
    state = leader()
    clock = FetchClock()
    state.record_follower_fetch(3, 90, 100, now_ms=1_000, clock=clock)
    state.record_follower_fetch(2, 100, 100, now_ms=1_000, clock=FetchClock())
    clock.last_fetch_ms = 60_000
    state.before_append(100)
    assert 3 in state.followers_to_remove(150, now_ms=60_010, lag_time_max_ms=LAG_MS)


def request(partition: int, offset: int = 0, high_watermark: int = 0) -> ReplicaFetchPartition:
    return ReplicaFetchPartition("t", partition, offset, 0, high_watermark)


def test_a_session_hears_only_of_changed_partitions_it_still_waits_on() -> None:
    session = FetchSession(follower_id=2, session_id=7)
    for partition in range(3):
        session.list(request(partition))
    assert sorted(tp.partition for tp, _ in session.take_dirty()) == [0, 1, 2]
    assert session.take_dirty() == []  # nothing changed since
    session.mark(TopicPartition("t", 1))
    assert [tp.partition for tp, _ in session.take_dirty()] == [1]
    # Answered about partition 1: its changes wait until the follower lists it again.
    session.answered(TopicPartition("t", 1))
    session.mark(TopicPartition("t", 1))
    assert session.take_dirty() == []
    session.list(request(1, offset=5))
    assert [(tp.partition, r.offset) for tp, r in session.take_dirty()] == [(1, 5)]


def test_a_removed_partition_leaves_the_session() -> None:
    session = FetchSession(follower_id=2, session_id=7)
    session.list(request(0))
    session.remove(TopicPartition("t", 0))
    session.mark(TopicPartition("t", 0))
    assert session.take_dirty() == [] and not session.members


def test_a_fetch_is_held_no_longer_than_the_soonest_backoff_still_ahead() -> None:
    # Nothing backing off: the whole replica.fetch.wait.max.ms.
    assert fetch_wait_ms(2_000, [], now=100.0) == 2_000
    # Backoffs that ended count for nothing; the soonest ahead bounds the wait, rounded up so
    # that the fetch after it finds the backoff over.
    assert fetch_wait_ms(2_000, [99.0, 100.0], now=100.0) == 2_000
    assert fetch_wait_ms(2_000, [100.5, 100.1234, 99.0], now=100.0) == 124
    # Never beyond the configured wait, however far the backoff.
    assert fetch_wait_ms(2_000, [200.0], now=100.0) == 2_000
    assert fetch_wait_ms(0, [100.5], now=100.0) == 0
