"""The checker itself, on histories made by hand: each kind of anomaly is caught, and the
legitimate histories that look like one are not."""

from __future__ import annotations

from collections import Counter

from tests.support.checker import (
    Ack,
    Commit,
    FailedSend,
    Fault,
    History,
    Limits,
    Poll,
    Rebalance,
    Refused,
    Revocation,
    Unresolved,
    aborted_reads,
    anomaly_total,
    by_partition,
    check,
    holdings,
    longest_read_gaps,
    longest_write_gaps,
    ownership_overlaps,
)

INF = float("inf")


def clean() -> History:
    """p1 writes 6 records to partition 0 at t=0..5; member a gains the partition, reads 0-2 and
    commits 3; a dies (t=3.8), and b, gaining the partition in a rebalance from t=11 to 11.5,
    reads 3-5 from the committed 3 and commits 6."""
    log = [(offset, f"p1-{offset}".encode()) for offset in range(6)]
    return History(
        acks=[Ack(value, 0, offset, at=float(offset)) for offset, value in log],
        attempts=[float(offset) for offset in range(6)],
        final_log={0: log},
        polls=[
            Poll("a", 3.0, tuple((0, offset, value) for offset, value in log[:3])),
            Poll("b", 4.0, ()),
            Poll("b", 12.0, tuple((0, offset, value) for offset, value in log[3:])),
        ],
        rebalances=[Rebalance("a", 0.0, 0.5, frozenset({0})),
                    Rebalance("b", 11.0, 11.5, frozenset({0}))],
        commits=[Commit("a", 3.5, 0, 3, started=3.2), Commit("b", 13.0, 0, 6, started=12.5)],
        faults=[Fault(3.8, "kill-member", "a", healed_at=4.0)],
        end=20.0,
    )


def reads(history: History, member: str, at: float, offsets: range) -> Poll:
    """A poll of `member` at `at` that received these offsets of partition 0."""
    return Poll(member, at, tuple((0, o, v) for o, v in history.final_log[0] if o in offsets))


def messages(history: History) -> list[str]:
    """The position anomalies `check` finds, as the one-line messages a report prints."""
    return [str(anomaly) for anomaly in check(history).skipped_or_backwards]


def test_a_clean_history_passes() -> None:
    verdict = check(clean(), Limits(default_resume_within_s=10))
    assert verdict.ok, verdict.summary()
    assert verdict.summary()["records_acknowledged"] == 6
    assert verdict.longest_unavailability_s == 1.0
    assert verdict.longest_read_unavailability_s == 3.0


# ------------------------------------------------------------------------- data anomalies


def test_a_lost_acknowledged_write_is_caught() -> None:
    history = clean()
    history.final_log[0] = history.final_log[0][:-1]
    verdict = check(history, Limits(default_resume_within_s=10))
    assert [ack.offset for ack in verdict.lost] == [5]


def test_a_record_read_then_gone_from_the_log_is_a_lost_read() -> None:
    history = clean()
    history.final_log[0] = history.final_log[0][:2]
    history.acks = history.acks[:2]  # not even acknowledged: a read is a promise too
    verdict = check(history, Limits(default_resume_within_s=10))
    assert [(p, o) for p, o, _v in verdict.lost_reads] == [(0, 2), (0, 3), (0, 4), (0, 5)]
    assert verdict.summary()["lost_reads"] == 4
    assert not verdict.ok


def test_an_offset_read_with_two_values_is_caught() -> None:
    history = clean()
    history.polls.append(Poll("c", 14.0, ((0, 2, b"p9-9"),)))
    assert check(history).conflicting_offsets == [(0, 2)]


def test_a_duplicate_and_a_reordering_are_caught() -> None:
    history = clean()
    history.final_log[0] = [*history.final_log[0], (6, b"p1-2"), (7, b"p1-1")]
    verdict = check(history)
    assert verdict.duplicated == [b"p1-1", b"p1-2"]
    assert len(verdict.reordered) >= 1


def test_an_acknowledged_record_no_poll_received_is_unconsumed() -> None:
    history = clean()
    history.polls[2] = reads(history, "b", 12.0, range(3, 5))
    verdict = check(history, Limits(default_resume_within_s=10))
    assert [ack.offset for ack in verdict.unconsumed] == [5]
    assert verdict.summary()["unconsumed"] == 1
    assert not verdict.ok


