"""Which replica a consumer that names its rack is sent to (KIP-392), without I/O:
`actors/kafka/read_replicas.preferred_read_replica`, Kafka's RackAwareReplicaSelector with
the ISR as the leader's broker knows it."""

from __future__ import annotations

from rafka.actors.kafka.read_replicas import LEADER, preferred_read_replica

RACKS = {0: "a", 1: "b", 2: "c", 3: "b", 4: None}


def test_a_consumer_in_another_rack_is_sent_to_an_in_sync_follower_there() -> None:
    assert preferred_read_replica("b", 0, [0, 1, 2], [0, 1, 2], RACKS) == 1
    assert preferred_read_replica("c", 0, [0, 1, 2], [0, 1, 2], RACKS) == 2


def test_the_leader_serves_its_own_rack_a_rackless_consumer_and_one_with_no_follower() -> None:
    assert preferred_read_replica("a", 0, [0, 1, 2], [0, 1, 2], RACKS) == LEADER
    assert preferred_read_replica("", 0, [0, 1, 2], [0, 1, 2], RACKS) == LEADER
    assert preferred_read_replica("z", 0, [0, 1, 2], [0, 1, 2], RACKS) == LEADER
    # A follower with no rack is in nobody's.
    assert preferred_read_replica("a", 1, [1, 4], [1, 4], RACKS) == LEADER


def test_a_follower_out_of_the_isr_is_never_chosen() -> None:
    assert preferred_read_replica("b", 0, [0, 1, 2], [0, 2], RACKS) == LEADER
    assert preferred_read_replica("b", 0, [0, 1, 3], [0, 3], RACKS) == 3


def test_the_replica_order_spreads_a_racks_consumers_over_its_followers() -> None:
    assert preferred_read_replica("b", 0, [0, 1, 3], [0, 1, 3], RACKS) == 1
    assert preferred_read_replica("b", 0, [0, 3, 1], [0, 1, 3], RACKS) == 3
