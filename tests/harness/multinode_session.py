"""Run by test_multinode.py in a process of its own: rafka on a simulated 3-node Ray cluster.

    python -m tests.harness.multinode_session <work dir> <result.json>   (from the repo root)

The pytest process holds a local Ray already (tests/conftest.py), and a process can be connected
to one Ray only, so the multi-node cluster (`ray.cluster_utils.Cluster`: a head plus three worker
nodes, each a raylet of its own on this machine) lives here. Each worker node offers one unit of
`rafka_broker`, as cluster.yaml sets up, and each broker asks for one, so that the three brokers
land on three nodes; the head offers none, so that removing a worker node is a broker's machine
dying, never the driver's.

It records, then writes one JSON for the test to judge:
  1. placement: each broker's node and, from Ray's state API, each replica actor's node;
  2. node loss: an idempotent acks=all producer writes to a topic with replication factor 3
     and min.insync.replicas 2 while the worker node hosting the leader of partition 0 is
     removed; then every partition is read from the beginning with a plain consumer.
Everything it starts (ZooKeeper, the Ray nodes) is stopped before it exits.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from pathlib import Path
from typing import Any

import ray
from ray.cluster_utils import Cluster as RayCluster
from ray.util.state import list_actors

from rafka import Cluster
from rafka.actors.naming import replica_host_name
from rafka.common.waiting import wait_until
from rafka.coordination.embedded import EmbeddedZooKeeper, free_port, pid_alive
from rafka.coordination.registration import read_brokers
from tests.support.workloads import settle

TOPIC = "placed"
PARTITIONS = 3
BROKERS = 3
RESOURCE = "rafka_broker"  # the name cluster.yaml's nodes offer and `rafka up` asks for
# As tests/support/cluster.py's TEST_BROKER_CONFIG: a dead broker's session ends in seconds.
BROKER_CONFIG = {
    "zookeeper.session.timeout.ms": 4000,
    "replica.lag.time.max.ms": 3000,
    "replica.fetch.wait.max.ms": 200,
}
WRITE_BEFORE_S = 3.0  # acknowledged writes before the node goes
WRITE_AFTER_S = 6.0  # and after every partition has a live leader again


def placement(cluster: Cluster, ray_address: str) -> dict[str, Any]:
    """Where Ray runs each broker (as it says itself) and each replica: the node of its replica
    host, as Ray's state API says (the view `ray list actors` gives a user)."""
    brokers = {}
    for broker_id in range(BROKERS):
        handle = ray.get_actor(f"broker-{broker_id}", namespace=cluster.namespace)
        brokers[broker_id] = ray.get(handle.describe.remote(), timeout=30)["node_id"]
    hosts = {}
    # The address said outright: left out, the state API may pick another Ray on this machine.
    for actor in list_actors(address=ray_address, filters=[("state", "=", "ALIVE")],
                             limit=10_000, detail=True, raise_on_missing_output=False):
        if actor.ray_namespace == cluster.namespace:
            hosts[actor.name] = actor.node_id
    pools = {b: info.replica_hosts for b, info in read_brokers(cluster.store).items()}
    replicas = {}
    for p in cluster.describe_topic(TOPIC)["partitions"]:
        for b in p["replicas"]:
            host = replica_host_name(b, TOPIC, p["partition"], pools.get(b, 0))
            if host in hosts:
                replicas[f"{TOPIC}-{p['partition']}-{b}"] = hosts[host]
    return {"brokers": brokers, "replicas": replicas}


