"""A checker of what a workload saw, in the spirit of Jepsen's Kafka and Redpanda analyses.

Pure: it takes the history (every send attempted and how it ended, the final log, every
consumer poll, every partition a member gained or gave up in a rebalance, every commit, the
faults with when each was healed, the client errors) and says what went wrong. The workload
and the nemesis record; this judges.
`by_partition` breaks the verdict down per partition under Jepsen's names for the anomalies,
so that a report shows where they happened, not only how many there were.

What counts as wrong:

- an acknowledged write missing from the final log, or found there with another value (lost);
- a send refused for certain, found in the log or read anyway (an aborted read);
- a record a consumer read that is not in the final log (a lost read: it was visible, then gone);
- an offset read with two values;
- a value twice in the log, or a producer's values out of order in a partition;
- an acknowledged record that no poll received (unconsumed);
- a member's reads of a partition not going up by exactly one offset while it owns it; and,
  when it (re)gains the partition in a rebalance, starting anywhere but at the group's committed
  offset of that moment;
- two members of the group holding or reading one partition at once (an ownership overlap): the
  hand-over of a rebalance is the old owner's last read, or its revocation, before the new
  owner gains the partition, never after;
- a commit going back;
- after a fault is healed, writes or reads not resuming within the bound for its kind
  (a fault too close to the end of the history to be judged counts as not resumed: the
  workload must run long enough after the last fault);
- unavailability, failed sends, or client errors of a kind, beyond the limits given; and any
  send still unresolved at the end (neither acknowledged nor failed), unless a limit allows it.

Write unavailability, per partition as over the whole topic, runs from the first send attempted
to the last: the stretch before a partition's first acknowledgement and the one after its last
count, so that a partition that never takes a write again is seen.
"""

from __future__ import annotations

import bisect
from collections import Counter, defaultdict
from collections.abc import Mapping
from dataclasses import dataclass, field
from itertools import combinations, pairwise


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
class Rebalance:
    """`member` (re)gained `partitions` in a rebalance that began at `started` and ended at
    `at`; it reads them from the group's committed offsets, fetched in between.

    Recorded when it happens, not read off the member's assignment after a poll: a member whose
    session expired gives up everything and claims it back within one poll, and its assignment
    looks the same before and after although it had to go back to the committed offsets."""

    member: str
    started: float
    at: float
    partitions: frozenset[int]


@dataclass(frozen=True)
class Revocation:
    """`member` gave up `partitions` at `at` because a rebalance moved them away (Kafka's
    onPartitionsRevoked), or because it left the group: it held them until then, and lets go
    of them only after. A member whose session expired loses its partitions without being told;
    its next `Rebalance` (or nothing) shows it."""

    member: str
    at: float
    partitions: frozenset[int]


@dataclass(frozen=True)
class Commit:
    """`member` committed `offset` for `partition`: asked at `started`, answered at `at`.

    A commit that failed (it timed out, say) may still have been stored: it is recorded with
    `at` infinite, never certainly in, but possibly from when it was asked.
    """

    member: str
    at: float
    partition: int
    offset: int
    started: float | None = None

    @property
    def asked(self) -> float:
        return self.at if self.started is None else self.started


@dataclass(frozen=True)
class Fault:
    """A fault injected at `at`, healed (everything it broke restored) at `healed_at`, on
    `node` where it is one node's (a multi-node bed's)."""

    at: float
    kind: str
    target: str = ""
    healed_at: float | None = None
    node: str = ""

    @property
    def healed(self) -> float:
        return self.at if self.healed_at is None else self.healed_at


@dataclass(frozen=True)
class Refused:
    """A send the client reported as failed for certain (refused before any append, such as
    NOT_ENOUGH_REPLICAS), unlike a timeout, after which the record may or may not be written."""

    value: bytes
    partition: int
    at: float


@dataclass(frozen=True)
class FailedSend:
    """A send the client reported as failed without certainty (a timeout, a retriable error on
    its last attempt): its record may be in the log all the same. `partition` is None when the
    producer chose it and never said."""

    value: bytes
    partition: int | None
    at: float
    error: str