# --------------------------------------------------------------------- consumer positions


def test_a_gap_within_an_ownership_is_caught() -> None:
    history = clean()
    history.polls[0] = Poll("a", 3.0, ((0, 0, b"p1-0"), (0, 2, b"p1-2")))
    assert messages(history) == ["a read 0@2, expected 1"]
    [anomaly] = check(history).skipped_or_backwards
    assert (anomaly.member, anomaly.partition, anomaly.offset, anomaly.kind) == ("a", 0, 2, "skip")


def test_a_member_going_back_without_a_rebalance_is_caught() -> None:
    history = clean()
    history.polls.append(reads(history, "a", 3.3, range(1, 2)))
    assert messages(history) == ["a read 0@1, expected 3"]
    [anomaly] = check(history).skipped_or_backwards
    assert (anomaly.partition, anomaly.offset, anomaly.kind) == (0, 1, "backwards")


def test_a_resume_at_exactly_the_committed_offset_after_a_rebalance_passes() -> None:
    history = clean()
    assert history.polls[2].records[0][:2] == (0, 3)  # b starts where a committed
    assert not check(history).skipped_or_backwards


def test_a_rewind_after_a_rebalance_below_the_committed_offset_is_caught() -> None:
    history = clean()
    # b gains the partition after a's commit of 3 was answered, yet starts at 2: at or below
    # the committed offset is not enough, it must be the committed offset.
    history.polls[2] = reads(history, "b", 12.0, range(2, 6))
    assert messages(history) == ["b started 0 at 2; the group's committed offset then was [3]"]
    [anomaly] = check(history).skipped_or_backwards
    assert (anomaly.partition, anomaly.offset, anomaly.kind) == (0, 2, "start")


def test_starting_past_the_committed_offset_is_caught() -> None:
    history = clean()
    history.polls[2] = reads(history, "b", 12.0, range(4, 6))
    assert messages(history) == [
        "b started 0 at 4; the group's committed offset then was [3]"]


def test_regaining_what_it_had_goes_back_to_the_committed_offset() -> None:
    # a reads 0-2 and commits 3, reads 3-4 but its commit of 5 never goes out; its session
    # expires, and within one poll it gives up the partition and claims it back. Its assignment
    # is the same before and after, yet it must read again from the committed 3: that is no
    # rewind, and carrying on at 5 is a skip.
    history = clean()
    history.polls[1:] = [reads(history, "a", 4.0, range(3, 5)),
                         reads(history, "a", 6.0, range(3, 6))]
    history.rebalances[1] = Rebalance("a", 5.0, 5.5, frozenset({0}))
    history.commits[1] = Commit("a", 6.5, 0, 6, started=6.2)
    assert check(history, Limits(default_resume_within_s=10)).ok
    history.polls[2] = reads(history, "a", 6.0, range(5, 6))
    assert messages(history) == [
        "a started 0 at 5; the group's committed offset then was [3]"]


def test_a_commit_racing_the_rebalance_passes() -> None:
    # a asked to commit 3 before b's rebalance ended, and its answer came after: b may have
    # read either the commit before it (none: 0) or 3. Both are legitimate; 1 is not.
    history = clean()
    history.commits[0] = Commit("a", 12.5, 0, 3, started=3.2)
    assert check(history, Limits(default_resume_within_s=10)).ok
    history.polls[2] = reads(history, "b", 12.0, range(6))
    assert not check(history).skipped_or_backwards  # from 0: the committed offset until 12.5
    history.polls[2] = reads(history, "b", 12.0, range(1, 6))
    assert messages(history) == [
        "b started 0 at 1; the group's committed offset then was [0, 3]"]


def test_a_commit_asked_for_after_the_rebalance_does_not_count() -> None:
    # A commit of 4 asked at 11.8, after b's rebalance read the committed offsets (11.5):
    # b cannot have started from it.
    history = clean()
    history.commits.insert(1, Commit("a", 11.9, 0, 4, started=11.8))
    history.polls[2] = reads(history, "b", 12.0, range(4, 6))
    assert messages(history) == [
        "b started 0 at 4; the group's committed offset then was [3]"]


def test_a_failed_commit_may_have_been_stored() -> None:
    history = clean()
    history.commits[0] = Commit("a", INF, 0, 3, started=3.2)  # timed out: in or not, unknown
    assert check(history, Limits(default_resume_within_s=10)).ok


