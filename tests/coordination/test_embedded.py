"""The embedded ZooKeeper server: starts, answers, stops by PID, and fails with clear errors."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from kazoo.client import KazooClient
from kazoo.retry import KazooRetry

from rafka.coordination.embedded import (
    EmbeddedZooKeeper,
    ZooKeeperAddress,
    four_letter_word,
    pid_alive,
    wait_for_exit,
)
from rafka.coordination.errors import (
    InvalidZooKeeperAddressError,
    JavaNotFoundError,
    ZooKeeperPortInUseError,
    ZooKeeperStartError,
)
from tests.support.waiting import eventually


@pytest.mark.parametrize(
    ("text", "hosts", "chroot"),
    [
        ("127.0.0.1:2181", (("127.0.0.1", 2181),), ""),
        ("zk1:2181,zk2:2182/rafka/prod", (("zk1", 2181), ("zk2", 2182)), "/rafka/prod"),
        (" zk-1.example.com:2181/a ", (("zk-1.example.com", 2181),), "/a"),
    ],
)
def test_parses_connection_strings(text: str, hosts: tuple, chroot: str) -> None:
    address = ZooKeeperAddress.parse(text)
    assert address.hosts == hosts
    assert address.chroot == chroot
    assert ZooKeeperAddress.parse(str(address)) == address


@pytest.mark.parametrize(
    "text", ["", "zk1", "zk1:", "zk1:99999", "zk1:2181/../etc", "zk1:2181/a b", "zk1:2181/a//b"]
)
def test_rejects_bad_connection_strings(text: str) -> None:
    with pytest.raises(InvalidZooKeeperAddressError, match=r"ZooKeeper (address|chroot)"):
        ZooKeeperAddress.parse(text)


@pytest.mark.cluster  # a real ZooKeeper (a JVM)
def test_server_serves_kazoo_and_stops_by_pid(tmp_path: Path) -> None:
    server = EmbeddedZooKeeper(tmp_path, force_sync=False)
    with server:
        pid = server.pid
        assert pid is not None and pid_alive(pid)
        host, port = server.address.hosts[0]
        assert host == "127.0.0.1"
        assert "Mode: standalone" in four_letter_word(host, port, "srvr")
        client = KazooClient(hosts=str(server.address))
        client.start(timeout=15)
        client.create("/hello", b"world")
        assert client.get("/hello")[0] == b"world"
        client.stop()
        client.close()
        assert (tmp_path / "zookeeper.log").exists()
        assert (tmp_path / "data" / "version-2").is_dir()
    assert wait_for_exit(pid, 15)
    with socket.socket() as probe:
        assert probe.connect_ex((host, port)) != 0


def test_stopping_one_server_leaves_another_running(tmp_path: Path, zookeeper) -> None:
    other = EmbeddedZooKeeper(tmp_path, force_sync=False).start()
    other_pid = other.pid
    other.stop()
    assert wait_for_exit(other_pid, 15)
    host, port = zookeeper.address.hosts[0]
    assert "Mode: standalone" in four_letter_word(host, port, "srvr")


@pytest.mark.cluster  # a real ZooKeeper (a JVM)
def test_data_survives_a_restart_in_the_same_directory(tmp_path: Path) -> None:
    with EmbeddedZooKeeper(tmp_path) as server:
        client = KazooClient(hosts=str(server.address))
        client.start(timeout=15)
        client.create("/kept", b"1")
        client.stop()
        client.close()
    with EmbeddedZooKeeper(tmp_path) as server:
        client = KazooClient(hosts=str(server.address))
        client.start(timeout=15)
        assert client.get("/kept")[0] == b"1"
        client.stop()
        client.close()


@pytest.mark.cluster  # a real ZooKeeper (a JVM)
def test_restart_comes_back_on_the_same_port_and_keeps_sessions(tmp_path: Path) -> None:
    server = EmbeddedZooKeeper(tmp_path, force_sync=False).start()
    try:
        first_pid, address = server.pid, str(server.address)
        client = KazooClient(hosts=address, timeout=10,
                             connection_retry=KazooRetry(max_tries=-1, delay=0.05, max_delay=0.5))
        client.start(timeout=15)
        session_id = client.client_id[0]
        client.create("/kept", b"1")
        client.create("/mine", b"", ephemeral=True)
        server.restart(pause_s=1.0)
        assert server.pid != first_pid and wait_for_exit(first_pid, 15)
        assert str(server.address) == address
        # The client comes back by itself to the same address, in the same session: the
        # server kept the session across the crash, so its ephemeral znode is still there.
        assert eventually(lambda: client.connected, 15)
        assert client.client_id[0] == session_id
        assert client.get("/kept")[0] == b"1"
        assert client.exists("/mine") is not None
        client.stop()
        client.close()
    finally:
        server.stop()


def test_restart_of_a_server_never_started_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(ZooKeeperStartError, match="never started"):
        EmbeddedZooKeeper(tmp_path).restart()


def test_missing_java_is_a_clear_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("JAVA_HOME", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(JavaNotFoundError, match="default-jre-headless"):
        EmbeddedZooKeeper(tmp_path).start()


def test_taken_port_is_a_clear_error(tmp_path: Path) -> None:
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        with pytest.raises(ZooKeeperPortInUseError, match=str(port)):
            EmbeddedZooKeeper(tmp_path, port=port).start()


@pytest.mark.cluster  # a real ZooKeeper (a JVM)
def test_server_that_does_not_come_up_reports_its_log(tmp_path: Path) -> None:
    # A 1 MB heap is below the JVM's minimum: the process exits at once and says why.
    server = EmbeddedZooKeeper(tmp_path, heap_mb=1, start_timeout_s=30)
    with pytest.raises(ZooKeeperStartError, match="heap") as error:
        server.start()
    assert "exited with code" in str(error.value)
    assert not server.running()


def _run_child(tmp_path: Path, body: str) -> subprocess.Popen[str]:
    script = textwrap.dedent(
        f"""
        import sys
        from rafka.coordination.embedded import EmbeddedZooKeeper
        server = EmbeddedZooKeeper({str(tmp_path)!r}, force_sync=False).start()
        print(server.pid, flush=True)
        {body}
        """
    )
    return subprocess.Popen(
        [sys.executable, "-c", script], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )


@pytest.mark.cluster  # a real ZooKeeper (a JVM)
def test_server_stops_when_the_interpreter_exits(tmp_path: Path) -> None:
    child = _run_child(tmp_path, "sys.stdin.readline()")
    pid = int(child.stdout.readline())
    assert pid_alive(pid)
    child.communicate("\n", timeout=60)
    assert child.returncode == 0
    assert wait_for_exit(pid, 15)


@pytest.mark.cluster  # a real ZooKeeper (a JVM)
def test_server_stops_when_its_parent_is_killed(tmp_path: Path) -> None:
    child = _run_child(tmp_path, "sys.stdin.readline()")
    pid = int(child.stdout.readline())
    assert pid_alive(pid)
    os.kill(child.pid, signal.SIGKILL)
    child.wait(30)
    assert wait_for_exit(pid, 15)
