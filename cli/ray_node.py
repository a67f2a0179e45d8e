"""`ray`, as cluster.yaml runs it on every node: Ray's own command line, with the raylet told its
dashboard agent's HTTP port.

Ray 2.60's raylet, as it starts, waits for each of its dashboard agent's three ports (gRPC,
metrics, HTTP) to be written to a file, 15 s at most (hard-coded), unless it was given the port;
past that it aborts, and the node's `ray start` fails. `ray start` gives it the gRPC and metrics
ports when they are fixed (`--dashboard-agent-grpc-port`, `--metrics-export-port`), but never the
HTTP port, even when `--dashboard-agent-listen-port` fixes it: the raylet always waits for that
file. A head restarting with the GCS on a busy machine, whose agent took 16 to 20 s to get there,
failed to start again on every try for minutes (docs/deployment.md, "What runs on every node").
So when the agent's HTTP port is fixed, this passes it to the raylet too (the raylet's own
`--dashboard_agent_listen_port` flag), and the raylet waits for none of the agent's files.

Once its raylet runs, `ray start` waits for the GCS to list the node, 30 s at most (hard-coded in
`ray._private.node`, whatever its message says of `RAY_raylet_start_wait_time_s`), and past that
fails. A GCS that has just restarted (the head killed and booted again) on a busy machine took
longer, while it was loading its tables and other nodes were registering too: in the bed's
nemesis the head's start failed twice and a worker's once, and every new try cost 35 to 44 s
more than waiting would have. So this waits up to `NODE_REGISTRATION_WAIT_S` for the listing.

    python -m rafka.cli.ray_node start --head --block --dashboard-agent-listen-port=20103 ...

Everything else is `ray`'s.
"""

from __future__ import annotations

import re
import sys
import time
from collections.abc import Callable
from typing import Any

from ray._private import ray_constants, services

# The agent's HTTP port, as `ray start` writes it into the raylet's command for the agent.
_AGENT_LISTEN_PORT = re.compile(r"--listen-port=(\d+)")
_RAYLET_FLAG = "--dashboard_agent_listen_port="

_start_ray_process = services.start_ray_process


def with_agent_listen_port(command: list[str]) -> list[str]:
    """The raylet's `command`, given the agent's HTTP port when `ray start` fixed it."""
    if any(part.startswith(_RAYLET_FLAG) for part in command):
        return command
    for part in command:
        if part.startswith("--dashboard_agent_command="):
            found = _AGENT_LISTEN_PORT.search(part)
            if found and int(found.group(1)) > 0:
                return [*command, f"{_RAYLET_FLAG}{found.group(1)}"]
    return command


def _start_ray_process_telling_the_raylet(command: list[str], process_type: str,
                                          *args: Any, **kwargs: Any) -> Any:
    if process_type == ray_constants.PROCESS_TYPE_RAYLET:
        command = with_agent_listen_port(command)
    return _start_ray_process(command, process_type, *args, **kwargs)


# How long a starting node waits for the GCS to list it (Ray's own wait: 30 s).
NODE_REGISTRATION_WAIT_S = 120.0
# How often it asks.
NODE_REGISTRATION_POLL_S = 0.5


def waiting_for_registration(get_node: Callable[..., Any], wait_s: float,
                             poll_s: float = NODE_REGISTRATION_POLL_S) -> Callable[..., Any]:
    """`get_node` (Ray's `services.get_node`, which raises RuntimeError while the GCS does not
    list the node), asked again until it answers or `wait_s` has passed."""

    def get_node_waiting(*args: Any, **kwargs: Any) -> Any:
        deadline = time.monotonic() + wait_s
        while True:
            try:
                return get_node(*args, **kwargs)
            except RuntimeError:
                if time.monotonic() >= deadline:
                    raise
                time.sleep(poll_s)

    return get_node_waiting


def main() -> None:
    services.start_ray_process = _start_ray_process_telling_the_raylet
    services.get_node = waiting_for_registration(services.get_node, NODE_REGISTRATION_WAIT_S)
    from ray.scripts.scripts import main as ray_main

    sys.argv[0] = "ray"
    ray_main()


if __name__ == "__main__":
    main()
