"""When a client gives up on a request to a leader the cluster has replaced (sans-I/O).

A leader whose process is paused or cut off answers nothing; the controller gives its
partitions other leaders once its ZooKeeper session expires, seconds later, while a request to
it would wait request.timeout.ms (30 s) to time out. As Kafka's NetworkClient refreshes the
metadata while requests are in flight, a client whose request has gone unanswered for a while
looks at the metadata (at a bounded rate: `LeaderCheck`), and a request to a partition whose
leader epoch has gone up since it was sent is given up on at once and sent to the new leader.

What may move (`plan_leader_moves`, the producer's; the consumer's fetches are reads, and any
may move: `moved_partitions`):

- Only an idempotent producer's batches. A batch the old leader did replicate before it went
  silent is in the new leader's log, and with it the producer's sequence numbers (a follower
  keeps the producer state of what it replicates): sent again with the same producer id, epoch
  and sequences, the new leader answers it as a duplicate, with its offsets. Without
  idempotence the new leader cannot tell, and would append it a second time: those batches wait
  for request.timeout.ms, the old leader's answer or its connection's failure.
- Every batch of a moved partition sent under an older leader epoch, all at once, and none sent
  under the current one: they go back to the front of their partition's queue in the order they
  were first sent, and the accumulator sends a retry only once nothing of its partition is in
  flight, so no later batch overtakes an earlier one.
- A request whose batches have all moved is abandoned (its connection closed); one that still
  carries batches of partitions that did not move stays, and its answer, when it comes, counts
  for those only. The old leader's late answer for a moved batch is never read.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Generic, NamedTuple, TypeVar

__all__ = [
    "MIN_CHECK_INTERVAL_MS",
    "SLOW_REQUEST_MS",
    "LeaderCheck",
    "LeaderMoves",
    "SentTo",
    "moved_partitions",
    "plan_leader_moves",
]

# A request unanswered this long (past fetch.max.wait.ms, for a fetch, which a leader answers
# even with nothing) makes a client look at the metadata for leaders that moved: a healthy
# leader answers an acks=all produce in milliseconds. It looks again at most every
# MIN_CHECK_INTERVAL_MS (or retry.backoff.ms, if longer): each look asks every broker.
SLOW_REQUEST_MS = 1000
MIN_CHECK_INTERVAL_MS = 250

Key = TypeVar("Key", bound=Hashable)
TopicPartitionKey = tuple[str, int]


class SentTo(NamedTuple):
    """A partition's part of a request in flight, and the leader epoch the client's metadata
    named when it was sent (-1: none known)."""

    topic: str
    partition: int
    leader_epoch: int


def moved_partitions(sent: Iterable[SentTo],
                     leader_epochs: Mapping[TopicPartitionKey, int]) -> set[TopicPartitionKey]:
    """The partitions of `sent` whose leader epoch in `leader_epochs` (the metadata's now) is
    higher than the one they were sent under: another broker leads them, or the same one was
    elected again and its answer to the old epoch's request is a refusal at best. A partition
    the metadata does not know now (it was invalidated) has not moved, as far as anyone knows."""
    moved: set[TopicPartitionKey] = set()
    for part in sent:
        current = leader_epochs.get((part.topic, part.partition))
        if current is not None and current > part.leader_epoch:
            moved.add((part.topic, part.partition))
    return moved


@dataclass(frozen=True)
class LeaderMoves(Generic[Key]):
    """What the producer gives up on: per request, the positions (in the request) of the
    batches to send again to their new leader; and the requests left with nothing to wait for."""

    retry: dict[Key, list[int]] = field(default_factory=dict)
    abandon: list[Key] = field(default_factory=list)


def plan_leader_moves(requests: Mapping[Key, Sequence[SentTo | None]],
                      leader_epochs: Mapping[TopicPartitionKey, int], *,
                      idempotent: bool) -> LeaderMoves[Key]:
    """Which batches in flight to retry at their partitions' new leaders (module docstring).

    `requests` gives each request's batches in order, None for one already given up on (moved
    earlier: its answer is no longer wanted). Nothing moves without idempotence."""
    if not idempotent:
        # A resend could write the batch twice: the new leader may hold it (replicated before
        # the old leader went silent) and, without sequence numbers, cannot know it is a retry.
        return LeaderMoves()
    moved = moved_partitions((part for parts in requests.values() for part in parts
                              if part is not None), leader_epochs)
    retry: dict[Key, list[int]] = {}
    abandon: list[Key] = []
    if not moved:
        return LeaderMoves(retry, abandon)
    for key, parts in requests.items():
        positions = [index for index, part in enumerate(parts) if part is not None
                     and (part.topic, part.partition) in moved
                     and part.leader_epoch < leader_epochs[(part.topic, part.partition)]]
        if positions:
            retry[key] = positions
            if len(positions) == sum(part is not None for part in parts):
                abandon.append(key)
    return LeaderMoves(retry, abandon)


class LeaderCheck:
    """When a client looks at the metadata for leaders that moved: once its oldest request in
    flight has gone unanswered for `slow_after_ms`, and then at most once per `interval_ms`
    (Kafka bounds its metadata refreshes by retry.backoff.ms). Time is passed in (monotonic
    ns). A client whose answers come back promptly never asks: its oldest request is young."""

    __slots__ = ("_generation_seen", "_interval_ns", "_last_ns", "_slow_after_ns")

    def __init__(self, slow_after_ms: int, interval_ms: int) -> None:
        self._slow_after_ns = slow_after_ms * 1_000_000
        self._interval_ns = interval_ms * 1_000_000
        self._last_ns: int | None = None
        self._generation_seen: int | None = None

    def news(self, generation: int) -> bool:
        """Whether the metadata learnt something since the last call (its `generation`, a
        count of answers learnt, moved): only then are the requests in flight looked at."""
        if generation == self._generation_seen:
            return False
        self._generation_seen = generation
        return True

    def due(self, oldest_sent_ns: int, now_ns: int) -> bool:
        """Whether to refresh the metadata now, the oldest request in flight sent at
        `oldest_sent_ns`; if so, the next refresh waits `interval_ms` from now."""
        if now_ns - oldest_sent_ns < self._slow_after_ns:
            return False
        if self._last_ns is not None and now_ns - self._last_ns < self._interval_ns:
            return False
        self._last_ns = now_ns
        return True
