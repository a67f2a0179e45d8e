"""The controller reaches its brokers over the control endpoints they register in ZooKeeper
(`actors/controller/broker_connections.py`, `actors/server/control_endpoint.py`), with real
ZooKeeper and Ray: each registration names its endpoint; a broker whose endpoint dropped the
controller's connection is connected to again and told of a leader that moved; the time for
leadership to move after its broker is killed is printed."""

from __future__ import annotations

import time

import ray

from rafka import Cluster
from rafka.coordination.registration import read_brokers
from tests.support.cluster import partition_state
from tests.support.replicas import ReplicaOnHost
from tests.support.waiting import wait_until


def _broker(cluster: Cluster, broker: int) -> object:
    return ray.get_actor(f"broker-{broker}", namespace=cluster.namespace)


def test_a_broker_whose_control_endpoint_restarted_is_told_where_leadership_moved(
        cluster: Cluster) -> None:
    registrations = read_brokers(cluster.store)
    assert len(registrations) == 3
    for info in registrations.values():
        assert info.control_endpoint and info.control_endpoint.startswith(f"{info.host}:")
    cluster.create_topic("moves", partitions=1, replication_factor=3,
                         config={"min.insync.replicas": 2})
    producer = cluster.producer(acks="all")
    producer.send("moves", value=b"before").result(30)
    controller = cluster.controller()
    leader = partition_state(cluster, "moves", 0)["leader"]
    assert controller is not None
    followers = sorted(set(registrations) - {leader})
    # A follower that is not the controller's own broker where possible: its connection is
    # the one dropped.
    told = next((b for b in followers if b != controller), followers[0])
    ray.get(_broker(cluster, told).restart_control_endpoint.remote(), timeout=30)

    killed_at = time.monotonic()
    cluster.kill_broker(leader)
    wait_until(lambda: partition_state(cluster, "moves", 0)["leader"] not in (leader, -1),
               60, "a new leader")
    moved_s = time.monotonic() - killed_at
    state = partition_state(cluster, "moves", 0)
    # The broker whose endpoint restarted applied the LeaderAndIsr that says so.
    wait_until(lambda: ReplicaOnHost(cluster, "moves", 0, told).describe()["leader_epoch"]
               == state["leader_epoch"], 30, f"broker {told} told of the new leader")
    print(f"leadership moved {moved_s:.1f} s after its broker was killed")
    assert producer.send("moves", value=b"after").result(30)
    producer.close()

    now_controller = cluster.controller()
    assert now_controller is not None
    stats = ray.get(_broker(cluster, now_controller).control_stats.remote(), timeout=30)
    assert stats["controller_connections"] is not None
    if now_controller == controller and told != controller:
        # The connection the restart dropped was made again.
        assert stats["controller_connections"][told] >= 2
    told_stats = ray.get(_broker(cluster, told).control_stats.remote(), timeout=30)
    assert told_stats["connections_accepted"] >= 1
