"""A checker of what a workload saw, in the spirit of Jepsen's Kafka and Redpanda analyses.

Pure: it takes the history (acknowledged writes, the final log, every consumer poll, every
commit, the faults) and says what went wrong. The workload and the nemesis record; this judges.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass, field
from itertools import pairwise


@dataclass(frozen=True)
class Ack:
    """A write the cluster acknowledged: `value` is at `offset` of `partition`."""

    value: bytes
    partition: int
    offset: int
    at: float


@dataclass(frozen=True)
class Poll:
    """Records one consumer received in one poll: `(partition, offset, value)`."""

    member: str
    at: float
    records: tuple[tuple[int, int, bytes], ...]


@dataclass(frozen=True)
class Commit:
    member: str
    at: float
    partition: int
    offset: int


@dataclass(frozen=True)
class Fault:
    at: float
    kind: str
    target: str = ""


@dataclass
class History:
    acks: list[Ack] = field(default_factory=list)
    attempts: list[float] = field(default_factory=list)  # when each send was attempted
    final_log: dict[int, list[tuple[int, bytes]]] = field(default_factory=dict)
    polls: list[Poll] = field(default_factory=list)
    commits: list[Commit] = field(default_factory=list)
    faults: list[Fault] = field(default_factory=list)
    end: float = 0.0


@dataclass
class Verdict:
    faults: int
    acknowledged: int
    lost: list[Ack]
    conflicting_offsets: list[tuple[int, int]]
    duplicated: list[bytes]
    reordered: list[tuple[int, bytes, bytes]]
    skipped_or_backwards: list[str]
    committed_backwards: list[tuple[int, int, int]]
    not_resumed_after: list[Fault]
    longest_unavailability_s: float

    @property
    def ok(self) -> bool:
        return not (self.lost or self.conflicting_offsets or self.duplicated or self.reordered
                    or self.skipped_or_backwards or self.committed_backwards
                    or self.not_resumed_after)

    def summary(self) -> dict[str, object]:
        return {
            "faults_injected": self.faults,
            "records_acknowledged": self.acknowledged,
            "lost": len(self.lost),
            "offsets_with_two_values": len(self.conflicting_offsets),
            "duplicated": len(self.duplicated),
            "reordered": len(self.reordered),
            "polls_skipping_or_going_back": len(self.skipped_or_backwards),
            "commits_going_back": len(self.committed_backwards),
            "faults_not_recovered_from": len(self.not_resumed_after),
            "longest_unavailability_s": round(self.longest_unavailability_s, 3),
        }


def sequence_of(value: bytes) -> tuple[str, int]:
    """Workload values are `<producer>-<sequence>`; order is per producer and partition."""
    producer, _, number = value.decode().rpartition("-")
    return producer, int(number)


def check(history: History, *, resume_within_s: float = 30.0) -> Verdict:
    stored = {(p, offset): value for p, records in history.final_log.items()
              for offset, value in records}

    lost = [ack for ack in history.acks if stored.get((ack.partition, ack.offset)) != ack.value]

    seen_at: dict[tuple[int, int], bytes] = dict(stored)
    conflicting = set()
    for poll in history.polls:
        for partition, offset, value in poll.records:
            known = seen_at.setdefault((partition, offset), value)
            if known != value:
                conflicting.add((partition, offset))

    counts: dict[bytes, int] = defaultdict(int)
    for records in history.final_log.values():
        for _offset, value in records:
            counts[value] += 1
    duplicated = sorted(value for value, count in counts.items() if count > 1)

    reordered = []
    for partition, records in history.final_log.items():
        last: dict[str, tuple[int, bytes]] = {}
        for _offset, value in sorted(records):
            producer, number = sequence_of(value)
            if producer in last and number < last[producer][0]:
                reordered.append((partition, last[producer][1], value))
            last[producer] = (number, value)

    # A member's polls of a partition go up by one; a jump is allowed only back to (or below)
    # what the group had committed, which is where a new owner resumes.
    committed_so_far: dict[int, int] = {}
    commits = sorted(history.commits, key=lambda c: c.at)
    commit_index = 0
    position: dict[tuple[str, int], int] = {}
    skipped = []
    for poll in sorted(history.polls, key=lambda p: p.at):
        while commit_index < len(commits) and commits[commit_index].at <= poll.at:
            commit = commits[commit_index]
            committed_so_far[commit.partition] = max(
                committed_so_far.get(commit.partition, 0), commit.offset)
            commit_index += 1
        for partition, offset, _value in poll.records:
            key = (poll.member, partition)
            expected = position.get(key)
            resumes = offset <= committed_so_far.get(partition, 0)
            if expected is not None and offset != expected and not resumes:
                skipped.append(f"{poll.member} read {partition}@{offset}, expected {expected}")
            elif expected is None and offset > committed_so_far.get(partition, 0):
                skipped.append(f"{poll.member} started {partition} at {offset}, past the "
                               f"committed {committed_so_far.get(partition, 0)}")
            position[key] = offset + 1

    backwards = []
    highest: dict[int, int] = {}
    for commit in commits:
        if commit.offset < highest.get(commit.partition, -1):
            backwards.append((commit.partition, highest[commit.partition], commit.offset))
        highest[commit.partition] = max(highest.get(commit.partition, -1), commit.offset)

    poll_times = sorted(poll.at for poll in history.polls if poll.records)
    not_resumed = []
    for fault in history.faults:
        later = [t for t in poll_times if t > fault.at]
        if fault.at + resume_within_s < history.end and not (
            later and later[0] <= fault.at + resume_within_s
        ):
            not_resumed.append(fault)

    # The longest stretch with sends attempted but none acknowledged.
    ack_times = sorted(ack.at for ack in history.acks)
    longest = 0.0
    attempts = sorted(history.attempts)
    if attempts:
        marks = [attempts[0], *ack_times]
        longest = max((b - a for a, b in pairwise(marks)), default=0.0)
    return Verdict(
        faults=len(history.faults),
        acknowledged=len(history.acks),
        lost=lost,
        conflicting_offsets=sorted(conflicting),
        duplicated=duplicated,
        reordered=reordered,
        skipped_or_backwards=skipped,
        committed_backwards=backwards,
        not_resumed_after=not_resumed,
        longest_unavailability_s=longest,
    )


@dataclass
class Deliveries:
    """How often a group received each acknowledged record, for runs where it should be once:
    no member joins or leaves, and each member commits what it read before polling again."""

    acknowledged: int
    consumed: int
    unconsumed: list[Ack]
    consumed_twice: list[tuple[int, int]]  # (partition, offset) received more than once

    @property
    def exactly_once(self) -> bool:
        return not (self.unconsumed or self.consumed_twice)


def check_deliveries(history: History) -> Deliveries:
    """Every acknowledged record received by exactly one poll of the group. (That what it
    received is what was acknowledged there is `check`'s: lost and conflicting offsets.)"""
    received = Counter((partition, offset) for poll in history.polls
                       for partition, offset, _value in poll.records)
    return Deliveries(
        acknowledged=len(history.acks),
        consumed=sum(received.values()),
        unconsumed=[ack for ack in history.acks if not received[(ack.partition, ack.offset)]],
        consumed_twice=sorted(key for key, count in received.items() if count > 1),
    )
