"""What the pipeline tests share: the Spark executors' processes, and Spark drivers in processes
of their own (`tests.support.sink_driver`, `tests.support.write_driver`) for tests that kill
executors and drivers."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import ray

from rafka import Cluster

REPO = Path(__file__).resolve().parents[2]
# RayDP can lose the executor Ray restarts (docs/pipelines.md, "A known problem"): a driver
# without one this long is taken to have lost it for good.
EXECUTOR_LOST_AFTER_S = 60


def spark_executor_pids() -> list[int]:
    """The processes of the Spark executors (RayDP's executor actors) alive in Ray."""
    # Ray's GCS actor table: its state API (`ray.util.state`) needs the dashboard. The
    # executors belong to the job of RayDP's application master, not to their driver's.
    return [actor["Pid"] for actor in ray._private.state.actors().values()
            if actor["ActorClassName"].endswith(".RayDPExecutor") and actor["State"] == "ALIVE"]


def start_driver(module: str, cluster: Cluster, arguments: list[str],
                 log: Path) -> subprocess.Popen:
    """`python -m module RAY_ADDRESS ZK CLUSTER *arguments`, its output appended to `log`."""
    args = [sys.executable, "-m", module, ray.get_runtime_context().gcs_address,
            str(cluster.stack.zk_address), cluster.name, *arguments]
    with open(log, "a") as out:
        return subprocess.Popen(args, cwd=REPO, stdout=out, stderr=subprocess.STDOUT,
                                env={**os.environ, "PYTHONPATH": str(REPO.parent)})


class ExecutorWatch:
    """Tells when a driver's Spark has had no executor for `EXECUTOR_LOST_AFTER_S`; its
    executors are those alive that are not in `not_the_drivers` (other sessions', killed)."""

    def __init__(self, not_the_drivers: set[int]) -> None:
        self.not_the_drivers = not_the_drivers
        self._without_since: float | None = None

    def lost(self) -> bool:
        if set(spark_executor_pids()) - self.not_the_drivers:
            self._without_since = None
            return False
        now = time.monotonic()
        if self._without_since is None:
            self._without_since = now
        return now - self._without_since > EXECUTOR_LOST_AFTER_S

    def reset(self) -> None:
        self._without_since = None
