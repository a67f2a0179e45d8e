"""Where replicas live: a pool of replica hosts per broker, or one actor per replica.

Either way, every partition leader and follower runs inside a Ray actor on its broker's node,
records written with acks=all survive the death of a host, and the broker brings the host back.
"""

from __future__ import annotations

import threading

import ray

from actors import Cluster

from ..replicas import ReplicaOnHost
from .conftest import partition_state, wait_until
from .test_failover import check_acknowledged, read_everything


def _host_pids(cluster: Cluster) -> dict[int, dict[str, int]]:
    return {broker: ray.get(ray.get_actor(f"broker-{broker}", namespace=cluster.namespace)
                            .replica_host_pids.remote(), timeout=30)
            for broker in range(3)}


def _write_while(cluster: Cluster, topic: str, action) -> dict[tuple[int, int], bytes]:
    """An acks=all producer writes numbered records across the topic while `action` runs."""
    producer = cluster.producer(acks="all", linger_ms=2, retry_backoff_ms=50)
    acknowledged: dict[tuple[int, int], bytes] = {}
    stop = threading.Event()

    def write() -> None:
        sequence = 0
        while not stop.is_set():
            futures = [(f"r-{sequence + i}".encode(),
                        producer.send(topic, value=f"r-{sequence + i}".encode()))
                       for i in range(50)]
            sequence += 50
            for value, future in futures:
                meta = future.result(120)
                acknowledged[(meta.partition, meta.offset)] = value

    writer = threading.Thread(target=write)
    writer.start()
    try:
        wait_until(lambda: len(acknowledged) >= 200, 60, "records acknowledged before")
        action()
        count = len(acknowledged)
        wait_until(lambda: len(acknowledged) >= count + 200, 60, "records acknowledged after")
    finally:
        stop.set()
        writer.join(180)
        producer.close()
    return acknowledged


def test_a_pool_holds_many_replicas_in_few_processes(start_cluster) -> None:
    cluster = start_cluster(3, broker_config={"num.replica.hosts": 2})
    cluster.create_topic("pooled", partitions=24, replication_factor=3,
                         config={"min.insync.replicas": 2})
    pids = _host_pids(cluster)
    # 72 replicas, in at most two processes per broker, none shared between brokers.
    assert all(1 <= len(hosts) <= 2 for hosts in pids.values()), pids
    every = [pid for hosts in pids.values() for pid in hosts.values()]
    assert len(every) == len(set(every))
    for p in cluster.describe_topic("pooled")["partitions"]:
        for broker in p["replicas"]:
            assert ReplicaOnHost(cluster, "pooled", p["partition"], broker).pid() in (
                pids[broker].values())

    # A host dies with the leaders of several partitions: the broker brings it back, with the
    # same leaders and epochs, and the producer's retries lose nothing.
    victim = ReplicaOnHost(cluster, "pooled", 0)
    led_there = [p["partition"] for p in cluster.describe_topic("pooled")["partitions"]
                 if p["leader"] == victim.broker
                 and ReplicaOnHost(cluster, "pooled", p["partition"]).host_name
                 == victim.host_name]
    assert len(led_there) > 1
    acknowledged = _write_while(cluster, "pooled", lambda: ray.kill(victim.host))
    assert ReplicaOnHost(cluster, "pooled", 0, victim.broker).pid() != victim.pid
    check_acknowledged(acknowledged, read_everything(cluster, "pooled"))


def test_one_actor_per_replica_when_the_pool_is_zero(start_cluster) -> None:
    cluster = start_cluster(3, broker_config={"num.replica.hosts": 0})
    cluster.create_topic("single", partitions=3, replication_factor=3,
                         config={"min.insync.replicas": 2})
    replicas = {(p["partition"], broker): ReplicaOnHost(cluster, "single", p["partition"], broker)
                for p in cluster.describe_topic("single")["partitions"]
                for broker in p["replicas"]}
    pids = {key: replica.pid() for key, replica in replicas.items()}
    assert len(set(pids.values())) == 9, "every replica in a process of its own"
    assert all(replica.host_name.endswith(f"-single-{partition}")
               for (partition, _broker), replica in replicas.items())

    # A follower's actor dies: only that replica goes; it comes back and catches up.
    state = partition_state(cluster, "single", 1)
    follower = next(b for b in state["replicas"] if b != state["leader"])
    acknowledged = _write_while(cluster, "single",
                                lambda: ray.kill(replicas[(1, follower)].host))
    wait_until(lambda: follower in partition_state(cluster, "single", 1)["isr"], 60,
               "the recreated follower back in the ISR")
    assert ReplicaOnHost(cluster, "single", 1, follower).pid() != pids[(1, follower)]
    others = {key: pid for key, pid in pids.items() if key != (1, follower)}
    assert all(replicas[key].pid() == pid for key, pid in others.items())
    check_acknowledged(acknowledged, read_everything(cluster, "single"))
