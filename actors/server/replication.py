"""The replication arithmetic of one partition, with no I/O: what a leader knows of its followers,
the ISR it proposes, its high watermark, and where a new follower truncates (KIP-101).

A PartitionReplica feeds it fetches, appends and the controller's requests, and does what it
answers: change role, write the ISR to ZooKeeper, truncate the log, wake waiting producers.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from enum import Enum

from rafka.actors.messages import LeaderAndIsrRequest, ReplicaRole
from rafka.common.sentinels import UNDEFINED_EPOCH, UNDEFINED_OFFSET


@dataclass
class FetchClock:
    """When a follower's fetch session last fetched. One session carries many partitions but
    lists only those whose fetch state changed, so a partition that was not listed was fetched
    all the same, at the session's time, at its last listed offset."""

    last_fetch_ms: int = 0


@dataclass
class FollowerProgress:
    """What the leader has seen of one follower, from its fetches."""

    log_end_offset: int = 0
    last_caught_up_ms: int = 0
    last_fetch_ms: int = 0
    # The leader's log end offset when this follower last fetched: a follower that reaches it by
    # its next fetch was caught up at the time of the previous one.
    last_fetch_leader_log_end_offset: int = 0
    # The session the follower fetches this partition in, if any.
    clock: FetchClock | None = None


