"""The replication arithmetic: high watermark, ISR shrink and expand, truncation, acks=all."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from rafka.actors.server.replication import (
    AcksAllOutcome,
    LeaderState,
    Truncation,
    acks_all_outcome,
    follower_truncation,
)
from rafka.common.sentinels import UNDEFINED_EPOCH, UNDEFINED_OFFSET

LAG_MS = 10_000


def leader(isr=(1, 2, 3), log_end_offset=100, high_watermark=100, now_ms=0) -> LeaderState:
    return LeaderState.become_leader(
        leader_id=1,
        replicas=(1, 2, 3),
        isr=isr,
        leader_epoch=5,
        log_end_offset=log_end_offset,
        high_watermark=high_watermark,
        now_ms=now_ms,
    )


def test_high_watermark_is_the_smallest_log_end_offset_in_the_isr() -> None:
    state = leader()
    state.record_follower_fetch(2, 100, 150, now_ms=1)
    state.record_follower_fetch(3, 100, 150, now_ms=1)
    assert not state.advance_high_watermark(150)
    state.record_follower_fetch(2, 150, 150, now_ms=2)
    assert not state.advance_high_watermark(150)  # follower 3 still at 100
    state.record_follower_fetch(3, 140, 150, now_ms=2)
    assert state.advance_high_watermark(150)
    assert state.high_watermark == 140


def test_high_watermark_ignores_followers_outside_the_isr() -> None:
    state = leader(isr=(1, 2))
    state.record_follower_fetch(2, 120, 120, now_ms=1)
    state.record_follower_fetch(3, 0, 120, now_ms=1)
    assert state.advance_high_watermark(120)
    assert state.high_watermark == 120


@given(st.lists(st.tuples(st.sampled_from([2, 3]), st.integers(0, 1000)), max_size=50))
def test_high_watermark_never_moves_back(fetches) -> None:
    state = leader(log_end_offset=1000, high_watermark=0)
    seen = [state.high_watermark]
    for now, (follower, offset) in enumerate(fetches):
        state.record_follower_fetch(follower, offset, 1000, now_ms=now)
        state.advance_high_watermark(1000)
        seen.append(state.high_watermark)
    assert seen == sorted(seen)
    assert state.high_watermark <= 1000


def test_a_follower_lagging_longer_than_the_lag_time_leaves_the_isr() -> None:
    state = leader(now_ms=0)
    # Follower 2 keeps up; follower 3 fetched once, then stopped.
    state.record_follower_fetch(3, 100, 100, now_ms=1_000)
    for now in range(1_000, 13_000, 1_000):
        state.record_follower_fetch(2, 100 + now // 1_000, 100 + now // 1_000, now_ms=now)
    leader_end = 112
    assert state.followers_to_remove(leader_end, now_ms=10_000, lag_time_max_ms=LAG_MS) == set()
    assert state.followers_to_remove(leader_end, now_ms=11_001, lag_time_max_ms=LAG_MS) == {3}


def test_a_slow_follower_that_reaches_the_previous_end_counts_as_caught_up() -> None:
    state = leader(now_ms=0)
    # Each fetch reaches the leader's end as of the previous fetch, never the current one.
    for step in range(1, 30):
        now = step * 1_000
        state.record_follower_fetch(2, 100 + (step - 1) * 10, 100 + step * 10, now_ms=now)
        state.record_follower_fetch(3, 100 + step * 10, 100 + step * 10, now_ms=now)
    assert state.followers_to_remove(390, now_ms=29_500, lag_time_max_ms=LAG_MS) == set()


def test_a_follower_level_with_the_leader_stays_in_sync_without_fetching() -> None:
    state = leader(now_ms=0)
    state.record_follower_fetch(2, 100, 100, now_ms=0)
    state.record_follower_fetch(3, 100, 100, now_ms=0)
    assert state.followers_to_remove(100, now_ms=60_000, lag_time_max_ms=LAG_MS) == set()


def test_a_follower_rejoins_the_isr_once_it_reaches_the_high_watermark_in_this_epoch() -> None:
    state = leader(isr=(1, 2), log_end_offset=100, high_watermark=100)
    state.record_follower_fetch(2, 130, 130, now_ms=1)
    state.advance_high_watermark(130)
    state.record_follower_fetch(3, 90, 130, now_ms=1)
    assert state.followers_to_add() == set()
    state.record_follower_fetch(3, 120, 130, now_ms=2)
    assert state.followers_to_add() == set()  # below the high watermark of 130
    state.record_follower_fetch(3, 130, 130, now_ms=3)
    assert state.followers_to_add() == {3}
    state.apply_isr({1, 2, 3})
    assert state.isr == {1, 2, 3}
    assert state.followers_to_add() == set()


def test_a_follower_being_added_holds_the_high_watermark_before_zookeeper_confirms() -> None:
    """ZooKeeper may hold the expanded ISR, and the controller elect the new member, before
    the leader hears back: records it lacks must not be acknowledged meanwhile."""
    state = leader(isr=(1, 2))
    state.record_follower_fetch(2, 100, 100, now_ms=1)
    state.record_follower_fetch(3, 100, 100, now_ms=1)
    assert state.followers_to_add() == {3}
    state.propose_isr({1, 2, 3})
    state.record_follower_fetch(2, 130, 130, now_ms=2)  # 3 has not fetched past 100 yet
    state.advance_high_watermark(130)
    assert state.high_watermark == 100
    state.apply_isr({1, 2, 3})
    state.record_follower_fetch(3, 130, 130, now_ms=3)
    assert state.advance_high_watermark(130) and state.high_watermark == 130


def test_a_shrink_counts_the_leaving_follower_until_zookeeper_confirms() -> None:
    state = leader(isr=(1, 2, 3))
    state.record_follower_fetch(2, 120, 120, now_ms=1)
    state.record_follower_fetch(3, 100, 120, now_ms=1)
    state.propose_isr({1, 2})
    state.advance_high_watermark(120)
    assert state.high_watermark == 100
    state.apply_isr({1, 2})
    assert state.advance_high_watermark(120) and state.high_watermark == 120


def test_a_lagging_follower_whose_addition_is_unconfirmed_is_proposed_for_removal() -> None:
    """An expansion whose answer was lost keeps its follower in the high watermark; if that
    follower then falls behind, writing an ISR without it is what frees the high watermark."""
    state = leader(isr=(1, 2), now_ms=0)
    state.record_follower_fetch(2, 100, 100, now_ms=0)
    state.record_follower_fetch(3, 100, 100, now_ms=0)
    state.propose_isr({1, 2, 3})
    state.record_follower_fetch(2, 200, 200, now_ms=50_000)
    assert state.followers_to_remove(200, now_ms=50_000, lag_time_max_ms=10_000) == {3}


def test_the_isr_always_holds_the_leader() -> None:
    state = leader(isr=(2, 3))
    assert 1 in state.isr
    state.apply_isr({2})
    assert state.isr == {1, 2}


def _epochs(cache: dict[int, int], log_end_offset: int):
    """An epoch cache {epoch: start offset} answering like the logstore's, for the tests."""

    def end_offset_for(epoch: int) -> tuple[int, int]:
        known = sorted(e for e in cache if e <= epoch)
        if not known:
            return UNDEFINED_EPOCH, UNDEFINED_OFFSET
        found = known[-1]
        later = sorted(start for e, start in cache.items() if e > found)
        return found, later[0] if later else log_end_offset

    return end_offset_for


