"""Where replicas live: a pool of replica hosts per broker, or one actor per replica.

Either way, every partition leader and follower runs inside a Ray actor on its broker's node,
records written with acks=all survive the death of a host, and the broker brings the host back.
"""

from __future__ import annotations

import os
import signal
import threading
import time

import ray

from rafka import Cluster
from rafka.actors.errors import OffsetNotAvailableError
from tests.support.cluster import partition_state
from tests.support.replicas import ReplicaOnHost
from tests.support.waiting import wait_until
from tests.support.workloads import check_acknowledged, read_everything


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


def _thread_niceness(pid: int) -> dict[int, int]:
    """Every thread's nice value (Linux keeps one per thread), from /proc."""
    niceness = {}
    for thread in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{thread}/stat") as stat:
                line = stat.read()
        except FileNotFoundError:
            continue  # the thread ended between the listing and the read
        # After "pid (comm) ", the 17th field is the nice value; comm may hold spaces.
        niceness[int(thread)] = int(line.rsplit(")", 1)[1].split()[16])
    return niceness


@ray.remote(num_cpus=0)
def _a_ray_task_pid() -> int:
    return os.getpid()


def test_brokers_and_replica_hosts_run_at_a_servers_priority(cluster: Cluster) -> None:
    # Ray starts its workers at nice 15 (their main threads at least), below any client on the
    # machine; a broker is a server.
    assert 15 in _thread_niceness(ray.get(_a_ray_task_pid.remote(), timeout=60)).values()
    cluster.create_topic("prioritised", partitions=3, replication_factor=3)
    brokers = {broker: ray.get(ray.get_actor(f"broker-{broker}", namespace=cluster.namespace)
                               .pid.remote(), timeout=30) for broker in range(3)}
    servers = [*brokers.values(), *(pid for hosts in _host_pids(cluster).values()
                                    for pid in hosts.values())]
    assert len(servers) > 3
    for pid in servers:
        assert set(_thread_niceness(pid).values()) == {0}, pid


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


def test_a_restarted_leader_never_reports_an_older_high_watermark(cluster: Cluster) -> None:
    """A leader whose host restarts comes back with the high watermark it last checkpointed,
    behind what consumers already saw, until its followers fetch again. Until then it must say
    OFFSET_NOT_AVAILABLE (KIP-207), never hand out the older value: a consumer that trusted it
    would stop reading short of acknowledged records, or reset its position backwards."""
    topic = "rewind"
    cluster.create_topic(topic, partitions=1, replication_factor=3,
                         config={"min.insync.replicas": 2})
    producer = cluster.producer(acks="all", linger_ms=0)
    consumer = cluster.consumer([topic], default_api_timeout_ms=500)
    acknowledged = 0
    lagged = False
    # The host checkpoints its high watermarks every few seconds: a restart that lands just
    # after a checkpoint has nothing stale to show, so try until one does.
    for _attempt in range(4):
        for future in [producer.send(topic, value=b"v") for _ in range(30)]:
            future.result(60)
        acknowledged += 30
        assert consumer.end_offsets([(topic, 0)])[(topic, 0)] == acknowledged
        state = wait_until(lambda: (s := partition_state(cluster, topic, 0))
                           and len(s["isr"]) == 3 and s, 60, "a full ISR")
        leader = ReplicaOnHost(cluster, topic, 0, state["leader"])
        followers = [ReplicaOnHost(cluster, topic, 0, b).pid()
                     for b in state["replicas"] if b != state["leader"]]
        old_pid = leader.pid()
        for pid in followers:
            os.kill(pid, signal.SIGSTOP)
        try:
            ray.kill(leader.host)
            restarted = wait_until(lambda pid=old_pid: _leading_again(cluster, topic, pid), 60,
                                   "the leader's host back, leading again")
            lagged = restarted["high_watermark"] < restarted["log_end_offset"]
            refused = 0
            deadline = time.monotonic() + 2
            while time.monotonic() < deadline:
                end = _end_offset(consumer, topic)
                if end is None:
                    refused += 1
                    continue
                assert end >= acknowledged, (
                    f"the high watermark went back from {acknowledged} to {end}")
        finally:
            for pid in followers:
                os.kill(pid, signal.SIGCONT)
        if lagged:
            assert refused, "a lagging leader answered end_offsets anyway"
            break
    assert lagged, "no restart caught the leader with a stale high watermark"
    # The followers, just resumed, have yet to fetch: until they do, the leader still says
    # OFFSET_NOT_AVAILABLE, which is "not yet" here, not a failure.
    wait_until(lambda: _end_offset(consumer, topic) == acknowledged, 60,
               "the high watermark back where it was")
    consumer.close()
    producer.close()


def _end_offset(consumer, topic: str) -> int | None:
    """Partition 0's end offset; None while its leader's high watermark lags (KIP-207)."""
    try:
        return consumer.end_offsets([(topic, 0)])[(topic, 0)]
    except OffsetNotAvailableError:
        return None


def _leading_again(cluster: Cluster, topic: str, old_pid: int) -> dict | None:
    try:
        replica = ReplicaOnHost(cluster, topic, 0)
        facts = replica.describe()
    except (LookupError, ray.exceptions.RayActorError):
        return None
    return facts if replica.pid() != old_pid and facts["role"] == "leader" else None
