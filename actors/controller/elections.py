"""The controller's elections, with no I/O: who leads a partition whose leader is gone
(Kafka's OfflinePartitionLeaderElectionStrategy), when the preferred replica takes leadership
back, and the ISR left when a broker dies."""

from __future__ import annotations

from collections.abc import Iterable
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
) -> Election:
    """Offline-partition election: the first live ISR member in assignment order leads.

    With no live ISR member, `unclean.leader.election.enable` lets the first live replica lead
    (it may lack acknowledged records: the checker reports that as loss); otherwise the partition
    stays offline and keeps its ISR, so that the first ISR member to return leads it cleanly.
    """
    assignment = list(assignment)
    isr = list(isr)
    live_isr = [replica for replica in isr if replica in live_brokers]
    for replica in assignment:
        if replica in live_isr:
            return Election(replica, tuple(live_isr))
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
