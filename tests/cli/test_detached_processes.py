"""What `rafka up` leaves behind and `rafka down` stops: a detached ZooKeeper, found by its PID.

rafka.coordination.embedded's additions: `detach()` (not stopped at interpreter exit),
`new_session`, and `stop_recorded_server(data_dir)`, which signals a PID only if it really is that
server.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from rafka.actors.stack import RayHead, read_ray_pointer, restore_ray_pointer, session_members
from rafka.coordination.embedded import (
    EmbeddedZooKeeper,
    is_embedded_server,
    pid_alive,
    recorded_pid,
    stop_recorded_server,
    wait_for_exit,
)
from rafka.coordination.errors import ZooKeeperServerError


@pytest.mark.cluster  # a real ZooKeeper
def test_detached_server_outlives_its_starter_and_is_stopped_by_pid(tmp_path: Path) -> None:
    starter = textwrap.dedent(f"""
        from rafka.coordination.embedded import EmbeddedZooKeeper
        server = EmbeddedZooKeeper({str(tmp_path)!r}, die_with_parent=False, new_session=True)
        server.start()
        print(server.detach(), flush=True)
    """)
    result = subprocess.run([sys.executable, "-c", starter], capture_output=True, text=True,
                            timeout=120, check=True)
    pid = int(result.stdout.strip())
    try:
        assert pid_alive(pid), "the server must outlive the process that started it"
        assert recorded_pid(tmp_path) == pid
        assert is_embedded_server(pid, tmp_path)
        assert os.getsid(pid) == pid, "it runs in a session of its own"
        assert stop_recorded_server(tmp_path) == pid
        assert wait_for_exit(pid, 15)
        assert recorded_pid(tmp_path) is None
        assert stop_recorded_server(tmp_path) is None  # nothing left: a no-op
    finally:
        if pid_alive(pid) and is_embedded_server(pid, tmp_path):
            os.kill(pid, 9)


def test_a_stale_pid_file_is_never_signalled(tmp_path: Path) -> None:
    bystander = subprocess.Popen(["sleep", "60"])
    try:
        (tmp_path / "zookeeper.pid").write_text(f"{bystander.pid}\n")
        assert not is_embedded_server(bystander.pid, tmp_path)
        assert stop_recorded_server(tmp_path) is None
        assert bystander.poll() is None, "a process that is not the server must be left alone"
        assert not (tmp_path / "zookeeper.pid").exists()
    finally:
        bystander.kill()
        bystander.wait()


@pytest.mark.cluster  # a real ZooKeeper
def test_detach_refuses_a_server_that_dies_with_its_parent(tmp_path: Path) -> None:
    with EmbeddedZooKeeper(tmp_path, force_sync=False) as server:
        with pytest.raises(ZooKeeperServerError, match="die_with_parent=False"):
            server.detach()
        assert server.running()


def test_ray_head_check_rejects_other_processes() -> None:
    assert not RayHead.is_head(os.getpid(), "127.0.0.1:6379")
    assert not RayHead.is_head(2**22 + 1, "127.0.0.1:6379")  # no such process
    assert os.getpid() in session_members(os.getsid(0))


def test_ray_pointer_goes_back_to_what_it_was_only_if_it_names_our_head(tmp_path: Path) -> None:
    pointer = tmp_path / "ray_current_cluster"
    ours, theirs = "10.0.0.5:40001", "10.0.0.5:6379"
    # Nothing before: our pointer is removed.
    pointer.write_text(ours)
    assert restore_ray_pointer(pointer, ours, None)
    assert not pointer.exists()
    # Another Ray's before: it is written back.
    pointer.write_text(ours)
    assert restore_ray_pointer(pointer, ours, theirs)
    assert read_ray_pointer(pointer) == theirs
    # A Ray started after ours owns the pointer now: left alone, whatever was there before.
    pointer.write_text(theirs)
    assert not restore_ray_pointer(pointer, ours, None)
    assert read_ray_pointer(pointer) == theirs
    pointer.unlink()
    assert not restore_ray_pointer(pointer, ours, theirs)
    assert not pointer.exists()