def test_a_commit_going_back_is_caught() -> None:
    history = clean()
    history.commits.append(Commit("a", 15.0, 0, 2))
    assert check(history).committed_backwards == [(0, 6, 2)]


# ---------------------------------------------------------------------- group ownership


def test_a_clean_hand_over_is_no_overlap() -> None:
    # clean(): a reads partition 0 last at 3 s, b gains it at 11.5 s.
    history = clean()
    assert holdings(history) == {0: {"a": [(0.5, 3.0)], "b": [(11.5, 12.0)]}}
    assert not ownership_overlaps(history)
    # Told to give it up just before b gains it: still clean.
    history.revocations.append(Revocation("a", 11.2, frozenset({0})))
    assert holdings(history)[0]["a"] == [(0.5, 11.2)]
    assert check(history, Limits(default_resume_within_s=10)).ok


def test_a_member_reading_a_partition_another_has_gained_is_an_overlap() -> None:
    # a's session expired unnoticed (a zombie): b gains the partition and reads it from the
    # committed 3, while a still reads it at 12.5 s.
    history = clean()
    history.polls.append(Poll("a", 12.5, ()))
    history.polls.append(reads(history, "a", 12.6, range(3, 4)))
    [overlap] = ownership_overlaps(history)
    assert (overlap.partition, overlap.first, overlap.second) == (0, "a", "b")
    assert (overlap.since, overlap.until) == (11.5, 12.0)
    assert str(overlap) == "a and b both held 0 from 11.5 to 12"
    verdict = check(history, Limits(default_resume_within_s=10))
    assert verdict.summary()["ownership_overlaps"] == 1
    assert not verdict.ok


def test_a_read_by_the_old_owner_between_the_new_ones_gain_and_read_is_caught() -> None:
    history = clean()
    history.polls.append(reads(history, "a", 11.8, range(3, 4)))  # b gained at 11.5
    [overlap] = ownership_overlaps(history)
    # a held it from 0.5 s to that read, b from 11.5 s.
    assert (overlap.first, overlap.second, overlap.since, overlap.until) == ("a", "b", 11.5, 11.8)


def test_a_partition_gained_by_two_members_at_once_is_caught() -> None:
    # Both gain partition 0 in the same rebalance, and both read it, each from the start.
    history = clean()
    history.rebalances[1] = Rebalance("b", 0.0, 0.6, frozenset({0}))
    history.polls[1] = reads(history, "b", 4.0, range(3))
    found = ownership_overlaps(history)
    assert [(o.first, o.second, o.since, o.until) for o in found] == [("a", "b", 0.6, 3.0)]
    assert by_partition(history, check(history))[0]["ownership_overlaps"] == 1


def test_a_revocation_after_the_new_owner_gained_is_an_overlap_without_a_read() -> None:
    # a is told to give the partition up only after b gained it: they held it at once, though
    # a read nothing meanwhile.
    history = clean()
    history.revocations.append(Revocation("a", 11.7, frozenset({0})))
    [overlap] = ownership_overlaps(history)
    assert (overlap.since, overlap.until) == (11.5, 11.7)


def test_reading_a_partition_after_giving_it_up_while_another_holds_it_is_caught() -> None:
    history = clean()
    history.revocations.append(Revocation("a", 3.5, frozenset({0})))
    history.polls.append(reads(history, "a", 11.9, range(3, 4)))  # no rebalance gave it back
    assert [(o.since, o.until) for o in ownership_overlaps(history)] == [(11.9, 11.9)]
    history.polls[-1] = reads(history, "a", 12.0, range(3, 4))  # as b read it
    assert [(o.since, o.until) for o in ownership_overlaps(history)] == [(12.0, 12.0)]
    history.polls[-1] = reads(history, "a", 11.5, range(3, 4))  # as b gained it: a hand-over
    assert not ownership_overlaps(history)


def test_two_members_reading_one_partition_at_the_same_moment_is_caught() -> None:
    # No rebalance recorded (a group settled before the history began): the reads alone.
    history = History(final_log={0: [(0, b"p-0"), (1, b"p-1")]},
                      polls=[Poll("a", 1.0, ((0, 0, b"p-0"),)),
                             Poll("b", 1.0, ((0, 1, b"p-1"),)),
                             Poll("a", 2.0, ((0, 1, b"p-1"),))])
    assert [(o.first, o.second, o.since) for o in ownership_overlaps(history)] == [
        ("a", "b", 1.0)]


