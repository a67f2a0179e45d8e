"""The checker itself, on histories made by hand: each kind of violation is caught."""

from __future__ import annotations

from .checker import Ack, Commit, Fault, History, Poll, check


def clean() -> History:
    log = [(offset, f"p1-{offset}".encode()) for offset in range(6)]
    return History(
        acks=[Ack(value, 0, offset, at=float(offset)) for offset, value in log],
        attempts=[float(offset) for offset in range(6)],
        final_log={0: log},
        polls=[
            Poll("a", 10.0, tuple((0, offset, value) for offset, value in log[:3])),
            Poll("b", 12.0, tuple((0, offset, value) for offset, value in log[3:])),
        ],
        commits=[Commit("a", 11.0, 0, 3), Commit("b", 13.0, 0, 6)],
        faults=[Fault(11.5, "kill-member", "a")],
        end=20.0,
    )


def test_a_clean_history_passes() -> None:
    verdict = check(clean())
    assert verdict.ok, verdict.summary()
    assert verdict.summary()["records_acknowledged"] == 6
    assert verdict.longest_unavailability_s == 1.0


def test_a_lost_acknowledged_write_is_caught() -> None:
    history = clean()
    history.final_log[0] = history.final_log[0][:-1]
    verdict = check(history)
    assert [ack.offset for ack in verdict.lost] == [5]


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


def test_a_consumer_skipping_ahead_is_caught() -> None:
    history = clean()
    log = history.final_log[0]
    history.polls[1] = Poll("b", 12.0, ((0, 4, log[4][1]), (0, 5, log[5][1])))
    verdict = check(history)
    assert verdict.skipped_or_backwards
    assert "past the committed 3" in verdict.skipped_or_backwards[0]


def test_a_commit_going_back_is_caught() -> None:
    history = clean()
    history.commits.append(Commit("a", 15.0, 0, 2))
    assert check(history).committed_backwards == [(0, 6, 2)]


def test_a_group_that_never_resumes_is_caught() -> None:
    history = clean()
    history.faults.append(Fault(13.0, "kill-broker", "1"))
    history.end = 100.0
    verdict = check(history, resume_within_s=5)
    assert [fault.kind for fault in verdict.not_resumed_after] == ["kill-broker"]
