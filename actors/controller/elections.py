"""The controller's elections, with no I/O: who leads a partition whose leader is gone
(Kafka's OfflinePartitionLeaderElectionStrategy), when the preferred replica takes leadership
back, and the ISR left when a broker dies."""

from __future__ import annotations

from collections.abc import Iterable, Set
from dataclasses import dataclass

from rafka.actors.errors import ErrorCode
from rafka.common.sentinels import NO_LEADER


@dataclass(frozen=True)
class Election:
    """The controller's choice for one partition."""

    leader: int  # -1 when no replica may lead: the partition is offline
    isr: tuple[int, ...]
    unclean: bool = False

    @property
    def offline(self) -> bool:
        return self.leader < 0


def elect_leader(
    assignment: Iterable[int],
    isr: Iterable[int],
    live_brokers: set[int],
    *,
    unclean_leader_election: bool = False,
    bounced: Set[int] = frozenset(),
) -> Election:
    """Offline-partition election: the first live ISR member in assignment order leads.

    A `bounced` broker registered anew since the controller last looked (its process or node
    restarted, its session expired, between two reads of `/brokers/ids`): it is a new
    incarnation that may lack what its predecessor had not flushed, so it counts as dead here,
    as Kafka's controller handles a bounce (the broker's failure, then its startup). It leaves
    the ISR, to rejoin once it has caught up, and it leads only if no other ISR member is live
    (then again under a new leader epoch, which the controller writes).

    With no live ISR member, `unclean.leader.election.enable` lets the first live replica lead
    (it may lack acknowledged records: the checker reports that as loss); otherwise the partition
    stays offline and keeps its ISR, so that the first ISR member to return leads it cleanly.
    """
    assignment = list(assignment)
    isr = list(isr)
    live_isr = [replica for replica in isr if replica in live_brokers]
    settled_isr = [replica for replica in live_isr if replica not in bounced]
    for candidates in (settled_isr, live_isr):
        for replica in assignment:
            if replica in candidates:
                return Election(replica, tuple(candidates))
    if unclean_leader_election:
        for replica in assignment:
            if replica in live_brokers:
                return Election(replica, (replica,), unclean=True)
    return Election(NO_LEADER, tuple(isr))


def preferred_leader_election(
    assignment: Iterable[int], current_leader: int, isr: Iterable[int], live_brokers: set[int]
) -> tuple[int | None, int]:
    """Whether the preferred replica (first assigned) takes leadership back: (it, NONE) if so;
    else (None, why not, as Kafka's ElectLeaders answers): ELECTION_NOT_NEEDED where it leads
    already, PREFERRED_LEADER_NOT_AVAILABLE where it is out of the ISR or down."""
    assignment = list(assignment)
    if not assignment:
        return None, ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE
    preferred = assignment[0]
    if preferred == current_leader:
        return None, ErrorCode.ELECTION_NOT_NEEDED
    if preferred in set(isr) and preferred in live_brokers:
        return preferred, ErrorCode.NONE
    return None, ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE


def remove_from_isr(isr: Iterable[int], broker_id: int) -> tuple[int, ...]:
    """The ISR without a broker that died, keeping its last member if it was the only one.

    Kafka keeps the last ISR member of an offline partition, so that it can lead again cleanly.
    """
    isr = tuple(isr)
    remaining = tuple(replica for replica in isr if replica != broker_id)
    return remaining or isr