class Workload:
    """One idempotent acks=all producer in a thread; every attempt and every ack, timed."""

    def __init__(self, cluster: Cluster) -> None:
        self.producer = cluster.producer(acks="all", enable_idempotence=True, linger_ms=2,
                                         retry_backoff_ms=50, delivery_timeout_ms=120_000)
        self.attempts: list[float] = []
        self.acks: list[tuple[bytes, int, int, float]] = []
        self.errors: list[str] = []
        self.crashed: BaseException | None = None
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        try:
            self._write()
        except BaseException as error:
            self.crashed = error
            raise

    def _write(self) -> None:
        pending: list[tuple[bytes, Any]] = []
        sequence = 0
        while not self.stop.is_set():
            for _ in range(10):
                value = f"p0-{sequence}".encode()
                self.attempts.append(time.monotonic())
                pending.append((value, self.producer.send(TOPIC, value=value)))
                sequence += 1
            time.sleep(0.01)
            pending = settle(pending, wait=False, on_ack=self._acknowledged,
                             on_error=self._failed)
        settle(pending, wait=True, on_ack=self._acknowledged, on_error=self._failed)
        self.producer.close()

    def _acknowledged(self, value: bytes, meta: Any) -> None:
        self.acks.append((value, meta.partition, meta.offset, time.monotonic()))

    def _failed(self, _value: bytes, error: BaseException) -> None:
        self.errors.append(repr(error))  # not acknowledged: it may or may not be in the log


def read_everything(cluster: Cluster) -> tuple[dict[int, list], list]:
    """Every partition from offset 0 to its high watermark, with a plain consumer; its polls
    too, so that the checker sees the reads go up one offset at a time."""
    consumer = cluster.consumer([TOPIC], auto_offset_reset="earliest")
    ends = consumer.end_offsets([(TOPIC, p) for p in range(PARTITIONS)])
    log: dict[int, list] = {p: [] for p in range(PARTITIONS)}
    polls = []
    deadline = time.monotonic() + 120
    while any(consumer.position(*tp) < end for tp, end in ends.items()):
        records = consumer.poll(500)
        polls.append([time.monotonic(),
                      [[r.partition, r.offset, r.value.decode()] for r in records]])
        for record in records:
            log[record.partition].append([record.offset, record.value.decode()])
        if time.monotonic() > deadline:
            raise TimeoutError("the final read did not finish")
    consumer.close()
    return log, polls


def leaders(cluster: Cluster) -> list[dict[str, Any]]:
    return [{key: p[key] for key in ("partition", "leader", "isr", "leader_epoch")}
            for p in cluster.describe_topic(TOPIC)["partitions"]]


def lose_a_node(cluster: Cluster, ray_cluster: RayCluster,
                broker_nodes: dict[int, str]) -> dict[str, Any]:
    before = leaders(cluster)
    controller_before = cluster.controller()
    victim = before[0]["leader"]
    node = next(n for n in ray_cluster.worker_nodes if n.node_id == broker_nodes[victim])
    handle = ray.get_actor(f"broker-{victim}", namespace=cluster.namespace)
    victim_pids = [ray.get(handle.pid.remote(), timeout=30)] + [
        ray.get(handle.replica_pid.remote(TOPIC, p), timeout=30) for p in range(PARTITIONS)]
    workload = Workload(cluster)
    workload.thread.start()
    try:
        wait_until(lambda: workload.acks or workload.crashed, 60, "the first acknowledged write")
        if workload.crashed:
            raise RuntimeError("the producer's thread failed") from workload.crashed
        time.sleep(WRITE_BEFORE_S)
        removed_at = time.monotonic()
        # The machine dies: its raylet and every worker process on it (the broker, its
        # replicas) are killed, without a graceful shutdown.
        ray_cluster.remove_node(node, allow_graceful=False)
        removed_done = time.monotonic()
        # Its worker processes (the broker, the replicas) notice their raylet is gone and exit
        # on their own; until then they still answer the driver, which calls them directly.
        wait_until(lambda: not any(pid_alive(pid) for pid in victim_pids), 60,
                 f"broker {victim}'s processes to exit")
        gone_at = time.monotonic()
        orphaned = [p["partition"] for p in before if p["leader"] == victim]

        def recovered() -> list | None:
            now = leaders(cluster)
            moved = all(now[p]["leader"] not in (-1, victim) for p in orphaned)
            return now if moved and victim not in {b["id"] for b in cluster.brokers()} else None

        after = wait_until(recovered, 90, f"new leaders for broker {victim}'s partitions")
        recovered_at = time.monotonic()
        time.sleep(WRITE_AFTER_S)
    finally:
        workload.stop.set()
        workload.thread.join(300)
    if workload.crashed:
        raise RuntimeError("the producer's thread failed") from workload.crashed
    # The lost broker leaves every ISR too (the controller takes it out when it sees it gone).
    after_shrink = wait_until(
        lambda: (now := leaders(cluster)) and all(victim not in p["isr"] for p in now) and now,
        60, f"broker {victim} to leave every ISR")
    log, polls = read_everything(cluster)
    return {
        "victim_broker": victim,
        "victim_node": broker_nodes[victim],
        "orphaned_partitions": orphaned,
        "leaders_before": before,
        "leaders_after": after,
        "leaders_final": after_shrink,
        "live_brokers_after": [b["id"] for b in cluster.brokers()],
        "controller_before": controller_before,
        "controller_after": cluster.controller(),
        "removed_at": removed_at,
        "remove_node_s": removed_done - removed_at,
        "processes_gone_s": gone_at - removed_at,
        "recovered_s": recovered_at - removed_at,
        "attempts": workload.attempts,
        "acks": [[v.decode(), p, o, at] for v, p, o, at in workload.acks],
        "client_errors": workload.errors[:20],
        "client_error_count": len(workload.errors),
        "final_log": log,
        "polls": polls,
        "end": time.monotonic(),
    }


