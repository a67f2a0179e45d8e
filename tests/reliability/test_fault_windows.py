"""What of a write gap the fault schedule explains (`tests/support/fault_windows.py`), on
schedules and histories made by hand."""

from __future__ import annotations

import pytest

from tests.support.checker import Ack, Fault, History
from tests.support.fault_windows import short_of_nodes, unexplained_write_gaps

INF = float("inf")


def test_two_of_three_nodes_faulty_leave_the_cluster_short() -> None:
    faults = [Fault(10.0, "node-killed", healed_at=40.0, node="n1"),
              Fault(20.0, "node-isolated", healed_at=50.0, node="n2"),
              Fault(30.0, "node-paused", healed_at=35.0, node="n3")]
    # Two nodes out from 20 to 40 (three from 30 to 35): short of 2 healthy ones throughout.
    assert short_of_nodes(faults, nodes=3, needed=2) == [(20.0, 40.0)]
    # Short of 3 whenever any node is out.
    assert short_of_nodes(faults, nodes=3, needed=3) == [(10.0, 50.0)]


def test_two_faults_on_one_node_count_once() -> None:
    faults = [Fault(10.0, "zookeeper-member-killed", healed_at=30.0, node="n1"),
              Fault(15.0, "node-paused", healed_at=20.0, node="n1")]
    assert short_of_nodes(faults, nodes=3, needed=2) == []


def test_a_node_healed_and_faulted_at_one_instant_stays_faulty() -> None:
    faults = [Fault(10.0, "node-killed", healed_at=20.0, node="n1"),
              Fault(20.0, "node-paused", healed_at=30.0, node="n1"),
              Fault(5.0, "node-isolated", healed_at=25.0, node="n2")]
    assert short_of_nodes(faults, nodes=3, needed=2) == [(10.0, 25.0)]


def test_a_fault_never_healed_leaves_the_cluster_short_to_the_end() -> None:
    faults = [Fault(10.0, "node-killed", node="n1"), Fault(12.0, "node-killed", node="n2")]
    # Never healed: `healed` is its injection time, so it lasted no time at all.
    assert short_of_nodes(faults, nodes=3, needed=2) == []
    faults = [Fault(10.0, "node-killed", healed_at=INF, node="n1"),
              Fault(12.0, "node-killed", healed_at=INF, node="n2")]
    assert short_of_nodes(faults, nodes=3, needed=2) == [(12.0, INF)]


def test_a_fault_without_a_node_is_refused() -> None:
    with pytest.raises(ValueError, match="no node"):
        short_of_nodes([Fault(1.0, "node-killed", healed_at=2.0)], nodes=3, needed=2)


def test_what_the_schedule_explains_is_taken_out_of_each_gap() -> None:
    # Partition 0 acknowledges at 0 and 60 (then every 20 s): a 60 s gap. Two nodes were out
    # from 10 to 40, so the cluster owes the 10 s before and the 20 s after: the longest, 20 s.
    # Partition 1 stops at 5 and never writes again to the end of the run (100): its 95 s gap
    # leaves the 60 s from 40 to 100 unexplained.
    faults = [Fault(10.0, "node-killed", healed_at=40.0, node="n1"),
              Fault(10.0, "node-isolated", healed_at=45.0, node="n2")]
    acks = [Ack(b"p-0", 0, 0, 0.0), Ack(b"p-1", 0, 1, 60.0), Ack(b"p-2", 0, 2, 80.0),
            Ack(b"p-3", 0, 3, 100.0),
            Ack(b"q-0", 1, 0, 0.0), Ack(b"q-1", 1, 1, 5.0)]
    history = History(acks=acks, attempts=[0.0, 100.0])
    assert unexplained_write_gaps(history, faults, nodes=3, needed=2) == {0: 20.0, 1: 60.0}


def test_a_gap_with_one_node_faulty_is_the_clusters_whole() -> None:
    # One node out: the cluster can elect and take writes; the whole gap is its own.
    faults = [Fault(10.0, "node-killed", healed_at=40.0, node="n1")]
    acks = [Ack(b"p-0", 0, 0, 0.0), Ack(b"p-1", 0, 1, 18.0), Ack(b"p-2", 0, 2, 20.0)]
    history = History(acks=acks, attempts=[0.0, 20.0])
    assert unexplained_write_gaps(history, faults, nodes=3, needed=2) == {0: 18.0}