@dataclass(frozen=True)
class Unresolved:
    """A send that still had no outcome when the workload, having waited for one, gave up on it
    at `at`: neither acknowledged nor failed. Its record may or may not be in the log."""

    value: bytes
    partition: int | None
    at: float


@dataclass
class History:
    acks: list[Ack] = field(default_factory=list)
    refused: list[Refused] = field(default_factory=list)
    failed: list[FailedSend] = field(default_factory=list)
    unresolved: list[Unresolved] = field(default_factory=list)
    attempts: list[float] = field(default_factory=list)  # when each send was attempted
    final_log: dict[int, list[tuple[int, bytes]]] = field(default_factory=dict)
    polls: list[Poll] = field(default_factory=list)
    rebalances: list[Rebalance] = field(default_factory=list)
    revocations: list[Revocation] = field(default_factory=list)
    commits: list[Commit] = field(default_factory=list)
    faults: list[Fault] = field(default_factory=list)
    client_errors: Counter[str] = field(default_factory=Counter)  # error class name -> count
    end: float = 0.0


@dataclass(frozen=True)
class Limits:
    """What a run may take: per fault kind, how soon after its heal writes and reads resume;
    the longest stretch without writes, or without reads; failed sends (refused or not) and
    sends left unresolved; client errors of each kind."""

    resume_within_s: Mapping[str, float] = field(default_factory=dict)
    default_resume_within_s: float = 30.0
    max_write_unavailability_s: float = float("inf")
    max_read_unavailability_s: float = float("inf")
    max_failed_sends: int | None = None  # None: not limited
    max_unresolved_sends: int = 0
    # Errors of a kind not listed are not limited unless `other_client_errors` says so.
    max_client_errors: Mapping[str, int] = field(default_factory=dict)
    other_client_errors: int | None = None

    def resume_bound(self, kind: str) -> float:
        return self.resume_within_s.get(kind, self.default_resume_within_s)


@dataclass(frozen=True)
class PositionAnomaly:
    """A member's read of `partition` at `offset` that was not where it should have been.

    `kind` is "skip" (beyond the next offset within an ownership), "backwards" (below it) or
    "start" (after (re)gaining the partition, away from the group's committed offset); `detail`
    says what was expected instead. Kept apart so a report can count them per partition and
    kind; `str` gives the one-line message."""

    member: str
    partition: int
    offset: int
    kind: str
    detail: str

    def __str__(self) -> str:
        if self.kind == "start":
            return f"{self.member} started {self.partition} at {self.offset}; {self.detail}"
        return f"{self.member} read {self.partition}@{self.offset}, {self.detail}"


@dataclass(frozen=True)
class OwnershipOverlap:
    """`first` and `second`, members of one group, both held or read `partition` from `since`
    to `until` (the same moment, when one of them only read it then)."""

    partition: int
    first: str
    second: str
    since: float
    until: float

    def __str__(self) -> str:
        return (f"{self.first} and {self.second} both held {self.partition} from "
                f"{self.since:g} to {self.until:g}")


