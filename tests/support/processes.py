"""Which processes a subprocess under test started, found by a marker in their environment.

Every process inherits its parent's environment (Ray's raylet passes it on to its workers, Java
keeps it), so a variable with a value of our own, set for the subprocess, marks everything it
starts, however deep: its ZooKeeper, its Ray nodes, their workers, RayDP's Spark JVMs. A marked
process still alive after the subprocess has exited was left behind.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import psutil

MARKER_VARIABLE = "RAFKA_TEST_PROCESS_MARKER"


def new_marker() -> str:
    return uuid.uuid4().hex


def marked_processes(marker: str) -> dict[int, str]:
    """The live processes (not zombies) whose environment carries `marker`: PID -> command."""
    found = {}
    for process in psutil.process_iter():
        try:
            if (process.environ().get(MARKER_VARIABLE) != marker
                    or process.status() == psutil.STATUS_ZOMBIE):
                continue
            found[process.pid] = " ".join(process.cmdline())
        except psutil.Error:
            continue  # gone meanwhile, or not ours to read
    return found


def left_behind(marker: str, grace_s: float = 30.0) -> dict[int, str]:
    """The marked processes still alive after `grace_s` (a process stopping takes a moment)."""
    deadline = time.monotonic() + grace_s
    while (left := marked_processes(marker)) and time.monotonic() < deadline:
        time.sleep(0.5)
    return left


def kill_marked(marker: str) -> list[int]:
    """SIGKILL what is left, by PID, so that a failed test does not leave it running."""
    pids = list(marked_processes(marker))
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    return pids


@dataclass
class MarkedRun:
    """A finished subprocess: its exit code, wall time, and every marked process seen alive
    while it ran (sampled each `poll_s`: what lives that long cannot be missed)."""

    returncode: int
    seconds: float
    seen: dict[int, str]
    marker: str


def run_marked(command: list[str], env: dict[str, str], output: Path, *, timeout_s: float,
               poll_s: float = 1.0) -> MarkedRun:
    """Run `command` with a fresh marker in its environment, its output to `output`; on
    timeout it is killed and so is everything it started. The caller checks `left_behind`."""
    marker = new_marker()
    seen: dict[int, str] = {}
    started = time.monotonic()
    with open(output, "wb") as out:
        process = subprocess.Popen(command, env={**env, MARKER_VARIABLE: marker},
                                   stdin=subprocess.DEVNULL, stdout=out,
                                   stderr=subprocess.STDOUT)
    try:
        while process.poll() is None:
            if time.monotonic() - started > timeout_s:
                raise subprocess.TimeoutExpired(command, timeout_s)
            seen.update(marked_processes(marker))
            time.sleep(poll_s)
    except BaseException:
        process.kill()
        process.wait()
        kill_marked(marker)
        raise
    return MarkedRun(process.returncode, time.monotonic() - started, seen, marker)
