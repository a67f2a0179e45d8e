"""Faults of a broker: its ZooKeeper session expired on the server, and the broker paused as a
whole (SIGSTOP, then SIGCONT): its process and its replica hosts', which together are what a Kafka
broker's JVM is."""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import Iterator
from pathlib import Path

import ray
from kazoo.client import KazooClient

from rafka import Cluster

from .cluster import TEST_BROKER_CONFIG
from .waiting import wait_until

# The test clusters' ZooKeeper session timeout (cluster.py), and a pause well past it.
SESSION_TIMEOUT_S = TEST_BROKER_CONFIG["zookeeper.session.timeout.ms"] / 1000
PAST_THE_SESSION_S = SESSION_TIMEOUT_S + 4


def expire_broker_session(cluster: Cluster, broker_id: int) -> None:
    """Expire a broker's ZooKeeper session on the server: join it with its id and password,
    then close it (ZooKeeper's classic way to force expiry)."""
    broker = ray.get_actor(f"broker-{broker_id}", namespace=cluster.namespace)
    # No session id while the broker's client is between connections: wait for one.
    session = wait_until(
        lambda: (found := ray.get(broker.zookeeper_session.remote(), timeout=30))["session_id"]
        and found, 30, f"broker {broker_id} to have a ZooKeeper session")
    imposter = KazooClient(
        hosts=session["servers"], client_id=(session["session_id"], session["password"])
    )
    imposter.start(timeout=15)
    imposter.stop()
    imposter.close()


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


def exited(pid: int) -> bool:
    """Whether a process is gone, or a zombie that no longer runs."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError, IndexError):
        # ProcessLookupError: the process was reaped between the file's opening and its read.
        return True
    return state in ("Z", "X")


def wait_until_exited(pids: list[int], timeout_s: float = 30.0) -> None:
    """Ray forgets a killed actor's name before its process is gone, and a replica host's
    process answers its TCP port until then: a test that needs it silent waits for this."""
    wait_until(lambda: all(exited(pid) for pid in pids), timeout_s,
               f"processes {pids} to exit")