@dataclass
class LeaderState:
    """A partition leader's view of its replicas, as Kafka's `Partition` keeps it.

    `isr` always contains the leader; it is the ISR as ZooKeeper last confirmed it. The high
    watermark is the smallest log end offset in the maximal ISR (`maximal_isr`) and never moves
    back while this broker leads.
    """

    leader_id: int
    replicas: tuple[int, ...]
    isr: frozenset[int]
    leader_epoch: int
    # The first offset of this leader's epoch: a follower joins the ISR only once it holds it.
    epoch_start_offset: int
    high_watermark: int
    followers: dict[int, FollowerProgress] = field(default_factory=dict)
    # Followers an ISR expansion adds from the moment the leader asks ZooKeeper for it, until a
    # write is confirmed (Kafka's maximal ISR, KIP-497). ZooKeeper may hold them in the ISR
    # before the leader hears back, or without its ever hearing (a write whose answer was lost),
    # and the controller may then elect one of them: so the high watermark waits for them too.
    joining: frozenset[int] = frozenset()

    @property
    def maximal_isr(self) -> frozenset[int]:
        """The ISR ZooKeeper may hold: the confirmed one and the followers being added."""
        return self.isr | self.joining if self.joining else self.isr

    @classmethod
    def become_leader(
        cls,
        leader_id: int,
        replicas: Iterable[int],
        isr: Iterable[int],
        leader_epoch: int,
        log_end_offset: int,
        high_watermark: int,
        now_ms: int,
    ) -> LeaderState:
        replicas = tuple(replicas)
        isr = frozenset(isr) | {leader_id}
        # Followers in the ISR get a fresh lag clock: they cannot have fetched from a leader that
        # did not exist until now.
        followers = {
            replica: FollowerProgress(
                log_end_offset=UNDEFINED_OFFSET if replica not in isr else 0,
                last_caught_up_ms=now_ms if replica in isr else 0,
            )
            for replica in replicas
            if replica != leader_id
        }
        return cls(
            leader_id,
            replicas,
            isr,
            leader_epoch,
            epoch_start_offset=log_end_offset,
            high_watermark=min(high_watermark, log_end_offset),
            followers=followers,
        )

    def record_follower_fetch(
        self, follower_id: int, fetch_offset: int, leader_log_end_offset: int, now_ms: int,
        clock: FetchClock | None = None,
    ) -> None:
        """A follower fetched at `fetch_offset`: that is its log end offset now. With a
        `clock`, it fetches in a session, and its later fetches that do not list this
        partition count as fetches at the same offset (`before_append`)."""
        progress = self.followers.setdefault(follower_id, FollowerProgress())
        progress.clock = clock
        if fetch_offset >= leader_log_end_offset:
            progress.last_caught_up_ms = max(progress.last_caught_up_ms, now_ms)
        elif fetch_offset >= progress.last_fetch_leader_log_end_offset:
            progress.last_caught_up_ms = max(progress.last_caught_up_ms, progress.last_fetch_ms)
        progress.log_end_offset = fetch_offset
        progress.last_fetch_leader_log_end_offset = leader_log_end_offset
        progress.last_fetch_ms = now_ms

    def before_append(self, log_end_offset: int) -> None:
        """The leader is about to append past `log_end_offset`.

        A follower level with it was caught up until now: when it last fetched, in its session,
        without listing this partition (nothing had changed for it), it was at the log end. Its
        fetch state is brought up to that session fetch, as if it had listed the partition, so
        that the append does not make it look lagging since the last time it did list it.
        Costs one comparison per follower; an idle fetch costs nothing per partition.
        """
        for progress in self.followers.values():
            clock = progress.clock
            if (clock is not None and progress.log_end_offset >= log_end_offset
                    and clock.last_fetch_ms > progress.last_fetch_ms):
                progress.last_caught_up_ms = max(progress.last_caught_up_ms,
                                                 clock.last_fetch_ms)
                progress.last_fetch_ms = clock.last_fetch_ms
                progress.last_fetch_leader_log_end_offset = log_end_offset

    def followers_to_add(self) -> set[int]:
        """Followers outside the ISR that have caught up to the high watermark in this epoch
        (those being added among them: an expansion whose answer was lost is asked again)."""
        return {
            follower
            for follower, progress in self.followers.items()
            if follower not in self.isr
            and follower in self.replicas
            and progress.log_end_offset >= self.high_watermark
            and progress.log_end_offset >= self.epoch_start_offset
        }

    def followers_to_remove(
        self, leader_log_end_offset: int, now_ms: int, lag_time_max_ms: int
    ) -> set[int]:
        """ISR followers that have not caught up for longer than `replica.lag.time.max.ms`,
        those being added included (until an ISR without them is written, they hold the high
        watermark).

        A follower level with the leader is in sync however long ago it fetched, as in Kafka: a
        dead broker is taken out of the ISR by the controller, through ZooKeeper.
        """
        return {
            follower
            for follower in self.maximal_isr - {self.leader_id}
            if (progress := self.followers.get(follower)) is not None
            and progress.log_end_offset < leader_log_end_offset
            and now_ms - progress.last_caught_up_ms > lag_time_max_ms
        }

    def propose_isr(self, isr: Iterable[int]) -> None:
        """The leader asks ZooKeeper for `isr`: from now on the followers it adds count in the
        high watermark. Those it removes still count until the write is confirmed."""
        self.joining |= frozenset(isr) - self.isr

    def apply_isr(self, isr: Iterable[int]) -> None:
        """The ISR as written to ZooKeeper (always including the leader). A confirmed write
        settles every earlier one: each was conditional on the version before it, so one that
        landed unanswered would have made this one fail."""
        self.isr = frozenset(isr) | {self.leader_id}
        self.joining = frozenset()

    def candidate_high_watermark(self, leader_log_end_offset: int) -> int:
        ends = [leader_log_end_offset]
        for follower in self.maximal_isr - {self.leader_id}:
            progress = self.followers.get(follower)
            ends.append(progress.log_end_offset if progress else 0)
        return min(ends)

    def advance_high_watermark(self, leader_log_end_offset: int) -> bool:
        """Move the high watermark to the ISR's smallest log end offset; True if it moved."""
        candidate = self.candidate_high_watermark(leader_log_end_offset)
        if candidate > self.high_watermark:
            self.high_watermark = candidate
            return True
        return False


class LeaderAndIsrDecision(Enum):
    """What a replica does with a LeaderAndIsr request."""

    STALE_CONTROLLER = "stale_controller"  # from a deposed controller: refused
    ALREADY_APPLIED = "already_applied"  # a resend (controller failover): nothing to do
    BECOME_LEADER = "become_leader"
    BECOME_FOLLOWER = "become_follower"  # or offline, when the partition has no leader