def test_losing_a_session_and_regaining_the_partition_is_no_overlap() -> None:
    # a's session expired at some moment after its read at 3 s; b held the partition from 5.5
    # to 6 s, revoked; a regains it at 8 s and reads it again. Nobody held it twice.
    history = clean()
    history.polls[1:] = [reads(history, "b", 6.0, range(3, 4)),
                         reads(history, "a", 9.0, range(4, 6))]
    history.rebalances[1:] = [Rebalance("b", 5.0, 5.5, frozenset({0})),
                              Rebalance("a", 7.0, 8.0, frozenset({0}))]
    history.revocations.append(Revocation("b", 6.5, frozenset({0})))
    history.commits[1:] = [Commit("b", 6.2, 0, 4, started=6.1), Commit("a", 9.5, 0, 6)]
    assert holdings(history)[0] == {"a": [(0.5, 3.0), (8.0, 9.0)], "b": [(5.5, 6.5)]}
    assert not ownership_overlaps(history)
    assert check(history, Limits(default_resume_within_s=10)).ok


# ------------------------------------------------------------------------------- sends


def test_sends_unresolved_at_the_end_are_reported_and_fail_the_verdict() -> None:
    history = clean()
    history.unresolved = [Unresolved(b"p1-6", None, 5.5), Unresolved(b"p1-7", 0, 5.6)]
    verdict = check(history, Limits(default_resume_within_s=10))
    assert [send.value for send in verdict.unresolved] == [b"p1-6", b"p1-7"]
    assert verdict.summary()["sends_unresolved"] == 2
    assert verdict.over_limits == ["2 sends unresolved at the end, limit 0"]
    assert not verdict.ok
    allowed = check(history, Limits(default_resume_within_s=10, max_unresolved_sends=2))
    assert allowed.ok and len(allowed.unresolved) == 2  # allowed, still reported


def test_failed_sends_are_counted_and_bounded() -> None:
    history = clean()
    history.refused = [Refused(b"p1-8", 0, 5.0)]
    history.failed = [FailedSend(b"p1-6", 0, 5.5, "RequestTimedOutError"),
                      FailedSend(b"p1-7", None, 5.6, "NotEnoughReplicasError")]
    unbounded = check(history, Limits(default_resume_within_s=10))
    assert unbounded.failed_sends == 3 and unbounded.summary()["sends_failed"] == 3
    assert unbounded.ok  # no limit given
    verdict = check(history, Limits(default_resume_within_s=10, max_failed_sends=2))
    assert verdict.over_limits == ["3 sends failed, limit 2"]
    assert not verdict.ok


# ------------------------------------------------------------------------------- liveness


def test_writes_that_do_not_resume_after_a_heal_are_caught() -> None:
    history = clean()
    history.faults.append(Fault(10.0, "kill-broker", "1", healed_at=11.0))
    verdict = check(history, Limits(resume_within_s={"kill-broker": 3},
                                    default_resume_within_s=10))
    assert [f.kind for f in verdict.writes_not_resumed_after] == ["kill-broker"]
    assert not verdict.reads_not_resumed_after  # b read at 12.0
    assert verdict.summary()["faults_after_which_writes_did_not_resume"] == 1


def test_reads_that_do_not_resume_after_a_heal_are_caught() -> None:
    history = clean()
    history.acks.append(Ack(b"p1-6", 0, 6, at=14.0))
    history.final_log[0].append((6, b"p1-6"))
    history.polls.append(reads(history, "b", 14.5, range(6, 7)))
    history.faults.append(Fault(13.0, "restart-zookeeper", healed_at=13.5))
    verdict = check(history, Limits(resume_within_s={"restart-zookeeper": 0.5},
                                    default_resume_within_s=10))
    assert [f.kind for f in verdict.reads_not_resumed_after] == ["restart-zookeeper"]
    assert not verdict.writes_not_resumed_after
    assert verdict.summary()["faults_after_which_reads_did_not_resume"] == 1


