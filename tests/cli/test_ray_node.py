"""rafka.cli.ray_node: Ray's `ray start`, whose raylet no longer gives up on a dashboard agent
slower than 15 s to start (a restarting head on a busy machine; docs/deployment.md)."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from rafka.cli.ray_node import waiting_for_registration, with_agent_listen_port

AGENT = ("--dashboard_agent_command=/usr/bin/python3 -u .../dashboard/agent.py --grpc-port=20100 "
         "--listen-port={port} --node-manager-port=RAY_NODE_MANAGER_PORT_PLACEHOLDER")


def test_the_raylet_is_told_the_agents_fixed_http_port() -> None:
    command = ["raylet", "--node_id=abc", AGENT.format(port=20103)]
    assert with_agent_listen_port(command) == [*command, "--dashboard_agent_listen_port=20103"]


def test_no_port_to_tell_or_already_told_leaves_the_command_alone() -> None:
    for command in (["raylet", AGENT.format(port=0)], ["raylet"],
                    ["raylet", AGENT.format(port=1), "--dashboard_agent_listen_port=2"]):
        assert with_agent_listen_port(command) == command


def test_a_node_the_gcs_lists_late_is_waited_for() -> None:
    """Ray gives a starting node 30 s to be listed by the GCS: rafka asks on, up to its own
    bound, and passes on what the GCS finally says."""
    asked: list[str] = []

    def get_node(gcs_address: str, node_id: str) -> dict:
        asked.append(node_id)
        if len(asked) < 4:
            raise RuntimeError("GCS cannot find the node: registration not complete yet")
        return {"node_id": node_id}

    waiting = waiting_for_registration(get_node, wait_s=5, poll_s=0.01)
    assert waiting("10.0.0.1:6379", "abc") == {"node_id": "abc"}
    assert asked == ["abc"] * 4


def test_a_node_never_listed_fails_once_the_wait_is_over() -> None:
    def get_node(gcs_address: str, node_id: str) -> dict:
        raise RuntimeError("GCS cannot find the node")

    started = time.monotonic()
    with pytest.raises(RuntimeError, match="cannot find"):
        waiting_for_registration(get_node, wait_s=0.2, poll_s=0.01)("10.0.0.1:6379", "abc")
    assert 0.2 <= time.monotonic() - started < 5


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.mark.parametrize("ray_command", [["ray.scripts.scripts"], ["rafka.cli.ray_node"]],
                         ids=["ray", "rafka.cli.ray_node"])
def test_a_node_whose_agent_takes_25_s_to_start(ray_command: list[str], tmp_path: Path) -> None:
    """Ray's own `ray start` fails (the raylet aborts after 15 s); rafka's starts the node."""
    # Every Python process of this node imports this first: the dashboard agent sleeps 25 s.
    slow = tmp_path / "slow"
    slow.mkdir()
    (slow / "sitecustomize.py").write_text(
        "import time\n"
        "with open('/proc/self/cmdline', 'rb') as f:\n"
        "    if b'dashboard/agent.py' in f.read():\n"
        "        time.sleep(25)\n")
    # Short: Ray's Unix sockets live under it, and their paths are limited.
    temp = Path(tempfile.mkdtemp(prefix="rfk-node-", dir="/tmp"))
    ports = {option: free_port() for option in (
        "--port", "--ray-client-server-port", "--dashboard-agent-grpc-port",
        "--metrics-export-port", "--runtime-env-agent-port", "--dashboard-agent-listen-port",
        "--node-manager-port", "--object-manager-port")}
    process = subprocess.Popen(
        [sys.executable, "-m", *ray_command, "start", "--head", "--block",
         f"--temp-dir={temp}", "--include-dashboard=false", "--disable-usage-stats",
         "--num-cpus=0", "--object-store-memory=100000000",
         *(f"{option}={port}" for option, port in ports.items())],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True,
        env={**os.environ, "PYTHONPATH": f"{slow}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"})
    try:
        deadline = time.monotonic() + 90
        output = ""
        assert process.stdout is not None
        while time.monotonic() < deadline:
            line = process.stdout.readline()
            if not line:
                break  # `ray start` exited
            output += line
            if "Ray runtime started" in line:
                break
        started = "Ray runtime started" in output
        if ray_command == ["rafka.cli.ray_node"]:
            assert started, output[-3000:]
        else:
            assert not started and "timed out during startup" in output, output[-3000:]
    finally:
        # `ray start --block` leads its own process group: all of the node's processes.
        for sent in (signal.SIGTERM, signal.SIGKILL):
            try:
                os.killpg(process.pid, sent)
            except ProcessLookupError:
                break
            if sent == signal.SIGTERM and _group_gone(process, within_s=5):
                break
        process.wait(30)
        shutil.rmtree(temp, ignore_errors=True)


def _group_gone(leader: subprocess.Popen, *, within_s: float) -> bool:
    """Whether every process of the group `leader` leads has exited within `within_s` (the
    leader reaped meanwhile: a zombie still counts as one of the group)."""
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        leader.poll()
        try:
            os.killpg(leader.pid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.2)
    return False