@dataclass
class Verdict:
    faults: int
    acknowledged: int
    lost: list[Ack]
    aborted_reads: list[Refused]
    lost_reads: list[tuple[int, int, bytes]]
    conflicting_offsets: list[tuple[int, int]]
    duplicated: list[bytes]
    reordered: list[tuple[int, bytes, bytes]]
    unconsumed: list[Ack]
    skipped_or_backwards: list[PositionAnomaly]
    ownership_overlaps: list[OwnershipOverlap]
    committed_backwards: list[tuple[int, int, int]]
    writes_not_resumed_after: list[Fault]
    reads_not_resumed_after: list[Fault]
    longest_unavailability_s: float
    longest_read_unavailability_s: float
    failed_sends: int  # refused for certain or not
    unresolved: list[Unresolved]
    client_errors: dict[str, int]
    over_limits: list[str]

    @property
    def ok(self) -> bool:
        return not (self.lost or self.aborted_reads or self.lost_reads
                    or self.conflicting_offsets or self.duplicated or self.reordered
                    or self.unconsumed or self.skipped_or_backwards or self.ownership_overlaps
                    or self.committed_backwards or self.writes_not_resumed_after
                    or self.reads_not_resumed_after or self.over_limits)

    def summary(self) -> dict[str, object]:
        return {
            "faults_injected": self.faults,
            "records_acknowledged": self.acknowledged,
            "lost": len(self.lost),
            "aborted_reads": len(self.aborted_reads),
            "lost_reads": len(self.lost_reads),
            "offsets_with_two_values": len(self.conflicting_offsets),
            "duplicated": len(self.duplicated),
            "reordered": len(self.reordered),
            "unconsumed": len(self.unconsumed),
            "polls_skipping_or_going_back": len(self.skipped_or_backwards),
            "ownership_overlaps": len(self.ownership_overlaps),
            "commits_going_back": len(self.committed_backwards),
            "faults_after_which_writes_did_not_resume": len(self.writes_not_resumed_after),
            "faults_after_which_reads_did_not_resume": len(self.reads_not_resumed_after),
            "longest_unavailability_s": round(self.longest_unavailability_s, 3),
            "longest_read_unavailability_s": round(self.longest_read_unavailability_s, 3),
            "sends_failed": self.failed_sends,
            "sends_unresolved": len(self.unresolved),
            "client_errors": dict(sorted(self.client_errors.items())),
            "over_limits": self.over_limits,
        }


def sequence_of(value: bytes) -> tuple[str, int]:
    """Workload values are `<producer>-<sequence>`; order is per producer and partition."""
    producer, _, number = value.decode().rpartition("-")
    return producer, int(number)


def check(history: History, limits: Limits | None = None) -> Verdict:
    limits = limits or Limits()
    stored = {(p, offset): value for p, records in history.final_log.items()
              for offset, value in records}
    lost = [ack for ack in history.acks if stored.get((ack.partition, ack.offset)) != ack.value]
    read = {(p, offset, value) for poll in history.polls for p, offset, value in poll.records}
    received = {(p, offset) for p, offset, _value in read}
    write_gap, read_gap = _longest_gaps(history)
    client_errors = dict(history.client_errors)
    failed_sends = len(history.refused) + len(history.failed)
    return Verdict(
        faults=len(history.faults),
        acknowledged=len(history.acks),
        lost=lost,
        aborted_reads=aborted_reads(history),
        lost_reads=sorted((p, o, v) for p, o, v in read if (p, o) not in stored),
        conflicting_offsets=_conflicting_offsets(history, stored),
        duplicated=_duplicated(history),
        reordered=_reordered(history),
        unconsumed=[ack for ack in history.acks if (ack.partition, ack.offset) not in received],
        skipped_or_backwards=_position_anomalies(history),
        ownership_overlaps=ownership_overlaps(history),
        committed_backwards=_commits_going_back(history),
        writes_not_resumed_after=_not_resumed(
            history.faults, sorted(ack.at for ack in history.acks), limits),
        reads_not_resumed_after=_not_resumed(
            history.faults, sorted(poll.at for poll in history.polls if poll.records), limits),
        longest_unavailability_s=write_gap,
        longest_read_unavailability_s=read_gap,
        failed_sends=failed_sends,
        unresolved=list(history.unresolved),
        client_errors=client_errors,
        over_limits=[*_over_limits(write_gap, read_gap, client_errors, limits),
                     *_sends_over_limits(failed_sends, len(history.unresolved), limits)],
    )


def _conflicting_offsets(history: History,
                         stored: dict[tuple[int, int], bytes]) -> list[tuple[int, int]]:
    seen_at = dict(stored)
    conflicting = set()
    for poll in history.polls:
        for partition, offset, value in poll.records:
            if seen_at.setdefault((partition, offset), value) != value:
                conflicting.add((partition, offset))
    return sorted(conflicting)


def _duplicated(history: History) -> list[bytes]:
    counts = Counter(value for records in history.final_log.values() for _offset, value in records)
    return sorted(value for value, count in counts.items() if count > 1)


def _reordered(history: History) -> list[tuple[int, bytes, bytes]]:
    reordered = []
    for partition, records in history.final_log.items():
        last: dict[str, tuple[int, bytes]] = {}
        for _offset, value in sorted(records):
            producer, number = sequence_of(value)
            if producer in last and number < last[producer][0]:
                reordered.append((partition, last[producer][1], value))
            last[producer] = (number, value)
    return reordered


