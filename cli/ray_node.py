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

    python -m rafka.cli.ray_node start --head --block --dashboard-agent-listen-port=20103 ...

Everything else is `ray`'s.
"""

from __future__ import annotations

import re
import sys
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


def main() -> None:
    services.start_ray_process = _start_ray_process_telling_the_raylet
    from ray.scripts.scripts import main as ray_main

    sys.argv[0] = "ray"
    ray_main()


if __name__ == "__main__":
    main()
