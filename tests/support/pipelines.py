"""What the pipeline tests look at: the Spark executors' processes, and what a topic holds."""

from __future__ import annotations

import time

import ray

from rafka import Cluster


def spark_executor_pids() -> list[int]:
    """The processes of the Spark executors (RayDP's executor actors) alive in Ray."""
    # Ray's GCS actor table: its state API (`ray.util.state`) needs the dashboard. The
    # executors belong to the job of RayDP's application master, not to their driver's.
    return [actor["Pid"] for actor in ray._private.state.actors().values()
            if actor["ActorClassName"].endswith(".RayDPExecutor") and actor["State"] == "ALIVE"]


def stored_records(cluster: Cluster, topic: str, expected: int, timeout_s: float = 60) -> list:
    """The records of `topic`: read until `expected` are in, then a little more, so that a
    duplicate beyond them is seen too."""
    consumer = cluster.consumer([topic], auto_offset_reset="earliest")
    records = []
    deadline = time.monotonic() + timeout_s
    while len(records) < expected and time.monotonic() < deadline:
        records += consumer.poll(500)
    records += consumer.poll(500)
    consumer.close()
    return records


def stored_count(cluster: Cluster, topic: str, partitions: int) -> int:
    """How many records `topic` holds (its partitions' high watermarks, summed)."""
    consumer = cluster.consumer()
    try:
        return sum(consumer.end_offsets([(topic, p) for p in range(partitions)]).values())
    finally:
        consumer.close()