def apply_leader_and_isr(
    request: LeaderAndIsrRequest,
    *,
    broker_id: int,
    role: ReplicaRole,
    leader_id: int,
    leader_epoch: int,
    controller_epoch: int,
    zk_version: int,
) -> LeaderAndIsrDecision:
    """The replica's role transition on a LeaderAndIsr request, from what it is now.

    Requests from an older controller epoch are refused; one at an older leader epoch, or the
    same leader epoch, leader and state version as what the replica already applied, changes
    nothing. Otherwise the replica leads if the request names its broker, and follows (or stays
    offline, with no leader) if not; even at the same leader epoch, since a replica that went
    offline (fenced) must take its role back when the controller repeats itself.
    """
    if request.controller_epoch < controller_epoch:
        return LeaderAndIsrDecision.STALE_CONTROLLER
    if request.leader_epoch < leader_epoch or (
        request.leader_epoch == leader_epoch
        and role != ReplicaRole.OFFLINE
        and request.leader == leader_id
        and request.zk_version <= zk_version
    ):
        return LeaderAndIsrDecision.ALREADY_APPLIED
    if request.leader == broker_id:
        return LeaderAndIsrDecision.BECOME_LEADER
    return LeaderAndIsrDecision.BECOME_FOLLOWER


class AcksAllOutcome(Enum):
    """Where an acks=all produce request stands (Kafka's `checkEnoughReplicasReachOffset`)."""

    WAIT = "wait"
    ACKNOWLEDGE = "acknowledge"
    NOT_ENOUGH_REPLICAS_AFTER_APPEND = "not_enough_replicas_after_append"


def acks_all_outcome(
    high_watermark: int, last_offset: int, isr_size: int, min_insync_replicas: int
) -> AcksAllOutcome:
    """Whether an acks=all request whose records end at `last_offset` may be answered.

    The high watermark passing the records is not enough: an ISR that shrank to the leader alone
    lets the high watermark run up to the leader's log end, so records held by one copy would be
    acknowledged (the 2013 Jepsen finding). They are acknowledged only while the ISR that holds
    them has at least `min.insync.replicas` members; otherwise the request fails with
    NOT_ENOUGH_REPLICAS_AFTER_APPEND and the producer retries it, as in Kafka.
    """
    if isr_size < min_insync_replicas:
        return AcksAllOutcome.NOT_ENOUGH_REPLICAS_AFTER_APPEND
    if high_watermark > last_offset:
        return AcksAllOutcome.ACKNOWLEDGE
    return AcksAllOutcome.WAIT


@dataclass(frozen=True)
class Truncation:
    """A new follower's next step: truncate at `offset`, or first ask the leader about `epoch`."""

    offset: int | None = None
    ask_epoch: int | None = None


def follower_truncation(
    leader_answer: tuple[int, int],
    local_end_offset_for_epoch: Callable[[int], tuple[int, int]],
    local_log_end_offset: int,
    local_high_watermark: int,
) -> Truncation:
    """Where a new follower truncates before fetching (KIP-101, with KIP-279's extra rounds).

    The follower asked the leader for the end of one of its epochs; `leader_answer` is
    `(epoch, end_offset)`: the largest epoch the leader knows at or below the one asked, and
    where that epoch ends on the leader. Both logs agree up to the point where that epoch ends on
    both; past it the follower's records may diverge and go.
    """
    leader_epoch, leader_end_offset = leader_answer
    if leader_epoch == UNDEFINED_EPOCH or leader_end_offset == UNDEFINED_OFFSET:
        # The leader knows no epoch this old: fall back to the high watermark, as Kafka does.
        return Truncation(offset=min(local_high_watermark, local_log_end_offset))
    local_epoch, local_end_offset = local_end_offset_for_epoch(leader_epoch)
    if local_epoch == leader_epoch:
        return Truncation(offset=min(leader_end_offset, local_end_offset, local_log_end_offset))
    if local_epoch == UNDEFINED_EPOCH:
        # Every local epoch is newer than anything the leader knows: nothing here is shared.
        return Truncation(offset=min(leader_end_offset, local_high_watermark, local_log_end_offset))
    # The follower never had the leader's epoch: ask about the one it had before (KIP-279).
    return Truncation(ask_epoch=local_epoch)