class _Committed:
    """The group's committed offsets over time, from commits that may race the reads: a commit
    is certainly in once it was answered, and may be in from the moment it was asked."""

    def __init__(self, commits: list[Commit]) -> None:
        self._answered: dict[int, list[tuple[float, int]]] = defaultdict(list)
        self._asked: dict[int, list[tuple[float, int]]] = defaultdict(list)
        for commit in commits:
            self._answered[commit.partition].append((commit.at, commit.offset))
            self._asked[commit.partition].append((commit.asked, commit.offset))
        for entries in (*self._answered.values(), *self._asked.values()):
            entries.sort()

    def possible(self, partition: int, since: float, until: float) -> set[int]:
        """Every offset that was the committed one at some moment in [since, until]: at least
        what was certainly committed at `since`, and nothing asked for after `until`. Nothing
        committed yet means the start of the log (auto.offset.reset=earliest)."""
        answered = self._answered[partition]
        floor = max((offset for at, offset in answered if at <= since), default=0)
        asked = {offset for at, offset in self._asked[partition] if at <= until}
        return {offset for offset in asked | {0} if offset >= floor}


def _position_anomalies(history: History) -> list[PositionAnomaly]:
    """Within an ownership, a member reads a partition one offset after the other; when it
    (re)gains a partition, it starts at the group's committed offset of that moment. A first
    read with no rebalance recorded before it (a group that settled before the workload began,
    a consumer in no group) must be at the committed offset of some moment since the member's
    previous poll."""
    committed = _Committed(history.commits)
    anomalies: list[PositionAnomaly] = []
    timelines: dict[str, list[Poll | Rebalance]] = defaultdict(list)
    # A rebalance and a poll at the same time: the rebalance happened inside the poll, first.
    for event in [*history.rebalances, *history.polls]:
        timelines[event.member].append(event)
    for member, timeline in timelines.items():
        position: dict[int, int] = {}
        gained: dict[int, Rebalance] = {}
        previous_at = float("-inf")
        for event in sorted(timeline, key=lambda e: e.at):
            if isinstance(event, Rebalance):
                for partition in event.partitions:
                    position.pop(partition, None)
                    gained[partition] = event
                continue
            for partition, offset, _value in event.records:
                if partition in position:
                    expected = position[partition]
                    if offset != expected:
                        kind = "skip" if offset > expected else "backwards"
                        anomalies.append(PositionAnomaly(member, partition, offset, kind,
                                                         f"expected {expected}"))
                else:
                    rebalance = gained.pop(partition, None)
                    since, until = ((rebalance.started, rebalance.at) if rebalance
                                    else (previous_at, event.at))
                    allowed = committed.possible(partition, since, until)
                    if offset not in allowed:
                        anomalies.append(PositionAnomaly(
                            member, partition, offset, "start",
                            f"the group's committed offset then was {sorted(allowed)}"))
                position[partition] = offset + 1
            previous_at = event.at
    return anomalies


# A stretch a member certainly held a partition, (since, until); a read outside any such
# stretch is a moment, since == until.
_Held = tuple[float, float]


def holdings(history: History) -> dict[int, dict[str, list[_Held]]]:
    """Per partition and member, the stretches the member certainly held it: from the rebalance
    that gained it to the last sign it still did (its last read of it, or the revocation that
    took it away), and each read outside those (a member of a group that settled before the
    history began). A member whose session expired lost the partition at some moment after
    its last read, unknown: what it held is only what it showed it held."""
    timelines: dict[str, list[Poll | Rebalance | Revocation]] = defaultdict(list)
    for event in [*history.revocations, *history.rebalances, *history.polls]:
        timelines[event.member].append(event)
    held: dict[int, dict[str, list[_Held]]] = defaultdict(dict)
    for member, timeline in timelines.items():
        for partition, stretches in _held_by_one(timeline).items():
            held[partition][member] = stretches
    return {partition: dict(members) for partition, members in sorted(held.items())}


# Within one poll: revoked first, then gained, then read (the order of Kafka's poll).
_WITHIN_A_POLL = {Revocation: 0, Rebalance: 1, Poll: 2}