def test_resuming_is_measured_from_the_heal_not_the_fault() -> None:
    # Injected at 3.8, healed at 11: writes (none after 5) have not resumed; had it been
    # measured from 3.8, the ack at 5.0 would have passed.
    history = clean()
    history.faults[0] = Fault(3.8, "kill-member", "a", healed_at=11.0)
    verdict = check(history, Limits(default_resume_within_s=10))
    assert [f.kind for f in verdict.writes_not_resumed_after] == ["kill-member"]


def test_a_fault_near_the_end_is_judged_not_skipped() -> None:
    history = clean()
    history.faults.append(Fault(19.0, "kill-controller", "0", healed_at=19.5))
    verdict = check(history, Limits(default_resume_within_s=30))
    assert [f.kind for f in verdict.writes_not_resumed_after] == ["kill-controller"]
    assert [f.kind for f in verdict.reads_not_resumed_after] == ["kill-controller"]
    assert not verdict.ok


def test_write_unavailability_beyond_the_limit_is_caught() -> None:
    history = clean()
    history.attempts.append(6.0)
    history.acks.append(Ack(b"p1-6", 0, 6, at=16.0))
    history.final_log[0].append((6, b"p1-6"))
    history.polls.append(reads(history, "b", 16.5, range(6, 7)))
    verdict = check(history, Limits(default_resume_within_s=20, max_write_unavailability_s=5,
                                    max_read_unavailability_s=20))
    assert verdict.longest_unavailability_s == 11.0
    assert verdict.over_limits == ["writes unavailable for 11.0 s, limit 5 s"]


def test_writes_that_stop_for_good_are_unavailable_until_the_last_attempt() -> None:
    history = clean()
    history.attempts += [6.0, 18.0]  # attempted, never acknowledged
    verdict = check(history, Limits(default_resume_within_s=10, max_write_unavailability_s=5))
    assert verdict.longest_unavailability_s == 13.0
    assert verdict.over_limits == ["writes unavailable for 13.0 s, limit 5 s"]
    history.acks = []
    assert check(history).longest_unavailability_s == 18.0  # nothing acknowledged at all


def test_read_unavailability_beyond_the_limit_is_caught() -> None:
    history = clean()
    history.acks.append(Ack(b"p1-6", 0, 6, at=16.0))
    history.attempts.append(15.5)
    history.final_log[0].append((6, b"p1-6"))
    history.polls.append(reads(history, "b", 16.0, range(6, 7)))
    verdict = check(history, Limits(default_resume_within_s=20, max_write_unavailability_s=20,
                                    max_read_unavailability_s=5))
    assert verdict.longest_read_unavailability_s == 9.0  # 3.0 to 12.0
    assert verdict.over_limits == ["reads unavailable for 9.0 s, limit 5 s"]


def test_client_errors_over_their_limit_are_caught() -> None:
    history = clean()
    history.client_errors = Counter({"CommitFailedError": 3, "RequestTimedOutError": 1,
                                     "TypeError": 1})
    limits = Limits(default_resume_within_s=10,
                    max_client_errors={"CommitFailedError": 5, "RequestTimedOutError": 0},
                    other_client_errors=0)
    verdict = check(history, limits)
    assert verdict.client_errors == {"CommitFailedError": 3, "RequestTimedOutError": 1,
                                     "TypeError": 1}
    assert verdict.over_limits == ["1 client errors RequestTimedOutError, limit 0",
                                   "1 client errors TypeError, limit 0"]
    assert verdict.summary()["client_errors"] == verdict.client_errors


def test_write_gaps_are_per_partition() -> None:
    acks = [Ack(b"p-1", 0, 0, 1.0), Ack(b"p-2", 0, 1, 2.0), Ack(b"p-3", 0, 2, 9.5),
            Ack(b"q-1", 1, 0, 1.0), Ack(b"q-2", 1, 1, 5.0), Ack(b"q-3", 1, 2, 9.0),
            Ack(b"q-4", 1, 3, 9.5)]
    assert longest_write_gaps(History(acks=acks, attempts=[1.0, 9.5])) == {0: 7.5, 1: 4.0}


