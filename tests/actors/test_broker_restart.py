"""A detached broker (one `rafka up` starts) whose process dies is restarted by Ray, starts
itself, registers again, catches up and is back in every ISR, with no command typed."""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator

import pytest
import ray

from rafka import Cluster
from rafka.coordination.embedded import EmbeddedZooKeeper
from tests.support.cluster import cluster_of_its_own
from tests.support.waiting import wait_until
from tests.support.workloads import Workload, check_acknowledged, read_everything


@pytest.fixture(scope="module")
def detached(zookeeper: EmbeddedZooKeeper, ray_session: None,
             tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    yield from cluster_of_its_own(zookeeper, tmp_path_factory, "restarts", detached=True)


def _broker_pid(cluster: Cluster, broker_id: int) -> int:
    handle = ray.get_actor(f"broker-{broker_id}", namespace=cluster.namespace)
    return ray.get(handle.pid.remote(), timeout=30)


def test_a_killed_broker_process_comes_back_by_itself(detached: Cluster) -> None:
    detached.create_topic("restarted", partitions=3, replication_factor=3,
                          config={"min.insync.replicas": 2})
    victim = 1
    with Workload(detached, "restarted") as workload:
        wait_until(lambda: len(workload.acknowledged) > 1000, 60, "acknowledged records")
        old_pid = _broker_pid(detached, victim)
        os.kill(old_pid, signal.SIGKILL)
        wait_until(lambda: all(victim not in p["isr"] for p in
                               detached.describe_topic("restarted")["partitions"]),
                   30, f"broker {victim} out of the ISR")
        wait_until(lambda: _broker_pid(detached, victim) != old_pid, 60,
                   f"Ray to restart broker {victim}")
        wait_until(lambda: victim in {b["id"] for b in detached.brokers()}, 60,
                   f"broker {victim} registered again")
        wait_until(lambda: all(victim in p["isr"] for p in
                               detached.describe_topic("restarted")["partitions"]),
                   60, f"broker {victim} back in every ISR")
        before = len(workload.acknowledged)
        wait_until(lambda: len(workload.acknowledged) > before + 500, 60, "writes after")
    check_acknowledged(workload.acknowledged, read_everything(detached, "restarted"))
