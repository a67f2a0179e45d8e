"""The processes a rafka cluster runs on: ZooKeeper (embedded unless given) and Ray (local unless
given). `Cluster.start()` builds on this; `rafka demo` shows it healthy; `rafka up` starts a
`RayHead` that outlives it."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil
import ray
from ray._common.utils import get_ray_address_file

from rafka.actors.runtime import init_ray
from rafka.common.errors import RafkaError
from rafka.common.waiting import wait_until
from rafka.coordination.embedded import (
    EmbeddedZooKeeper,
    ZooKeeperAddress,
    free_port,
    pid_alive,
    process_arguments,
    terminate_pid,
    wait_for_exit,
)
from rafka.coordination.ensemble import ensemble_modes, serving


@dataclass
class LocalStack:
    """ZooKeeper plus Ray, started here or joined; `stop()` stops only what `start()` started."""

    data_dir: Path
    zk_address: ZooKeeperAddress
    zookeeper: EmbeddedZooKeeper | None = None
    started_ray: bool = False
    _temporary: tempfile.TemporaryDirectory | None = field(default=None, repr=False)

    @classmethod
    def start(
        cls,
        *,
        zk: str | None = None,
        ray_address: str | None = None,
        data_dir: str | Path | None = None,
        num_cpus: int | None = None,
    ) -> LocalStack:
        temporary = None
        if data_dir is None:
            temporary = tempfile.TemporaryDirectory(prefix="rafka-")
            data_dir = temporary.name
        data_dir = Path(data_dir).resolve()
        data_dir.mkdir(parents=True, exist_ok=True)
        zookeeper = None
        if zk is None:
            zookeeper = EmbeddedZooKeeper(data_dir / "zookeeper").start()
            address = zookeeper.address
        else:
            address = ZooKeeperAddress.parse(zk)
        started_ray = not ray.is_initialized()
        try:
            init_ray(ray_address, num_cpus=num_cpus)
        except BaseException:
            if zookeeper is not None:
                zookeeper.stop()
            raise
        return cls(data_dir, address, zookeeper, started_ray, temporary)

    def health(self) -> dict[str, dict[str, object]]:
        """What a user checks first: is ZooKeeper serving, how big is Ray. For an ensemble, the
        mode is the first serving server's, and `servers` has each one's."""
        servers = ensemble_modes(self.zk_address)
        mode = next((mode for mode in servers.values() if serving([mode])),
                    next(iter(servers.values())))
        resources = ray.cluster_resources()
        return {
            "zookeeper": {
                "address": str(self.zk_address),
                "mode": mode,
                "servers": servers,
                "embedded": self.zookeeper is not None,
                "pid": self.zookeeper.pid if self.zookeeper else None,
            },
            "ray": {
                "version": ray.__version__,
                "nodes": sum(1 for node in ray.nodes() if node["Alive"]),
                "cpus": resources.get("CPU", 0),
            },
        }

    def stop(self) -> None:
        if self.started_ray and ray.is_initialized():
            ray.shutdown()
        if self.zookeeper is not None:
            self.zookeeper.stop()
        if self._temporary is not None:
            self._temporary.cleanup()

    def __enter__(self) -> LocalStack:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()


class RayHeadError(RafkaError, RuntimeError):
    """The Ray head could not be started: the message holds the end of its log."""


_READY = "Ray runtime started"
_ANSI = re.compile(r"\x1b\[[0-9;]*m")


@dataclass(frozen=True)
class RayHead:
    """A Ray head node that outlives the process that started it, stopped by its PID.

    It is `ray start --head --block` in a session of its own: `--block` keeps that command in
    the foreground, watching the head's processes (GCS, raylet, dashboard agent, workers), and
    on SIGTERM it stops them all, so one PID is the handle on the whole node. `ray.init()`
    without an address would instead start a Ray that dies with its driver.

    `ray start` also points the machine's `ray.init()` at the new head (Ray's
    `ray_current_cluster` file); stopping the head puts that pointer back as it was before, so
    that a user's next `ray.init()` does not look for a head that is gone.
    """

    pid: int
    address: str
    log_path: Path
    # "token": clients must present ~/.ray/auth_token (Ray's default for a new local cluster).
    auth_mode: str = "token"
    # What Ray's pointer said before this head was started (None: there was none).
    pointer_before: str | None = None

    @classmethod
    def start(
        cls,
        log_path: str | Path,
        *,
        num_cpus: int | None = None,
        resources: Mapping[str, float] | None = None,
        include_dashboard: bool = False,
        timeout_s: float = 120.0,
    ) -> RayHead:
        """Start the head on free ports and wait until it serves; its address is `ip:port`.

        It uses token authentication, as `ray.init()` does for a new cluster, unless
        RAY_AUTH_MODE says otherwise; a missing token is generated (`ray get-auth-token`).
        """
        log_path = Path(log_path).resolve()
        log_path.parent.mkdir(parents=True, exist_ok=True)
        port = free_port()
        # Free ports for everything with a fixed default, so that this head does not clash
        # with another Ray on the same machine (a test session's, a user's `ray start`).
        command = [
            sys.executable, "-m", "ray.scripts.scripts", "start", "--head", "--block",
            f"--port={port}",
            f"--ray-client-server-port={free_port()}",
            f"--dashboard-port={free_port()}",
            f"--dashboard-agent-listen-port={free_port()}",
            f"--include-dashboard={'true' if include_dashboard else 'false'}",
            "--disable-usage-stats",
        ]
        if num_cpus is not None:
            command.append(f"--num-cpus={num_cpus}")
        if resources:
            command.append(f"--resources={json.dumps(dict(resources))}")
        # RAY_ADDRESS names some other cluster (ray.init sets it for its children): not ours.
        env = {key: value for key, value in os.environ.items() if key != "RAY_ADDRESS"}
        auth_mode = env.setdefault("RAY_AUTH_MODE", "token").lower()
        if auth_mode == "token":
            # Said explicitly, rather than left to `ray start` (which turns token auth on only
            # if a token exists), so that clients know what to present.
            subprocess.run(
                [sys.executable, "-m", "ray.scripts.scripts", "get-auth-token", "--generate"],
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                env=env, check=False, timeout=60,
            )
        pointer_before = read_ray_pointer()
        with open(log_path, "ab") as log:
            process = subprocess.Popen(
                command, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                env=env, start_new_session=True,
            )
        head = cls(process.pid, f"{ray.util.get_node_ip_address()}:{port}", log_path, auth_mode,
                   pointer_before)
        try:
            head._wait_until_serving(process, port, timeout_s)
        except BaseException:
            head.stop()
            raise
        return head

    def _wait_until_serving(self, process: subprocess.Popen[bytes], port: int,
                            timeout_s: float) -> None:
        def serving() -> bool:
            if process.poll() is not None:
                raise RayHeadError(f"`ray start --head` exited with code {process.returncode}; "
                                   f"its log {self.log_path} ends with:\n{self.log_tail()}")
            return _READY in self.log_path.read_text(errors="replace") and _port_open(port)

        try:
            wait_until(serving, timeout_s, "the Ray head", interval_s=0.2)
        except TimeoutError:
            raise RayHeadError(f"the Ray head did not start within {timeout_s:.0f} s; its log "
                               f"{self.log_path} ends with:\n{self.log_tail()}") from None

    def log_tail(self, lines: int = 20) -> str:
        try:
            text = _ANSI.sub("", self.log_path.read_text(errors="replace"))
        except OSError:
            return "(no log)"
        return "\n".join(text.splitlines()[-lines:])

    @staticmethod
    def is_head(pid: int, address: str) -> bool:
        """Whether `pid` is alive and is the `ray start --head --block` serving `address`."""
        arguments = process_arguments(pid)
        port = address.rpartition(":")[2]
        return (pid_alive(pid) and "ray.scripts.scripts" in arguments and "--block" in arguments
                and f"--port={port}" in arguments)

    def running(self) -> bool:
        return self.is_head(self.pid, self.address)

    def record(self) -> dict[str, object]:
        """What `rafka up` writes down for `rafka down` (see `from_record`)."""
        return {"pid": self.pid, "address": self.address, "log": str(self.log_path),
                "pointer_before": self.pointer_before}

    @classmethod
    def from_record(cls, record: Mapping[str, Any]) -> RayHead:
        return cls(int(record["pid"]), str(record["address"]), Path(str(record["log"])),
                   pointer_before=record.get("pointer_before"))

    def stop(self, timeout_s: float = 60.0) -> list[int]:
        """SIGTERM the head (it drains and stops its processes), then kill what is left of its
        session; return the PIDs signalled. Only processes in the head's own session, which
        `start()` created, are touched; a PID reused by something else is left alone."""
        signalled = []
        if self.running():
            signalled.append(self.pid)
            terminate_pid(self.pid, timeout_s)
        # The head's session id is its PID. A worker that did not notice its raylet go would
        # linger: it is still in that session, and nothing else can be (a new session with
        # this id would need this PID alive).
        if not pid_alive(self.pid):
            stragglers = session_members(self.pid)
            for pid in stragglers:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            for pid in stragglers:
                wait_for_exit(pid, 5.0)
            signalled += stragglers
            restore_ray_pointer(ray_pointer_path(), self.address, self.pointer_before)
        return signalled


def ray_pointer_path() -> Path:
    """Ray's pointer to the machine's current cluster (`ray_current_cluster` in Ray's temp
    dir), which `ray start` writes and a `ray.init()` without an address follows."""
    return Path(get_ray_address_file(None))


def read_ray_pointer(path: Path | None = None) -> str | None:
    try:
        return (path or ray_pointer_path()).read_text().strip() or None
    except (FileNotFoundError, NotADirectoryError):
        return None


def restore_ray_pointer(path: Path, ours: str, before: str | None) -> bool:
    """Put Ray's pointer back as it was before our head started, if it still names our head;
    True if it did. A pointer to any other head (one started since, by anyone) is left alone:
    it is not ours to remove."""
    if read_ray_pointer(path) != ours:
        return False
    if before is None:
        path.unlink(missing_ok=True)
    else:
        path.write_text(before)
    return True


def _port_open(port: int, host: str = "127.0.0.1") -> bool:
    with contextlib.suppress(OSError), socket.create_connection((host, port), timeout=1):
        return True
    return False


def session_members(session_id: int) -> list[int]:
    """The live processes whose session id is `session_id`."""
    members = []
    for process in psutil.process_iter(["status"]):
        try:
            if (os.getsid(process.pid) == session_id
                    and process.info["status"] not in (psutil.STATUS_ZOMBIE, psutil.STATUS_DEAD)):
                members.append(process.pid)
        except (ProcessLookupError, PermissionError):
            continue
    return members
