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
from rafka.coordination.models import PartitionState, Versioned
from rafka.coordination.partition_state import PartitionStateStore
from rafka.coordination.registration import read_brokers
from tests.support.cluster import cluster_of_its_own
from tests.support.waiting import wait_until
from tests.support.workloads import Workload, check_acknowledged, read_everything


@pytest.fixture(scope="module")
def detached(zookeeper: EmbeddedZooKeeper, ray_session: None,
             tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    yield from cluster_of_its_own(zookeeper, tmp_path_factory, "restarts", detached=True)


def _states(cluster: Cluster, topic: str) -> list[Versioned[PartitionState]]:
    """Each partition's state as ZooKeeper holds it, with its znode version: the version moves
    at every election and ISR change."""
    states = PartitionStateStore(cluster.store)
    return [states.read_partition_state(topic, p["partition"])
            for p in cluster.describe_topic(topic)["partitions"]]


def _states_holding(cluster: Cluster, topic: str, broker: int,
                    ) -> list[Versioned[PartitionState]] | None:
    """The partitions' states if `broker` is in every ISR, else None."""
    states = _states(cluster, topic)
    return states if all(broker in state.value.isr for state in states) else None


def _broker_pid(cluster: Cluster, broker_id: int) -> int | None:
    """The broker's process id; None while Ray restarts it (a call then raises
    ActorUnavailableError, and a poll that comes early enough finds it so)."""
    handle = ray.get_actor(f"broker-{broker_id}", namespace=cluster.namespace)
    try:
        return ray.get(handle.pid.remote(), timeout=30)
    except ray.exceptions.ActorUnavailableError:
        return None


def test_a_killed_broker_process_comes_back_by_itself(detached: Cluster) -> None:
    detached.create_topic("restarted", partitions=3, replication_factor=3,
                          config={"min.insync.replicas": 2})
    # Not the controller: when it is, the broker its ZooKeeper session leaves with may be back
    # (Ray restarts it in a second or two) before the next controller reads who is alive, and a
    # controller that starts finds no death to act on, as Kafka's does (it elects only for
    # leaders that are not registered). tests/actors/controller/test_controller_faults.py kills
    # controllers.
    victim = next(broker for broker in (1, 2, 0) if broker != detached.wait_for_controller())
    with Workload(detached, "restarted") as workload:
        wait_until(lambda: len(workload.acknowledged) > 1000, 60, "acknowledged records")
        old_pid = _broker_pid(detached, victim)
        old_epoch = read_brokers(detached.store)[victim].epoch
        # The victim in every ISR, read with the versions: a replica host that took longer
        # than replica.lag.time.max.ms to start (a loaded machine) is out of its ISR a while,
        # and a death then moves nothing for that partition.
        old_states = wait_until(lambda: _states_holding(detached, "restarted", victim), 60,
                                f"broker {victim} in every ISR before it is killed")
        os.kill(old_pid, signal.SIGKILL)
        # The controller acts on the death: every partition loses the victim as leader (an
        # election) or from its ISR (a shrink, by the controller or, lag past, by the leader).
        # Its state's znode version says so for good; the ISR itself may already hold the
        # victim again by the time a poll looks.
        try:
            wait_until(lambda: all(now.version > before.version for now, before in zip(
                _states(detached, "restarted"), old_states, strict=True)), 30,
                f"the controller to act on broker {victim}'s death")
        except AssertionError as error:
            raise AssertionError(f"{error}: partition states before the kill {old_states}, "
                                 f"now {_states(detached, 'restarted')}") from None
        wait_until(lambda: _broker_pid(detached, victim) not in (None, old_pid), 60,
                   f"Ray to restart broker {victim}")
        wait_until(lambda: (info := read_brokers(detached.store).get(victim)) is not None
                   and info.epoch != old_epoch, 60, f"broker {victim} registered again")
        wait_until(lambda: all(victim in p["isr"] for p in
                               detached.describe_topic("restarted")["partitions"]),
                   60, f"broker {victim} back in every ISR")
        before = len(workload.acknowledged)
        # A failure says what the producer saw (it once found the restarted broker's metadata
        # missing partitions: a partial UpdateMetadata taken for the whole picture).
        try:
            wait_until(lambda: len(workload.acknowledged) > before + 500, 60, "writes after")
        except AssertionError as error:
            raise AssertionError(
                f"{error}; {len(workload.acknowledged) - before} acknowledged since, "
                f"{workload.failed} failed, last errors {workload.errors[-3:]!r}, partitions "
                f"{detached.describe_topic('restarted')['partitions']}") from None
    check_acknowledged(workload.acknowledged, read_everything(detached, "restarted"))
