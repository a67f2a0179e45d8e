"""What the pipeline tests look at: the Spark executors' processes."""

from __future__ import annotations

import ray


def spark_executor_pids() -> list[int]:
    """The processes of the Spark executors (RayDP's executor actors) alive in Ray."""
    # Ray's GCS actor table: its state API (`ray.util.state`) needs the dashboard. The
    # executors belong to the job of RayDP's application master, not to their driver's.
    return [actor["Pid"] for actor in ray._private.state.actors().values()
            if actor["ActorClassName"].endswith(".RayDPExecutor") and actor["State"] == "ALIVE"]