def test_kip101_old_leader_truncates_what_the_new_leader_never_had() -> None:
    # The old leader wrote offsets 100..119 in epoch 1 but only 100..109 reached the follower
    # that became leader in epoch 2 and then wrote its own records from 110.
    old_leader = _epochs({0: 0, 1: 100}, log_end_offset=120)
    decision = follower_truncation(
        leader_answer=(1, 110), local_end_offset_for_epoch=old_leader,
        local_log_end_offset=120, local_high_watermark=105,
    )
    assert decision == Truncation(offset=110)


def test_kip101_follower_keeps_everything_when_the_leader_has_more() -> None:
    follower = _epochs({0: 0, 1: 100}, log_end_offset=110)
    decision = follower_truncation((1, 150), follower, 110, 90)
    assert decision == Truncation(offset=110)


def test_kip279_a_follower_without_the_leaders_epoch_asks_about_its_earlier_one() -> None:
    # The follower had epochs 0 and 2 (it led in 2 and wrote unreplicated records); the leader
    # answers for epoch 1, which the follower never had.
    follower = _epochs({0: 0, 2: 50}, log_end_offset=70)
    decision = follower_truncation((1, 60), follower, 70, 40)
    assert decision == Truncation(ask_epoch=0)
    # Asked about epoch 0, the leader says it ended at 50: both logs agree below 50.
    assert follower_truncation((0, 50), follower, 70, 40) == Truncation(offset=50)


def test_a_leader_that_knows_no_such_epoch_falls_back_to_the_high_watermark() -> None:
    follower = _epochs({3: 0}, log_end_offset=30)
    decision = follower_truncation((UNDEFINED_EPOCH, UNDEFINED_OFFSET), follower, 30, 12)
    assert decision == Truncation(offset=12)


def test_acks_all_waits_until_the_high_watermark_passes_the_records() -> None:
    assert acks_all_outcome(10, last_offset=10, isr_size=3, min_insync_replicas=2) is (
        AcksAllOutcome.WAIT)
    assert acks_all_outcome(11, last_offset=10, isr_size=2, min_insync_replicas=2) is (
        AcksAllOutcome.ACKNOWLEDGE)


def test_acks_all_is_refused_when_the_isr_shrank_below_the_minimum() -> None:
    # The ISR shrank to the leader alone, which let the high watermark pass the records: one
    # copy holds them, so they are not acknowledged (Jepsen 2013).
    state = leader(isr=(1, 2, 3), log_end_offset=100, high_watermark=100)
    state.apply_isr({1})
    assert state.advance_high_watermark(120)
    assert acks_all_outcome(state.high_watermark, last_offset=119, isr_size=len(state.isr),
                            min_insync_replicas=2) is (
        AcksAllOutcome.NOT_ENOUGH_REPLICAS_AFTER_APPEND)
    # With min.insync.replicas=1 the leader alone is enough, as the user asked.
    assert acks_all_outcome(state.high_watermark, last_offset=119, isr_size=1,
                            min_insync_replicas=1) is AcksAllOutcome.ACKNOWLEDGE


@given(st.integers(0, 200), st.integers(0, 200), st.integers(1, 5), st.integers(1, 5))
def test_acks_all_never_acknowledges_below_min_isr(high_watermark, last, isr_size, min_isr) -> None:
    outcome = acks_all_outcome(high_watermark, last, isr_size, min_isr)
    if outcome is AcksAllOutcome.ACKNOWLEDGE:
        assert isr_size >= min_isr and high_watermark > last
