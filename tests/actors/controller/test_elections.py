"""The controller's elections: offline partitions, unclean elections, the preferred leader."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from rafka.actors.controller.elections import (
    elect_leader,
    preferred_leader_election,
    remove_from_isr,
)
from rafka.actors.errors import ErrorCode
from rafka.common.sentinels import NO_LEADER


def test_election_picks_the_first_live_isr_member_in_assignment_order() -> None:
    election = elect_leader([1, 2, 3], isr=[3, 2, 1], live_brokers={2, 3})
    assert election.leader == 2
    assert set(election.isr) == {2, 3}
    assert not election.unclean


def test_election_without_a_live_isr_member_leaves_the_partition_offline() -> None:
    election = elect_leader([1, 2, 3], isr=[1], live_brokers={2, 3})
    assert election.offline and election.leader == NO_LEADER
    assert election.isr == (1,)


def test_unclean_election_takes_any_live_replica_and_says_so() -> None:
    election = elect_leader([1, 2, 3], isr=[1], live_brokers={3}, unclean_leader_election=True)
    assert election.leader == 3 and election.isr == (3,) and election.unclean


@given(
    st.permutations([1, 2, 3, 4]),
    st.sets(st.sampled_from([1, 2, 3, 4])),
    st.sets(st.sampled_from([1, 2, 3, 4])),
    st.booleans(),
)
def test_a_clean_election_only_ever_picks_a_live_isr_member(assignment, isr, live, unclean) -> None:
    election = elect_leader(assignment, sorted(isr), live, unclean_leader_election=unclean)
    if election.offline:
        assert not (isr & live) and (not unclean or not live)
    elif not election.unclean:
        assert election.leader in isr & live
        assert set(election.isr) == isr & live
    else:
        assert not (isr & live) and election.leader in live


def test_a_bounced_leader_gives_way_to_another_live_isr_member_and_leaves_the_isr() -> None:
    # Broker 1 restarted between two looks: alive and registered, but a new incarnation.
    election = elect_leader([1, 2, 3], isr=[1, 2, 3], live_brokers={1, 2, 3}, bounced={1})
    assert election.leader == 2 and set(election.isr) == {2, 3} and not election.unclean


def test_a_bounced_broker_leads_again_only_when_no_other_isr_member_is_live() -> None:
    election = elect_leader([1, 2, 3], isr=[1, 2], live_brokers={1, 3}, bounced={1})
    assert election.leader == 1 and election.isr == (1,) and not election.unclean
    # Preferred to an unclean election of a replica out of the ISR.
    election = elect_leader([3, 1, 2], isr=[1], live_brokers={1, 3}, bounced={1},
                            unclean_leader_election=True)
    assert election.leader == 1 and not election.unclean


@given(
    st.permutations([1, 2, 3, 4]),
    st.sets(st.sampled_from([1, 2, 3, 4])),
    st.sets(st.sampled_from([1, 2, 3, 4])),
    st.sets(st.sampled_from([1, 2, 3, 4])),
)
def test_a_bounced_broker_leads_only_when_no_settled_isr_member_is_live(
    assignment, isr, live, bounced
) -> None:
    election = elect_leader(assignment, sorted(isr), live, bounced=bounced)
    settled = (isr & live) - bounced
    if settled:
        assert election.leader in settled and set(election.isr) == settled
    elif isr & live:
        assert election.leader in isr & live & bounced and set(election.isr) == isr & live
    else:
        assert election.offline


def test_preferred_leader_takes_over_only_when_in_sync_and_alive() -> None:
    assert preferred_leader_election([1, 2, 3], current_leader=2, isr=[1, 2],
                                     live_brokers={1, 2}) == (1, ErrorCode.NONE)
    assert preferred_leader_election([1, 2, 3], 2, isr=[2, 3], live_brokers={1, 2, 3}) == (
        None, ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE)  # out of the ISR
    assert preferred_leader_election([1, 2, 3], 2, isr=[1, 2], live_brokers={2}) == (
        None, ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE)  # down
    assert preferred_leader_election([1, 2, 3], 1, isr=[1, 2], live_brokers={1, 2}) == (
        None, ErrorCode.ELECTION_NOT_NEEDED)


def test_removing_a_dead_broker_keeps_the_last_isr_member() -> None:
    assert remove_from_isr((1, 2, 3), 2) == (1, 3)
    assert remove_from_isr((2,), 2) == (2,)