def _held_by_one(timeline: list[Poll | Rebalance | Revocation]) -> dict[int, list[_Held]]:
    """`holdings` of one member, from its own events."""
    held: dict[int, list[_Held]] = defaultdict(list)
    since: dict[int, float] = {}  # the partitions it holds now: since when
    last_sign: dict[int, float] = {}
    for event in sorted(timeline, key=lambda e: (e.at, _WITHIN_A_POLL[type(e)])):
        if isinstance(event, Rebalance):
            for partition in event.partitions:
                if partition in since:  # lost without being told, and regained
                    held[partition].append((since[partition], last_sign[partition]))
                since[partition] = last_sign[partition] = event.at
        elif isinstance(event, Revocation):
            for partition in event.partitions:
                start = since.pop(partition, event.at)
                last_sign.pop(partition, None)
                held[partition].append((start, event.at))
        else:
            for partition in {p for p, _offset, _value in event.records}:
                if partition in since:
                    last_sign[partition] = event.at
                else:
                    held[partition].append((event.at, event.at))
    for partition, start in since.items():
        held[partition].append((start, last_sign[partition]))
    return held


def _overlaps(first: list[_Held], second: list[_Held]) -> list[_Held]:
    """When two members' holdings meet: two stretches sharing some length, a moment of one
    within a stretch of the other after it began (at its beginning is the hand-over), or the
    same moment in both."""
    first_moments = sorted(since for since, until in first if since == until)
    second_moments = sorted(since for since, until in second if since == until)
    found = [(moment, moment) for moment in sorted(set(first_moments) & set(second_moments))]
    first_stretches = [held for held in first if held[0] < held[1]]
    second_stretches = [held for held in second if held[0] < held[1]]
    for a in first_stretches:
        for b in second_stretches:
            since, until = max(a[0], b[0]), min(a[1], b[1])
            if since < until:
                found.append((since, until))
    for moments, stretches in ((first_moments, second_stretches),
                               (second_moments, first_stretches)):
        for since, until in stretches:
            within = moments[bisect.bisect_right(moments, since):
                             bisect.bisect_right(moments, until)]
            found += [(moment, moment) for moment in within]
    return sorted(found)


def ownership_overlaps(history: History) -> list[OwnershipOverlap]:
    """Every time two members of the group held (or read) one partition at once. A rebalance
    hands a partition over cleanly: the old owner reads it last, or is told to give it up,
    before the new one gains it (rafka's members claim a partition only once its owner has let
    go of it, as Kafka's group coordinator assigns it only once revoked)."""
    found = []
    for partition, members in holdings(history).items():
        for first, second in combinations(sorted(members), 2):
            found += [OwnershipOverlap(partition, first, second, since, until)
                      for since, until in _overlaps(members[first], members[second])]
    return found


def _commits_going_back(history: History) -> list[tuple[int, int, int]]:
    backwards = []
    highest: dict[int, int] = {}
    answered = [commit for commit in history.commits if commit.at != float("inf")]
    for commit in sorted(answered, key=lambda c: c.at):
        if commit.offset < highest.get(commit.partition, -1):
            backwards.append((commit.partition, highest[commit.partition], commit.offset))
        highest[commit.partition] = max(highest.get(commit.partition, -1), commit.offset)
    return backwards


def _not_resumed(faults: list[Fault], times: list[float], limits: Limits) -> list[Fault]:
    """Faults after whose heal nothing happened (no ack, or no read) within the kind's bound,
    whether or not the history lasted that long."""
    stuck = []
    for fault in faults:
        first = bisect.bisect_right(times, fault.healed)
        if first == len(times) or times[first] > fault.healed + limits.resume_bound(fault.kind):
            stuck.append(fault)
    return stuck


def _sends_over_limits(failed: int, unresolved: int, limits: Limits) -> list[str]:
    over = []
    if limits.max_failed_sends is not None and failed > limits.max_failed_sends:
        over.append(f"{failed} sends failed, limit {limits.max_failed_sends}")
    if unresolved > limits.max_unresolved_sends:
        over.append(f"{unresolved} sends unresolved at the end, limit "
                    f"{limits.max_unresolved_sends}")
    return over