def test_a_partition_that_stops_taking_writes_has_a_gap_to_the_end_of_the_run() -> None:
    # Partition 1 acknowledges up to 2 s, then nothing while sends go on to 9.5 s: its gap is
    # the 7.5 s after its last ack, which two acks alone would never show.
    acks = [Ack(b"p-1", 0, 0, 1.0), Ack(b"p-2", 0, 1, 2.0), Ack(b"p-3", 0, 2, 9.5),
            Ack(b"q-1", 1, 0, 1.0), Ack(b"q-2", 1, 1, 1.5), Ack(b"q-3", 1, 2, 2.0)]
    history = History(acks=acks, attempts=[1.0, 9.5])
    assert longest_write_gaps(history) == {0: 7.5, 1: 7.5}
    assert by_partition(history, check(history))[1]["longest_write_gap_s"] == 7.5


def test_the_stretch_before_a_partitions_first_ack_counts() -> None:
    history = History(acks=[Ack(b"p-1", 0, 0, 0.5), Ack(b"q-1", 1, 0, 6.0)],
                      attempts=[0.0, 6.0])
    assert longest_write_gaps(history) == {0: 5.5, 1: 6.0}


def test_a_partition_that_never_took_a_write_is_unavailable_the_whole_run() -> None:
    history = History(acks=[Ack(b"p-1", 0, 0, 1.0)], attempts=[0.0, 1.0, 8.0],
                      final_log={0: [(0, b"p-1")], 1: []})
    assert longest_write_gaps(history) == {0: 7.0, 1: 8.0}


def test_an_ack_after_the_last_attempt_ends_its_stretch_at_the_last_attempt() -> None:
    # A send attempted before the end, acknowledged 100 s later: the run ended at 10 s.
    history = History(acks=[Ack(b"p-1", 0, 0, 1.0), Ack(b"p-2", 0, 1, 110.0)],
                      attempts=[0.0, 10.0])
    assert longest_write_gaps(history) == {0: 9.0}


def test_a_refused_send_found_in_the_log_or_a_poll_is_an_aborted_read() -> None:
    history = History(
        refused=[Refused(b"p-1", 0, 1.0), Refused(b"p-2", 0, 2.0), Refused(b"p-3", 0, 3.0)],
        final_log={0: [(0, b"p-1")]},
        polls=[Poll("m", 4.0, ((0, 1, b"p-2"),))])
    assert [refused.value for refused in aborted_reads(history)] == [b"p-1", b"p-2"]
    assert not check(history).ok


def test_read_gaps_are_per_partition_and_only_while_writes_come_in() -> None:
    history = History(
        acks=[Ack(b"p-1", 0, 0, 0.0), Ack(b"p-2", 0, 1, 10.0),
              Ack(b"q-1", 1, 0, 0.0), Ack(b"q-2", 1, 1, 10.0)],
        polls=[Poll("m", 1.0, ((0, 0, b"p-1"), (1, 0, b"q-1"))),
               Poll("m", 9.0, ((1, 1, b"q-2"),)),
               Poll("m", 30.0, ((0, 1, b"p-2"),))])
    # Partition 0 read at 1 s, then not until after its last write at 10 s: 9 s unread.
    # Partition 1 read at 1 s and 9 s: its longest gap is 8 s.
    assert longest_read_gaps(history) == {0: 9.0, 1: 8.0}


# -------------------------------------------------------------------------- per partition


def anomalous_two_partitions() -> History:
    """Two partitions, each with its own anomalies, for `by_partition`.

    Partition 0: p-0..p-4 acknowledged at 0..4 s. Member a reads 0, 1, 3, 4 (a skip at 3;
    offset 2 is never read: unseen). Member b gains the partition at 7-7.5 s with nothing
    committed, yet starts at 4 instead of 0 (a wrong start).

    Partition 1: q-0, q-1 and q-3 acknowledged; a retry wrote q-1 twice (offsets 1 and 2), and
    a send of q-9 refused for certain was written anyway at offset 3, so the acknowledged q-3
    is lost (and, never read, unseen too). Member a reads 0-2, then 1 again (going backwards).
    """
    partition_0 = [(offset, f"p-{offset}".encode()) for offset in range(5)]
    partition_1 = [(0, b"q-0"), (1, b"q-1"), (2, b"q-1"), (3, b"q-9")]
    return History(
        acks=[*(Ack(value, 0, offset, at=float(offset)) for offset, value in partition_0),
              Ack(b"q-0", 1, 0, at=0.5), Ack(b"q-1", 1, 1, at=1.5),
              # Not a round figure, to see the gaps rounded: 3.8333333 - 1.5 = 2.3333333.
              Ack(b"q-3", 1, 3, at=3.8333333)],
        refused=[Refused(b"q-9", 1, at=3.0)],
        final_log={0: partition_0, 1: partition_1},
        polls=[
            Poll("a", 5.0, ((0, 0, b"p-0"), (0, 1, b"p-1"), (0, 3, b"p-3"), (0, 4, b"p-4"),
                            (1, 0, b"q-0"), (1, 1, b"q-1"), (1, 2, b"q-1"))),
            Poll("a", 6.0, ((1, 1, b"q-1"),)),
            Poll("b", 8.0, ((0, 4, b"p-4"),)),
        ],
        rebalances=[Rebalance("a", 0.0, 0.5, frozenset({0, 1})),
                    Rebalance("b", 7.0, 7.5, frozenset({0}))],
        end=10.0,
    )


