"""Growing a topic while producers and a consumer group run (as Kafka promises it)."""

from __future__ import annotations

import pytest

from rafka import Cluster
from rafka.coordination.errors import InvalidPartitionsError
from tests.support.waiting import wait_until
from tests.support.workloads import GroupReading, SendUntilStopped


def test_added_partitions_reach_producers_and_groups_while_they_run(cluster: Cluster) -> None:
    cluster.create_topic("growing", partitions=2, replication_factor=2)
    group = GroupReading(cluster, "growing", "growers")
    writer = SendUntilStopped(cluster, "growing", pause_every=50, ack_timeout_s=60)
    group.poll_for(10)
    cluster.add_partitions("growing", 4)
    assert len(cluster.describe_topic("growing")["partitions"]) == 4

    def grown() -> bool:
        group.poll()
        owned = set().union(*(c.assignment() for c in group.consumers))
        return {tp.partition for tp in owned} == {0, 1, 2, 3} and {
            p for p, _o in group.read} >= {2, 3}

    wait_until(grown, 60, "producers and the group to use the new partitions")
    writer.stop(120)
    assert not writer.failures, writer.failures
    group.check_read(writer.acknowledged)

    with pytest.raises(InvalidPartitionsError, match="only grow"):
        cluster.add_partitions("growing", 3)