def _longest_gaps(history: History) -> tuple[float, float]:
    """The longest stretch with sends attempted but none acknowledged (sends still attempted
    after the last ack count: writes that stopped for good are unavailable to the end), and the
    longest between two polls that returned records while acknowledged records were coming in."""
    ack_times = sorted(ack.at for ack in history.acks)
    attempts = sorted(history.attempts)
    writes = 0.0
    if attempts:
        marks = [attempts[0], *ack_times]
        if attempts[-1] > marks[-1]:
            marks.append(attempts[-1])
        writes = max((b - a for a, b in pairwise(marks)), default=0.0)
    reads = 0.0
    if ack_times:
        read_times = [poll.at for poll in history.polls if poll.records
                      and ack_times[0] <= poll.at <= ack_times[-1]]
        marks = [ack_times[0], *sorted(read_times), ack_times[-1]]
        reads = max((b - a for a, b in pairwise(marks)), default=0.0)
    return writes, reads


def _over_limits(write_gap: float, read_gap: float, client_errors: dict[str, int],
                 limits: Limits) -> list[str]:
    over = []
    if write_gap > limits.max_write_unavailability_s:
        over.append(f"writes unavailable for {write_gap:.1f} s, limit "
                    f"{limits.max_write_unavailability_s:g} s")
    if read_gap > limits.max_read_unavailability_s:
        over.append(f"reads unavailable for {read_gap:.1f} s, limit "
                    f"{limits.max_read_unavailability_s:g} s")
    for kind, count in sorted(client_errors.items()):
        allowed = limits.max_client_errors.get(kind, limits.other_client_errors)
        if allowed is not None and count > allowed:
            over.append(f"{count} client errors {kind}, limit {allowed}")
    return over


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


def _partitions(history: History) -> set[int]:
    """Every partition the history names: acknowledged, refused, in the final log or polled."""
    partitions = {ack.partition for ack in history.acks}
    partitions |= {refused.partition for refused in history.refused}
    partitions |= set(history.final_log)
    partitions |= {partition for poll in history.polls for partition, _o, _v in poll.records}
    return partitions


def longest_write_gaps(history: History) -> dict[int, float]:
    """Per partition, the longest stretch without an acknowledged write while sends were
    attempted (from the first attempt to the last; without attempts, from the first ack to the
    last): the stretch before its first acknowledgement and the one after its last count, so a
    partition that stops taking writes for good shows its gap up to the end of the run, and one
    that never took any, the whole run. For a workload that writes to every partition steadily.
    An acknowledgement after the last attempt ends its stretch at the last attempt."""
    return {partition: max((b - a for a, b in pairwise(marks)), default=0.0)
            for partition, marks in write_marks(history).items()}


def write_marks(history: History) -> dict[int, list[float]]:
    """Per partition, the run's first attempt, its acknowledgements (each clamped to the span
    of attempts) and the run's last attempt, in order: what `longest_write_gaps` measures the
    stretches between (empty lists when nothing was attempted or acknowledged)."""
    times: dict[int, list[float]] = {partition: [] for partition in _partitions(history)}
    for ack in history.acks:
        times[ack.partition].append(ack.at)
    spans = history.attempts or [ack.at for ack in history.acks]
    if not spans:
        return {partition: [] for partition in sorted(times)}
    start, end = min(spans), max(spans)
    return {partition: [start, *sorted(min(max(at, start), end) for at in found), end]
            for partition, found in sorted(times.items())}


def aborted_reads(history: History) -> list[Refused]:
    """Sends refused for certain whose value is in the log or was read anyway (Jepsen's
    "aborted read"): the client was told it was not written, and it was."""
    seen = {value for records in history.final_log.values() for _offset, value in records}
    seen |= {value for poll in history.polls for _p, _offset, value in poll.records}
    return [refused for refused in history.refused if refused.value in seen]


