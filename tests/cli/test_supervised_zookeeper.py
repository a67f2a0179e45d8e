"""ZooKeeper members kept running by `rafka supervise`, as cluster.yaml runs them: each node's
`rafka zookeeper stop && rafka supervise start zookeeper -- rafka zookeeper run ...`.

Three "nodes" on this machine, each a RAFKA_HOME of its own (so each has its `zookeeper`
supervisor and its member's data dir where cluster.yaml's nodes have them), form a real
3-member ensemble. A member SIGKILLed comes back by itself and serves what it served before;
`rafka zookeeper stop` stops it for good. Everything the commands start carries a marker in its
environment (tests/support/processes.py): what a failing test leaves is killed by PID.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from kazoo.client import KazooClient
from kazoo.exceptions import KazooException
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.retry import KazooRetry

from rafka.cli.supervisor import SupervisedFiles, is_supervisor
from rafka.coordination.embedded import is_embedded_server, pid_alive, recorded_pid
from rafka.coordination.ensemble import QUORUM_MODES, Ensemble, ensemble_modes, server_mode
from tests.support.cli import Rafka
from tests.support.processes import MARKER_VARIABLE, kill_marked, left_behind, new_marker
from tests.support.waiting import wait_until

# Three JVMs and their supervisors, started here.
pytestmark = pytest.mark.cluster

# Quick quorum timing, as tests/coordination/test_ensemble.py's; the supervisor's backoff is
# its default (1 s before the first restart), as on a node.
TIMING = ("--tick-time-ms", "250", "--init-limit", "20", "--sync-limit", "8", "--heap-mb", "128")
# How soon a SIGKILLed member serves again: the 1 s backoff, the command's start (an
# interpreter, then the JVM) and its sync with the leader, on a busy 2-core machine.
BACK_WITHIN_S = 20.0
ZNODE = "/written-before-the-kill"


class Node:
    """One machine of the ensemble: `rafka` with its own HOME and RAFKA_HOME."""

    def __init__(self, root: Path, server_id: int, servers: str, marker: str) -> None:
        self.id = server_id
        self.servers = servers
        self.rafka = Rafka(root)
        self.rafka.env[MARKER_VARIABLE] = marker
        rafka_home = Path(self.rafka.env["RAFKA_HOME"])
        self.data_dir = (rafka_home / "zookeeper-member").resolve()
        self.supervisor = SupervisedFiles((rafka_home / "supervised").resolve(), "zookeeper")

    def member_options(self) -> list[str]:
        return ["--id", str(self.id), "--servers", self.servers, *TIMING]

    def deploy(self) -> None:
        """What cluster.yaml runs on each node at each `ray up` and boot (with `--id N` for
        `--id auto`: every member of this ensemble is on 127.0.0.1)."""
        stopped = self.rafka("zookeeper", "stop")
        assert stopped.returncode == 0, stopped.stderr
        started = self.rafka("supervise", "start", "zookeeper", "--", *self.run_command())
        assert started.returncode == 0, started.stderr

    def run_command(self) -> list[str]:
        return [sys.executable, "-m", "rafka", "zookeeper", "run", *self.member_options()]

    def command_pid(self) -> int | None:
        pid = self.supervisor.read_state().get("command_pid")
        return pid if isinstance(pid, int) else None

    def supervisor_pid(self) -> int | None:
        pid = self.supervisor.recorded_pid()
        return pid if pid is not None and is_supervisor(pid, self.supervisor) else None


@pytest.fixture
def nodes(tmp_path: Path) -> Iterator[list[Node]]:
    ensemble = Ensemble.on_free_ports(3)
    servers = ",".join(f"{s.host}:{s.quorum_port}:{s.election_port};{s.client_port}"
                       for s in ensemble.servers)
    marker = new_marker()
    yield [Node(tmp_path / f"node-{server_id}", server_id, servers, marker)
           for server_id in ensemble.ids]
    kill_marked(marker)  # the supervisors among them, so nothing is started again
    kill_marked(marker)


def _client_port(node: Node) -> int:
    return int(node.servers.split(",")[node.id - 1].split(";")[1])


def _read_from(port: int) -> bytes | None:
    """The znode as the member on `port` alone serves it; None while it does not serve."""
    client = KazooClient(hosts=f"127.0.0.1:{port}", timeout=5,
                         connection_retry=KazooRetry(max_tries=0))
    try:
        client.start(timeout=1)
        value, _ = client.get(ZNODE)
        return bytes(value)
    except (KazooTimeoutError, KazooException):  # not up yet, or not in a quorum yet
        return None
    finally:
        client.stop()
        client.close()


def test_a_supervised_member_killed_comes_back_and_stop_stops_it_for_good(
        nodes: list[Node]) -> None:
    first = nodes[0]
    connect_string = ",".join(f"127.0.0.1:{_client_port(node)}" for node in nodes)

    # A node deployed before members were supervised: its member runs detached.
    detached = first.rafka("zookeeper", "start", *first.member_options())
    assert detached.returncode == 0, detached.stderr
    detached_pid = recorded_pid(first.data_dir)
    assert detached_pid is not None and is_embedded_server(detached_pid, first.data_dir)

    # A supervisor started there by hand, with the detached member still running: its `run`
    # refuses (the data dir is taken), again and again. The deployment's commands take over.
    early = first.rafka("supervise", "start", "zookeeper", "--", *first.run_command())
    assert early.returncode == 0, early.stderr
    wait_until(lambda: "is running from" in first.supervisor.log.read_text(), 30,
               "the supervised member to refuse the data dir the detached one holds")
    early_supervisor = first.supervisor_pid()

    for node in nodes:
        node.deploy()
    assert not pid_alive(detached_pid), "the detached member is stopped first"
    assert early_supervisor is not None and not pid_alive(early_supervisor)
    wait_until(lambda: sorted(ensemble_modes(connect_string).values())
               == ["follower", "follower", "leader"], 90, "the supervised members' quorum")
    for node in nodes:
        # What the supervisor runs is the member's JVM itself (`run` became it).
        pid = node.command_pid()
        assert pid == recorded_pid(node.data_dir) and is_embedded_server(pid, node.data_dir)
        assert node.supervisor.read_state()["runs"] == 1

    # `ray up` again: the same commands leave one supervisor and its member, serving.
    last = nodes[2]
    previous_supervisor = last.supervisor_pid()
    last.deploy()
    assert previous_supervisor is not None and not pid_alive(previous_supervisor)
    assert last.supervisor_pid() not in (None, previous_supervisor)
    wait_until(lambda: server_mode("127.0.0.1", _client_port(last)) in QUORUM_MODES, 60,
               "the redeployed member to rejoin")

    writer = KazooClient(hosts=connect_string, timeout=10)
    writer.start(timeout=30)
    try:
        writer.create(ZNODE, b"before")
    finally:
        writer.stop()
        writer.close()

    victim = first.command_pid()
    assert victim is not None
    os.kill(victim, signal.SIGKILL)
    killed_at = time.monotonic()
    wait_until(lambda: first.command_pid() not in (None, victim), BACK_WITHIN_S,
               "the supervisor to start the member again")
    value = wait_until(lambda: _read_from(_client_port(first)), BACK_WITHIN_S,
                       "the restarted member to serve the znode written before the kill",
                       interval_s=0.2)
    back_after_s = time.monotonic() - killed_at
    assert value == b"before"
    print(f"the SIGKILLed member served again {back_after_s:.1f} s after the kill")
    state = first.supervisor.read_state()
    assert state["runs"] == 2 and state["restarts"] == 1, state
    assert "killed by SIGKILL" in first.supervisor.log.read_text()
    restarted = first.command_pid()
    assert restarted is not None and is_embedded_server(restarted, first.data_dir)

    status = first.rafka("zookeeper", "status")
    assert status.returncode == 0, status.stderr
    assert (f"this machine's member: 1 (pid {restarted}, kept running by `rafka supervise` "
            f"as zookeeper)") in status.stdout
    again = first.rafka("zookeeper", "start", *first.member_options())
    assert again.returncode == 1 and "is running from" in again.stderr, again.stderr

    supervisors = [node.supervisor_pid() for node in nodes]
    members = [node.command_pid() for node in nodes]
    for node, member in zip(nodes, members, strict=True):
        stopped = node.rafka("zookeeper", "stop")
        assert stopped.returncode == 0, stopped.stderr
        assert (f"stopped ZooKeeper member {node.id} (pid {member}) and its supervisor "
                f"zookeeper") in stopped.stdout
    assert not left_behind(first.rafka.env[MARKER_VARIABLE], grace_s=5)
    assert not any(pid_alive(pid) for pid in [*supervisors, *members] if pid)
    time.sleep(2.0)  # past the backoff: nothing starts a member again
    assert not left_behind(first.rafka.env[MARKER_VARIABLE], grace_s=0)
    assert set(ensemble_modes(connect_string).values()) == {"unreachable"}
