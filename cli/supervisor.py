"""The process behind `rafka supervise`: it keeps one command running, restarting it whenever it
exits (as systemd's Restart=always does), and what other processes need to know of it.

`python -m rafka.cli.supervisor --name NAME --folder DIR [options] -- COMMAND [ARG...]` runs
COMMAND in a session (so a process group) of its own, its output appended to the log, and runs it
again after each exit, whatever its exit code or signal, after a `Backoff`. SIGTERM (or SIGINT)
stops it: no more restarts, SIGTERM to the command's process group, SIGKILL to the group after
the stop timeout, and the supervisor exits. Its files in DIR, each named after NAME:

* NAME.pid: the supervisor's PID, while it runs;
* NAME.state: JSON, rewritten atomically: the command, its current PID, its runs so far;
* NAME.log: one line per start and per exit, and the command's own output;
* NAME.lock: locked (flock) by the running supervisor, so that no two supervise one NAME;
* NAME.stop: the stop timeout `rafka supervise stop` asks for, written just before its SIGTERM.

COMMAND finds NAME and DIR in its environment, RAFKA_SUPERVISE_NAME and RAFKA_SUPERVISE_FOLDER
(`supervisor_of_this_process`): `rafka zookeeper run` records them, so that `rafka zookeeper
stop` stops the member through its supervisor, for good.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import itertools
import json
import os
import re
import select
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import psutil

MODULE = "rafka.cli.supervisor"
# A leading letter or digit: a NAME is never taken for an option, nor makes a hidden file.
NAME_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
DEFAULT_STOP_TIMEOUT_S = 30.0
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)
# SIGCHLD wakes the loop when the command exits; this is only a safety net.
IDLE_CHECK_S = 5.0
# How often a process group that was signalled is checked (its members are not our children,
# so no SIGCHLD says when they are gone).
GROUP_CHECK_S = 0.05
# What a group gets to vanish after SIGKILL: the kernel's work, not the command's.
KILL_WAIT_S = 5.0
# The files that say a NAME was supervised here (a lock or a stop request alone does not).
KNOWN_SUFFIXES = (".pid", ".state", ".log")
# What tells the command it is supervised, and by which supervisor.
NAME_ENV = "RAFKA_SUPERVISE_NAME"
FOLDER_ENV = "RAFKA_SUPERVISE_FOLDER"


@dataclass
class Backoff:
    """The delays between restarts: `initial_s` after the first exit, doubled after each run
    shorter than `reset_after_s` up to `maximum_s`, and `initial_s` again after a longer run."""

    initial_s: float = 1.0
    maximum_s: float = 30.0
    reset_after_s: float = 60.0
    _next_s: float = field(init=False, repr=False)

    def __post_init__(self) -> None:
        if self.initial_s <= 0:
            raise ValueError(f"the initial backoff must be above 0 s, got {self.initial_s:g}")
        if self.maximum_s < self.initial_s:
            raise ValueError(f"the maximum backoff ({self.maximum_s:g} s) must be at least the "
                             f"initial one ({self.initial_s:g} s)")
        self._next_s = self.initial_s

    def after_exit(self, ran_s: float) -> float:
        """The delay before the next start, after a run that lasted `ran_s` seconds."""
        if ran_s >= self.reset_after_s:
            self._next_s = self.initial_s
        delay = self._next_s
        self._next_s = min(delay * 2, self.maximum_s)
        return delay


@dataclass(frozen=True)
class SupervisedFiles:
    """The files of the supervisor of `name` in `folder` (an absolute path)."""

    folder: Path
    name: str

    def _file(self, suffix: str) -> Path:
        return self.folder / f"{self.name}{suffix}"

    @property
    def pid(self) -> Path:
        return self._file(".pid")

    @property
    def state(self) -> Path:
        return self._file(".state")

    @property
    def log(self) -> Path:
        return self._file(".log")

    @property
    def lock(self) -> Path:
        return self._file(".lock")

    @property
    def stop_request(self) -> Path:
        return self._file(".stop")

    def recorded_pid(self) -> int | None:
        try:
            return int(self.pid.read_text().strip())
        except (FileNotFoundError, ValueError):
            return None

    def read_state(self) -> dict[str, Any]:
        try:
            state = json.loads(self.state.read_text())
        except (FileNotFoundError, json.JSONDecodeError):
            return {}
        return state if isinstance(state, dict) else {}

    def request_stop(self, timeout_s: float) -> None:
        """Ask the supervisor, before it is sent SIGTERM, to give its command `timeout_s`."""
        write_atomically(self.stop_request, f"{timeout_s}\n")

    def take_stop_request(self) -> float | None:
        """The stop timeout asked for, if any; the request is used up."""
        try:
            timeout_s = float(self.stop_request.read_text().strip())
        except (FileNotFoundError, ValueError):
            return None
        finally:
            self.stop_request.unlink(missing_ok=True)
        return max(timeout_s, 0.0)


def known_names(folder: Path) -> list[str]:
    """The NAMEs that have (or had) a supervisor in `folder`."""
    if not folder.is_dir():
        return []
    return sorted({path.stem for path in folder.iterdir()
                   if path.suffix in KNOWN_SUFFIXES and NAME_PATTERN.fullmatch(path.stem)})


def supervisor_arguments(files: SupervisedFiles, command: Sequence[str], *,
                         stop_timeout_s: float, backoff: Backoff) -> list[str]:
    """The command line of a supervisor of `command`, as `is_supervisor` recognises it."""
    return [sys.executable, "-m", MODULE, "--name", files.name, "--folder", str(files.folder),
            "--stop-timeout", f"{stop_timeout_s:g}", "--initial-backoff", f"{backoff.initial_s:g}",
            "--max-backoff", f"{backoff.maximum_s:g}", "--reset-after",
            f"{backoff.reset_after_s:g}", "--", *command]


def is_supervisor(pid: int, files: SupervisedFiles) -> bool:
    """Whether `pid` is alive and is the supervisor of `files`: a recorded PID may belong to
    some other process by now (after a reboot, say), so its command line must say so."""
    try:
        process = psutil.Process(pid)
        if process.status() == psutil.STATUS_ZOMBIE:
            return False
        arguments = process.cmdline()
    except psutil.Error:
        return False
    if "--" in arguments:
        arguments = arguments[:arguments.index("--")]
    pairs = set(itertools.pairwise(arguments))
    return {("-m", MODULE), ("--name", files.name), ("--folder", str(files.folder))} <= pairs


def supervisor_of_this_process() -> SupervisedFiles | None:
    """The files of the supervisor running this process (or one of its ancestors), if a live
    one does: a NAME in the environment alone may be inherited from further up, e.g. by the
    processes Ray's supervised raylet starts."""
    name, folder = os.environ.get(NAME_ENV), os.environ.get(FOLDER_ENV)
    if not name or not folder or not NAME_PATTERN.fullmatch(name):
        return None
    files = SupervisedFiles(Path(folder), name)
    pid = files.recorded_pid()
    if pid is None or not is_supervisor(pid, files):
        return None
    try:
        ancestors = {parent.pid for parent in psutil.Process().parents()}
    except psutil.Error:
        return None
    return files if pid in ancestors else None


