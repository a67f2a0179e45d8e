"""Pausing a broker as a whole (SIGSTOP, then SIGCONT): its process and its replica hosts', which
together are what a Kafka broker's JVM is."""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import Iterator

import ray

from rafka import Cluster

# The test clusters' ZooKeeper session timeout (tests/conftest.py), and a pause well past it.
SESSION_TIMEOUT_S = 6.0
PAST_THE_SESSION_S = SESSION_TIMEOUT_S + 4


def host_pids(cluster: Cluster, broker: int) -> list[int]:
    """The processes of a broker's replica hosts."""
    handle = ray.get_actor(f"broker-{broker}", namespace=cluster.namespace)
    return list(ray.get(handle.replica_host_pids.remote(), timeout=30).values())


def broker_pids(cluster: Cluster, broker: int) -> list[int]:
    """A broker's process and its replica hosts'."""
    handle = ray.get_actor(f"broker-{broker}", namespace=cluster.namespace)
    return [ray.get(handle.pid.remote(), timeout=30), *host_pids(cluster, broker)]


@contextlib.contextmanager
def paused(pids: list[int]) -> Iterator[None]:
    for pid in pids:
        os.kill(pid, signal.SIGSTOP)
    try:
        yield
    finally:
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)
