"""Partition reassignment: growing the cluster without downtime (as Kafka promises it)."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from rafka import Cluster
from rafka.coordination.errors import (
    InvalidReplicaAssignmentError,
    ReassignmentInProgressError,
    UnknownBrokerError,
    UnknownTopicError,
    UnknownTopicOrPartitionError,
)
from tests.support.replicas import ReplicaOnHost
from tests.support.waiting import wait_until
from tests.support.workloads import GroupReading, SendUntilStopped


def _replica_facts(cluster: Cluster, topic: str, partition: int, broker: int) -> dict[str, Any]:
    return ReplicaOnHost(cluster, topic, partition, broker).describe()


def test_replicas_move_to_a_new_broker_while_clients_run(cluster: Cluster) -> None:
    topic = "moving"
    cluster.create_topic(topic, partitions=2, replication_factor=2)
    group = GroupReading(cluster, topic, "movers")
    # Keyed, so that both partitions get records throughout.
    writer = SendUntilStopped(cluster, topic, pause_every=20, ack_timeout_s=120, keys=16)
    group.poll_for(5)

    new_broker = cluster.add_broker()
    assert new_broker == 3
    assert 3 in {broker["id"] for broker in cluster.brokers()}

    # Broker 3 replaces partition 0's leader there (so leadership must move), and a follower of
    # partition 1 (or partition 0's leader, if it holds partition 1 too).
    before = {p["partition"]: p for p in cluster.describe_topic(topic)["partitions"]}
    victim = before[0]["leader"]
    targets: dict[tuple[str, int], list[int]] = {}
    leaving: dict[int, int] = {}
    for partition, entry in before.items():
        replicas = entry["replicas"]
        out = victim if victim in replicas else next(b for b in replicas if b != entry["leader"])
        targets[(topic, partition)] = [new_broker if b == out else b for b in replicas]
        leaving[partition] = out

    mover_errors: list[BaseException] = []

    def reassign() -> None:
        try:
            cluster.reassign_partitions(targets, timeout_s=120)
        except BaseException as error:
            mover_errors.append(error)

    mover = threading.Thread(target=reassign)
    mover.start()
    while mover.is_alive():  # the group keeps reading throughout
        group.poll()
    assert not mover_errors, mover_errors
    assert cluster.reassignment_in_progress() == {}

    # Clients go on after the move too, against the new leaders.
    group.poll_for(3)
    writer.stop(180)
    assert not writer.thread.is_alive() and not writer.failures, writer.failures
    acknowledged = writer.acknowledged
    assert {p for p, _o in acknowledged} == {0, 1}

    after = {p["partition"]: p for p in cluster.describe_topic(topic)["partitions"]}
    for (_, partition), replicas in targets.items():
        entry = after[partition]
        assert entry["replicas"] == replicas
        assert entry["leader"] in replicas
        assert entry["leader"] != victim
        wait_until(lambda p=partition, r=replicas: set(
            cluster.describe_topic(topic)["partitions"][p]["isr"]) == set(r), 30,
            f"the ISR of partition {partition} to be {replicas}")
        log_dir = cluster.data_dir / f"broker-{leaving[partition]}" / f"{topic}-{partition}"
        assert not log_dir.exists(), f"{log_dir} should have been deleted"
        # Every replica's log ends where the leader's does.
        wait_until(lambda p=partition, r=replicas: len({
            _replica_facts(cluster, topic, p, b)["log_end_offset"] for b in r}) == 1, 30,
            f"the replicas of partition {partition} to have equal logs")
        leader_end = _replica_facts(cluster, topic, partition, entry["leader"])["log_end_offset"]
        assert leader_end == max(o for p, o in acknowledged if p == partition) + 1

    group.check_read(acknowledged)


def test_invalid_reassignments_are_refused(cluster: Cluster) -> None:
    cluster.create_topic("fixed", partitions=1, replication_factor=1)
    with pytest.raises(UnknownBrokerError, match="not registered"):
        cluster.reassign_partitions({("fixed", 0): [0, 7]})
    with pytest.raises(UnknownTopicOrPartitionError, match="no partition 5"):
        cluster.reassign_partitions({("fixed", 5): [0]})
    with pytest.raises(UnknownTopicError):
        cluster.reassign_partitions({("absent", 0): [0]})
    with pytest.raises(InvalidReplicaAssignmentError, match="twice"):
        cluster.reassign_partitions({("fixed", 0): [1, 1]})
    assert cluster.reassignment_in_progress() == {}

    # One at a time, as in Kafka.
    current = cluster.describe_topic("fixed")["partitions"][0]["replicas"]
    other = next(b for b in (0, 1, 2) if b not in current)
    cluster.reassign_partitions({("fixed", 0): [other]}, wait=False)
    with pytest.raises(ReassignmentInProgressError, match="in progress"):
        cluster.reassign_partitions({("fixed", 0): current})
    wait_until(lambda: not cluster.reassignment_in_progress(), 60, "the reassignment to finish")
    assert cluster.describe_topic("fixed")["partitions"][0]["replicas"] == [other]
    assert cluster.describe_topic("fixed")["partitions"][0]["leader"] == other


def test_a_new_controller_finishes_a_reassignment(cluster: Cluster) -> None:
    """The request is in ZooKeeper, and each step is decided afresh from it: a controller that
    dies mid-way leaves its successor to carry on."""
    cluster.create_topic("handover", partitions=1, replication_factor=2)
    producer = cluster.producer(acks="all")
    for i in range(50):
        producer.send("handover", value=f"r{i}".encode())
    producer.flush()
    producer.close()
    new_broker = cluster.add_broker()
    controller = cluster.controller()
    stays = next(b for b in (0, 1, 2) if b != controller)
    target = [new_broker, stays]
    cluster.reassign_partitions({("handover", 0): target}, wait=False)
    cluster.kill_broker(controller)
    cluster.wait_for_reassignment({("handover", 0): target}, timeout_s=120)
    assert cluster.controller() != controller
    entry = cluster.describe_topic("handover")["partitions"][0]
    assert entry["replicas"] == target and entry["leader"] in target
    wait_until(lambda: len({_replica_facts(cluster, "handover", 0, b)["log_end_offset"]
                            for b in target}) == 1, 30, "the new replicas to have equal logs")
    consumer = cluster.consumer(["handover"], group="after", auto_offset_reset="earliest")
    values: set[bytes] = set()
    wait_until(lambda: (values.update(r.value for r in consumer.poll(200)), len(values) == 50)[1],
               60, "every record to be read from the new replicas")
    consumer.close()