def test_anomalies_are_reported_in_their_partition_and_kind() -> None:
    history = anomalous_two_partitions()
    per_partition = by_partition(history, check(history))
    assert per_partition == {
        0: {"lost": 0, "duplicated": 0, "offsets_with_two_values": 0, "reordered": 0,
            "lost_reads": 0, "non_monotonic_polls": 0, "poll_skips_without_rebalance": 1,
            "wrong_start_after_rebalance": 1, "unseen": 1, "aborted_reads": 0,
            "commits_going_back": 0, "ownership_overlaps": 0,
            "acknowledged": 5, "longest_write_gap_s": 1.0,
            # Acknowledged from 0 to 4 s, first read at 5 s: unread the whole time.
            "longest_read_gap_s": 4.0},
        1: {"lost": 1, "duplicated": 1, "offsets_with_two_values": 0, "reordered": 0,
            "lost_reads": 0, "non_monotonic_polls": 1, "poll_skips_without_rebalance": 0,
            "wrong_start_after_rebalance": 0, "unseen": 1, "aborted_reads": 1,
            "commits_going_back": 0, "ownership_overlaps": 0,
            "acknowledged": 3, "longest_write_gap_s": 2.333, "longest_read_gap_s": 3.333},
    }
    assert anomaly_total(per_partition) == 8  # 3 in partition 0, 5 in partition 1


def test_a_read_that_vanished_and_an_offset_with_two_values_count_in_their_partition() -> None:
    history = anomalous_two_partitions()
    # a reads on in partition 0 (5 follows its 4: no position anomaly), but offset 5 is not in
    # the final log; c, new and starting at 0 as it should, reads another value at 1@0. And a,
    # reading partition 0 at 9 s, still held it when b gained it at 7.5 s: an ownership overlap.
    history.polls += [Poll("a", 9.0, ((0, 5, b"p-5"),)), Poll("c", 9.0, ((1, 0, b"q-7"),))]
    per_partition = by_partition(history, check(history))
    assert (per_partition[0]["lost_reads"], per_partition[0]["offsets_with_two_values"]) == (1, 0)
    assert (per_partition[1]["lost_reads"], per_partition[1]["offsets_with_two_values"]) == (0, 1)
    assert (per_partition[0]["ownership_overlaps"], per_partition[1]["ownership_overlaps"]) == (
        1, 0)
    assert anomaly_total(per_partition) == 8 + 2 + 1


def test_a_clean_history_has_no_anomaly_in_any_partition() -> None:
    history = clean()
    # A send refused for certain and indeed never written: partition 2 shows up, with nothing
    # acknowledged: no read gap, and no write all run long (sends attempted from 0 to 5 s).
    history.refused.append(Refused(b"p2-0", 2, at=1.0))
    verdict = check(history, Limits(default_resume_within_s=10))
    assert verdict.ok, verdict.summary()
    per_partition = by_partition(history, verdict)
    assert sorted(per_partition) == [0, 2]
    assert per_partition[0]["acknowledged"] == 6
    assert per_partition[0]["longest_write_gap_s"] == 1.0
    assert per_partition[0]["longest_read_gap_s"] == 3.0
    assert per_partition[2] == {**dict.fromkeys(per_partition[2], 0), "longest_write_gap_s": 5.0}
    assert all(count == 0 for row in per_partition.values() for kind, count in row.items()
               if kind not in {"acknowledged", "longest_write_gap_s", "longest_read_gap_s"})
    assert anomaly_total(per_partition) == 0
