"""Which requests in flight a client gives up on when the controller moved their leaders, and
when it looks (actors/clients/leader_moves.py): pure, no cluster."""

from __future__ import annotations

from rafka.actors.clients.leader_moves import (
    LeaderCheck,
    SentTo,
    moved_partitions,
    plan_leader_moves,
)

MS = 1_000_000  # ns


def test_a_partition_moved_when_its_leader_epoch_went_up() -> None:
    sent = [SentTo("t", 0, 3), SentTo("t", 1, 3), SentTo("u", 0, 7)]
    epochs = {("t", 0): 4, ("t", 1): 3, ("u", 0): 7}
    assert moved_partitions(sent, epochs) == {("t", 0)}


def test_a_partition_the_metadata_forgot_has_not_moved() -> None:
    # Invalidated metadata (no epoch now) is no news of a new leader.
    assert moved_partitions([SentTo("t", 0, 3)], {}) == set()


def test_an_older_epoch_in_the_metadata_moves_nothing() -> None:
    # A broker whose cache lags answered the refresh: what it says is not newer.
    assert moved_partitions([SentTo("t", 0, 5)], {("t", 0): 4}) == set()


def test_every_old_epoch_batch_of_a_moved_partition_moves_and_empty_requests_go() -> None:
    # Request "a" went to the silent host with partitions 0 and 1; request "b" too, later, with
    # partition 0 only. Partition 0 moved, partition 1 did not (its leader is elsewhere, alive).
    requests = {
        "a": [SentTo("t", 0, 2), SentTo("t", 1, 5)],
        "b": [SentTo("t", 0, 2)],
    }
    plan = plan_leader_moves(requests, {("t", 0): 3, ("t", 1): 5}, idempotent=True)
    assert plan.retry == {"a": [0], "b": [0]}
    # "a" still carries partition 1's batch: its answer is still wanted, for that batch only.
    assert plan.abandon == ["b"]


def test_a_batch_sent_under_the_new_epoch_stays() -> None:
    # After a refresh, the partition's next batch went to the new leader: it is where it
    # belongs, and the older one at the old leader moves (to wait behind it: no overtaking,
    # the accumulator retries only once nothing of the partition is in flight).
    requests = {"old": [SentTo("t", 0, 2)], "new": [SentTo("t", 0, 3)]}
    plan = plan_leader_moves(requests, {("t", 0): 3}, idempotent=True)
    assert plan.retry == {"old": [0]}
    assert plan.abandon == ["old"]


def test_batches_that_moved_before_are_not_moved_again() -> None:
    requests = {"a": [None, SentTo("t", 1, 5)]}
    plan = plan_leader_moves(requests, {("t", 0): 9, ("t", 1): 6}, idempotent=True)
    # Only partition 1's batch is left in it, and it moves: nothing waits on "a" now.
    assert plan.retry == {"a": [1]}
    assert plan.abandon == ["a"]


def test_nothing_moves_without_idempotence() -> None:
    # A resend could write a batch twice: the new leader may hold it already and cannot know.
    requests = {"a": [SentTo("t", 0, 2)]}
    plan = plan_leader_moves(requests, {("t", 0): 3}, idempotent=False)
    assert plan.retry == {}
    assert plan.abandon == []


def test_nothing_moves_while_the_leaders_stay() -> None:
    requests = {"a": [SentTo("t", 0, 2), SentTo("t", 1, 2)]}
    plan = plan_leader_moves(requests, {("t", 0): 2, ("t", 1): 2}, idempotent=True)
    assert plan.retry == {} and plan.abandon == []


def test_the_metadata_is_asked_only_once_a_request_is_slow_and_at_a_bounded_rate() -> None:
    check = LeaderCheck(slow_after_ms=1000, interval_ms=250)
    sent = 0
    # Answers coming back promptly: the oldest request is young, never a look.
    assert not check.due(sent, 999 * MS)
    assert check.due(sent, 1000 * MS)
    assert not check.due(sent, 1100 * MS)
    assert not check.due(sent, 1249 * MS)
    assert check.due(sent, 1250 * MS)
    # A young oldest request again (the slow one was answered): no look, however long since.
    assert not check.due(5000 * MS, 5500 * MS)


def test_the_requests_are_looked_at_again_only_when_the_metadata_learnt_something() -> None:
    check = LeaderCheck(slow_after_ms=1000, interval_ms=250)
    assert check.news(0)  # the first look
    assert not check.news(0)
    assert check.news(1)
    assert not check.news(1)
