"""acks=all below min.insync.replicas, live: the Jepsen 2013 scenario.

Both followers of a partition are paused (SIGSTOP) while an acks=all producer writes. Once the
leader drops them from the ISR, the high watermark may run up to the leader's log end, but no
record may be acknowledged while fewer than `min.insync.replicas` replicas hold it. When the
followers resume and rejoin the ISR, the producer's retries succeed, and nothing is written twice.
"""

from __future__ import annotations

import os
import signal
import time

from rafka import Cluster
from rafka.actors.errors import ErrorCode
from rafka.logstore.batch import build_batch
from tests.support.cluster import partition_state
from tests.support.replicas import ReplicaOnHost
from tests.support.waiting import wait_until
from tests.support.workloads import read_everything

TOPIC = "guarded"


def test_acks_all_is_never_acknowledged_by_the_leader_alone(cluster: Cluster) -> None:
    cluster.create_topic(TOPIC, partitions=1, replication_factor=3,
                         config={"min.insync.replicas": 2})
    producer = cluster.producer(acks="all", linger_ms=0, retry_backoff_ms=100)
    producer.send(TOPIC, value=b"before-0").result(timeout=60)
    state = wait_until(lambda: (s := partition_state(cluster, TOPIC, 0)) and len(s["isr"]) == 3
                       and s, 60, "a full ISR")
    leader = state["leader"]
    followers = [b for b in state["replicas"] if b != leader]
    pids = [ReplicaOnHost(cluster, TOPIC, 0, b).pid() for b in followers]
    leader_pid = ReplicaOnHost(cluster, TOPIC, 0, leader).pid()
    assert leader_pid not in pids

    for pid in pids:
        os.kill(pid, signal.SIGSTOP)
    try:
        futures = [producer.send(TOPIC, value=f"paused-{i}".encode()) for i in range(20)]
        # The leader drops the paused followers after replica.lag.time.max.ms (3 s here).
        wait_until(lambda: partition_state(cluster, TOPIC, 0)["isr"] == [leader], 30,
                   "the ISR to shrink to the leader")
        # A new request is refused outright; the producer's waiting ones keep being retried.
        reply = ReplicaOnHost(cluster, TOPIC, 0, leader).produce(
            build_batch([(None, b"direct", 0, None)]), -1, 5000)
        assert reply.code == ErrorCode.NOT_ENOUGH_REPLICAS, reply
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            acknowledged = [f for f in futures if f.done() and f.exception(0) is None]
            assert not acknowledged, (
                f"{len(acknowledged)} records acknowledged with only the leader holding them")
            time.sleep(0.2)
    finally:
        for pid in pids:
            os.kill(pid, signal.SIGCONT)

    wait_until(lambda: len(partition_state(cluster, TOPIC, 0)["isr"]) == 3, 60,
               "the followers back in the ISR")
    offsets = [future.result(timeout=120).offset for future in futures]
    producer.close()
    assert len(set(offsets)) == 20
    values = [record.value for record in read_everything(cluster, TOPIC)]
    expected = [b"before-0"] + [f"paused-{i}".encode() for i in range(20)]
    assert sorted(values) == sorted(expected), "a record lost or written twice"
    assert [v for v in values if v.startswith(b"paused")] == expected[1:], "order changed"