def longest_read_gaps(history: History) -> dict[int, float]:
    """Per partition, the longest stretch between two polls that returned its records, while
    its acknowledged records were coming in: how long nobody could read it."""
    acked: dict[int, list[float]] = defaultdict(list)
    for ack in history.acks:
        acked[ack.partition].append(ack.at)
    reads: dict[int, list[float]] = defaultdict(list)
    for poll in history.polls:
        for partition in {p for p, _offset, _value in poll.records}:
            reads[partition].append(poll.at)
    gaps = {}
    for partition, times in sorted(acked.items()):
        first, last = min(times), max(times)
        marks = [first, *sorted(t for t in reads[partition] if first <= t <= last), last]
        gaps[partition] = max((b - a for a, b in pairwise(marks)), default=0.0)
    return gaps


# The per-partition anomaly counts, under Jepsen's names where it has one; `anomaly_total` adds
# these up and nothing else (the acknowledged count and the gaps are context, not anomalies).
PARTITION_ANOMALY_KINDS = (
    "lost",
    "duplicated",
    "offsets_with_two_values",
    "reordered",
    "lost_reads",
    "non_monotonic_polls",
    "poll_skips_without_rebalance",
    "wrong_start_after_rebalance",
    "unseen",
    "aborted_reads",
    "commits_going_back",
    "ownership_overlaps",
)

# Which per-partition count each kind of position anomaly goes to.
_POSITION_KIND_TO_COUNT = {
    "backwards": "non_monotonic_polls",
    "skip": "poll_skips_without_rebalance",
    "start": "wrong_start_after_rebalance",
}


def by_partition(history: History, verdict: Verdict) -> dict[int, dict[str, float | int]]:
    """Per partition that appears in the history (acknowledged, refused, in the final log or
    polled), how many of each anomaly `verdict` found there, how many writes were acknowledged,
    and its longest write gap (`longest_write_gaps`: up to the end of the run) and read gap in
    seconds.

    A duplicated value counts in every partition of the final log that holds it: that is where
    a reader would see it twice. An aborted read counts in the partition it was sent to."""
    counts: dict[int, Counter[str]] = {partition: Counter() for partition in _partitions(history)}

    def count(partition: int, kind: str, how_many: int = 1) -> None:
        # setdefault: every anomaly comes from the sources above, but a partition missing from
        # them should still show up rather than raise while reporting.
        counts.setdefault(partition, Counter())[kind] += how_many

    for ack in verdict.lost:
        count(ack.partition, "lost")
    duplicated = set(verdict.duplicated)
    for partition, records in history.final_log.items():
        held_here = {value for _offset, value in records}
        count(partition, "duplicated", len(duplicated & held_here))
    for partition, _offset in verdict.conflicting_offsets:
        count(partition, "offsets_with_two_values")
    for partition, _earlier, _later in verdict.reordered:
        count(partition, "reordered")
    for partition, _offset, _value in verdict.lost_reads:
        count(partition, "lost_reads")
    for anomaly in verdict.skipped_or_backwards:
        count(anomaly.partition, _POSITION_KIND_TO_COUNT[anomaly.kind])
    for ack in verdict.unconsumed:
        count(ack.partition, "unseen")
    for refused in verdict.aborted_reads:
        count(refused.partition, "aborted_reads")
    for partition, _highest, _offset in verdict.committed_backwards:
        count(partition, "commits_going_back")
    for overlap in verdict.ownership_overlaps:
        count(overlap.partition, "ownership_overlaps")

    acknowledged = Counter(ack.partition for ack in history.acks)
    write_gaps = longest_write_gaps(history)
    read_gaps = longest_read_gaps(history)
    report: dict[int, dict[str, float | int]] = {}
    for partition in sorted(counts):
        row: dict[str, float | int] = {kind: counts[partition][kind]
                                       for kind in PARTITION_ANOMALY_KINDS}
        row["acknowledged"] = acknowledged[partition]
        row["longest_write_gap_s"] = round(write_gaps.get(partition, 0.0), 3)
        row["longest_read_gap_s"] = round(read_gaps.get(partition, 0.0), 3)
        report[partition] = row
    return report


def anomaly_total(per_partition: Mapping[int, Mapping[str, float | int]]) -> int:
    """Every anomaly `by_partition` counted, over all partitions."""
    return sum(int(row[kind]) for row in per_partition.values()
               for kind in PARTITION_ANOMALY_KINDS)