def write_atomically(path: Path, text: str) -> None:
    """Write `text` to `path` so that a reader sees the old file or the new, never half one."""
    partial = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    partial.write_text(text)
    partial.replace(path)


def describe_exit(returncode: int) -> str:
    """`exited with code 1`, `killed by SIGKILL`: a returncode of subprocess, in words."""
    if returncode >= 0:
        return f"exited with code {returncode}"
    try:
        return f"killed by {signal.Signals(-returncode).name}"
    except ValueError:
        return f"killed by signal {-returncode}"


def _ignore_signal(number: int, frame: object) -> None:
    """A handler that does nothing: the signal still wakes `Supervisor._sleep`."""


class Supervisor:
    """Runs `command` again after each exit until it is told to stop (`run`)."""

    def __init__(self, files: SupervisedFiles, command: Sequence[str], backoff: Backoff,
                 stop_timeout_s: float = DEFAULT_STOP_TIMEOUT_S) -> None:
        self.files = files
        self.command = list(command)
        self.backoff = backoff
        self.stop_timeout_s = stop_timeout_s
        self.runs = 0
        self.last_exit: str | None = None
        self.child: subprocess.Popen[bytes] | None = None
        self._stop_signal: int | None = None
        self._wakeup = -1
        self._log_file: Any = None

    def run(self) -> int:
        """Supervise until SIGTERM or SIGINT; the exit code (1 if NAME is supervised already)."""
        self.files.folder.mkdir(parents=True, exist_ok=True)
        with open(self.files.log, "ab", buffering=0) as self._log_file, \
                open(self.files.lock, "a") as lock:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                self._log(f"another supervisor holds {self.files.lock}: exiting")
                return 1
            self._listen_to_signals()
            write_atomically(self.files.pid, f"{os.getpid()}\n")
            self._log(f"supervisor started (pid {os.getpid()})")
            try:
                self._keep_running()
            finally:
                self._stop_command()
                self._save_state()
                if self.files.recorded_pid() == os.getpid():
                    self.files.pid.unlink(missing_ok=True)
                self._log("supervisor stopped")
        return 0

    @property
    def stopping(self) -> bool:
        return self._stop_signal is not None

    def _keep_running(self) -> None:
        while not self.stopping:
            started = time.monotonic()
            self._start_command()
            if self.child is not None:
                while self.child.poll() is None and not self.stopping:
                    self._sleep(IDLE_CHECK_S)
                if self.child.returncode is None:
                    break  # stopping: `run` stops it
                self.last_exit = describe_exit(self.child.returncode)
            ran_s = time.monotonic() - started
            delay_s = self.backoff.after_exit(ran_s)
            if self.child is not None:
                ended = (f"run {self.runs} (pid {self.child.pid}) {self.last_exit} "
                         f"after {ran_s:.1f} s")
            else:
                ended = f"{shlex.join(self.command)} {self.last_exit}"
            self._log(f"{ended}; next start in {delay_s:g} s")
            self._save_state()
            if self.child is not None:
                # What it left in its group would hold the ports, locks or files its next run
                # needs (systemd's KillMode=control-group does the same). A stop takes over.
                self._end_group(self.child, self.stop_timeout_s, "processes left in its group",
                                until_stop=True)
            self._sleep_until(time.monotonic() + delay_s)
        if self._stop_signal is not None:
            self._log(f"{signal.Signals(self._stop_signal).name} received: stopping")

    def _start_command(self) -> None:
        """Start a run as `self.child` (None if the command could not start)."""
        self.child = None
        try:
            self.child = subprocess.Popen(self.command, stdin=subprocess.DEVNULL,
                                          stdout=self._log_file, stderr=subprocess.STDOUT,
                                          start_new_session=True, env=self._command_env())
        except OSError as error:
            self.last_exit = f"could not start: {error}"
            return
        self.runs += 1
        self._log(f"run {self.runs} started (pid {self.child.pid}): "
                  f"{shlex.join(self.command)}")
        self._save_state()

    def _command_env(self) -> dict[str, str]:
        return {**os.environ, NAME_ENV: self.files.name, FOLDER_ENV: str(self.files.folder)}

    def _stop_command(self) -> None:
        timeout_s = self.files.take_stop_request()
        timeout_s = self.stop_timeout_s if timeout_s is None else timeout_s
        child = self.child
        if child is None:
            return
        running = child.poll() is None
        started = time.monotonic()
        self._end_group(child, timeout_s, "stopping")
        if running and child.returncode is not None:
            self.last_exit = describe_exit(child.returncode)
            self._log(f"run {self.runs} (pid {child.pid}) {self.last_exit} "
                      f"{time.monotonic() - started:.1f} s after the stop; not restarted")

    def _end_group(self, child: subprocess.Popen[bytes], timeout_s: float, why: str, *,
                   until_stop: bool = False) -> None:
        """SIGTERM the process group `child` leads, and SIGKILL it after `timeout_s` (unless
        `until_stop` and a stop comes first, which ends the group its own way)."""
        group = child.pid
        if not self._group_alive(child):
            return
        self._log(f"{why}: SIGTERM to process group {group}, SIGKILL after {timeout_s:g} s")
        _signal_group(group, signal.SIGTERM)
        if self._wait(lambda: not self._group_alive(child) or (until_stop and self.stopping),
                      timeout_s):
            return
        self._log(f"process group {group} still alive after {timeout_s:g} s: SIGKILL")
        _signal_group(group, signal.SIGKILL)
        if not self._wait(lambda: not self._group_alive(child), KILL_WAIT_S):
            self._log(f"process group {group} still alive {KILL_WAIT_S:g} s after SIGKILL")

    @staticmethod
    def _group_alive(child: subprocess.Popen[bytes]) -> bool:
        child.poll()  # reaped, the leader no longer counts as a member
        try:
            os.killpg(child.pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        # Members that died but were not reaped yet (by an init that does not reap) are gone.
        return any(_live_member(process, child.pid) for process in psutil.process_iter())

    def _wait(self, condition: Callable[[], bool], timeout_s: float) -> bool:
        deadline = time.monotonic() + timeout_s
        while not condition():
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            self._sleep(min(left, GROUP_CHECK_S))
        return True

    def _save_state(self) -> None:
        running = self.child is not None and self.child.poll() is None
        write_atomically(self.files.state, json.dumps({
            "name": self.files.name,
            "supervisor_pid": os.getpid(),
            "command": self.command,
            "command_pid": self.child.pid if running and self.child else None,
            "runs": self.runs,
            "restarts": max(self.runs - 1, 0),
            "last_exit": self.last_exit,
            "updated": time.time(),
        }, indent=2) + "\n")

    def _log(self, message: str) -> None:
        stamp = datetime.now().astimezone().isoformat(timespec="milliseconds")
        self._log_file.write(f"{stamp} rafka supervise {self.files.name}: {message}\n".encode())

    def _listen_to_signals(self) -> None:
        # Every signal writes a byte to the wakeup pipe (signal.set_wakeup_fd), so `_sleep`
        # returns as soon as one arrives, even one that came before it started to wait.
        read, write = os.pipe()
        os.set_blocking(read, False)
        os.set_blocking(write, False)
        signal.set_wakeup_fd(write, warn_on_full_buffer=False)
        self._wakeup = read
        for number in STOP_SIGNALS:
            signal.signal(number, self._request_stop)
        # SIGCHLD's default ignores it, which would not wake us. SIGHUP's would end the
        # supervisor; SIG_IGN instead would be inherited by the command across exec.
        for number in (signal.SIGCHLD, signal.SIGHUP):
            signal.signal(number, _ignore_signal)

    def _request_stop(self, number: int, frame: object) -> None:
        if self._stop_signal is None:
            self._stop_signal = number

    def _sleep(self, seconds: float) -> None:
        select.select([self._wakeup], [], [], max(seconds, 0.0))
        with contextlib.suppress(BlockingIOError):
            os.read(self._wakeup, 4096)

    def _sleep_until(self, deadline: float) -> None:
        while not self.stopping and (left := deadline - time.monotonic()) > 0:
            self._sleep(left)


def _signal_group(group: int, number: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(group, number)


def _live_member(process: psutil.Process, group: int) -> bool:
    try:
        return os.getpgid(process.pid) == group and process.status() != psutil.STATUS_ZOMBIE
    except (ProcessLookupError, psutil.Error):
        return False


def main(argv: Sequence[str] | None = None) -> int:
    """The supervisor's own command line (`supervisor_arguments` writes it)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = argparse.ArgumentParser(prog=f"python -m {MODULE}",
                                     usage="%(prog)s --name NAME --folder DIR [options] "
                                           "-- COMMAND [ARG ...]",
                                     description="Keep COMMAND running; `rafka supervise` "
                                                 "starts this.")
    parser.add_argument("--name", required=True)
    parser.add_argument("--folder", required=True, type=Path)
    parser.add_argument("--stop-timeout", type=float, default=DEFAULT_STOP_TIMEOUT_S)
    parser.add_argument("--initial-backoff", type=float, default=Backoff.initial_s)
    parser.add_argument("--max-backoff", type=float, default=Backoff.maximum_s)
    parser.add_argument("--reset-after", type=float, default=Backoff.reset_after_s)
    split = argv.index("--") if "--" in argv else len(argv)
    args = parser.parse_args(argv[:split])
    command = argv[split + 1:]
    if not command:
        parser.error("no COMMAND after --")
    if not NAME_PATTERN.fullmatch(args.name):
        parser.error(f"--name takes letters, digits, '.', '_' and '-' (a letter or digit "
                     f"first), got {args.name!r}")
    try:
        backoff = Backoff(args.initial_backoff, args.max_backoff, args.reset_after)
    except ValueError as error:
        parser.error(str(error))
    files = SupervisedFiles(args.folder.resolve(), args.name)
    return Supervisor(files, command, backoff, args.stop_timeout).run()


if __name__ == "__main__":
    sys.exit(main())