def main(work_dir: Path, result_path: Path) -> None:
    started = time.monotonic()
    result: dict[str, Any] = {}
    zookeeper = EmbeddedZooKeeper(work_dir / "zookeeper", force_sync=False)
    ray_cluster: RayCluster | None = None
    cluster: Cluster | None = None
    try:
        zookeeper.start()
        result["zookeeper_pid"] = zookeeper.pid
        # The head runs the driver and the state API (the dashboard); no broker goes there.
        ray_cluster = RayCluster(initialize_head=True, shutdown_at_exit=True, head_node_args={
            "num_cpus": 1, "gcs_server_port": free_port(), "include_dashboard": True,
            "dashboard_port": free_port(), "ray_client_server_port": free_port()})
        for _ in range(BROKERS):
            ray_cluster.add_node(num_cpus=0, resources={RESOURCE: 1})
        ray_cluster.wait_for_nodes()
        result["ray_nodes_s"] = time.monotonic() - started
        result["head_node"] = ray_cluster.head_node.node_id
        result["worker_nodes"] = sorted(n.node_id for n in ray_cluster.worker_nodes)
        cluster = Cluster.start(BROKERS, name="multinode", zk=str(zookeeper.address),
                                ray_address=ray_cluster.address, data_dir=work_dir / "data",
                                broker_config=BROKER_CONFIG, broker_resources={RESOURCE: 1})
        result["started_s"] = time.monotonic() - started
        cluster.create_topic(TOPIC, partitions=PARTITIONS, replication_factor=3,
                             config={"min.insync.replicas": 2})
        result["assignment"] = {p["partition"]: p["replicas"]
                                for p in cluster.describe_topic(TOPIC)["partitions"]}
        result["expected_replicas"] = sorted(
            f"{TOPIC}-{p}-{b}" for p, replicas in result["assignment"].items()
            for b in replicas)
        result["placement"] = wait_until(
            lambda: (found := placement(cluster, ray_cluster.address))
            and len(found["replicas"]) == len(result["expected_replicas"]) and found,
            30, "every replica actor in Ray's state API")
        result["placed_s"] = time.monotonic() - started
        result["node_loss"] = lose_a_node(cluster, ray_cluster, result["placement"]["brokers"])
    finally:
        try:
            if cluster is not None:
                cluster.shutdown()  # its brokers, then ray.shutdown() (it connected the driver)
        finally:
            ray.shutdown()
            try:
                if ray_cluster is not None:
                    ray_cluster.shutdown()
            finally:
                zookeeper.stop()
        result["total_s"] = time.monotonic() - started
        print({key: round(value, 1) for key, value in result.items() if key.endswith("_s")})
        result_path.write_text(json.dumps(result))


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]))
