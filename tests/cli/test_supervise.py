"""`rafka supervise`: a command kept running by a detached supervisor, restarted after every
exit, stopped with its whole process group; and the backoff between restarts, as pure logic.

The command line runs as a user runs it, in a subprocess with RAFKA_HOME in the test's tmp_path.
Everything it starts carries a marker in its environment (tests/support/processes.py), so
whatever a failing test leaves running is found and killed by PID.
"""

from __future__ import annotations

import os
import re
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from rafka.cli.supervisor import Backoff, SupervisedFiles, describe_exit, is_supervisor
from rafka.coordination.embedded import pid_alive
from tests.support.processes import MARKER_VARIABLE, kill_marked, marked_processes, new_marker
from tests.support.waiting import wait_until

ROOT = Path(__file__).resolve().parents[2]
# Restarts within a fraction of a second, so that a test sees several.
FAST = ("--initial-backoff", "0.05", "--max-backoff", "0.2")


class Supervise:
    """`supervise("start", ...)` runs `rafka supervise start ...` and returns the finished
    process; `kill_everything()` kills by PID whatever those commands started."""

    def __init__(self, rafka_home: Path) -> None:
        self.folder = (rafka_home / "supervised").resolve()
        self.marker = new_marker()
        self.env = {**os.environ, "RAFKA_HOME": str(rafka_home), MARKER_VARIABLE: self.marker}

    def __call__(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "rafka", "supervise", *args], cwd=ROOT,
                              env=self.env, capture_output=True, text=True, timeout=60)

    def files(self, name: str) -> SupervisedFiles:
        return SupervisedFiles(self.folder, name)

    def state(self, name: str) -> dict[str, Any]:
        return self.files(name).read_state()

    def command_pids(self, name: str) -> list[int]:
        """The PID of every run so far, from the log."""
        log = self.files(name).log.read_text()
        return [int(pid) for pid in re.findall(r"run \d+ started \(pid (\d+)\)", log)]

    def kill_everything(self) -> None:
        # The supervisors first, so that they start nothing more.
        for path in self.folder.glob("*.pid"):
            files = self.files(path.stem)
            pid = files.recorded_pid()
            if pid is not None and is_supervisor(pid, files):
                os.kill(pid, signal.SIGKILL)
        for _ in range(20):
            if not kill_marked(self.marker):
                return
            time.sleep(0.1)


@pytest.fixture
def supervise(tmp_path: Path) -> Iterator[Supervise]:
    runner = Supervise(tmp_path / "rafka-home")
    yield runner
    runner.kill_everything()


def _lines(path: Path) -> int:
    return len(path.read_text().splitlines()) if path.exists() else 0


def test_backoff_doubles_after_each_quick_exit_up_to_its_maximum() -> None:
    backoff = Backoff(initial_s=1.0, maximum_s=30.0, reset_after_s=60.0)
    assert [backoff.after_exit(0.2) for _ in range(7)] == [1, 2, 4, 8, 16, 30, 30]


def test_backoff_starts_over_after_a_run_of_a_minute() -> None:
    backoff = Backoff()
    for _ in range(5):
        backoff.after_exit(59.9)
    assert backoff.after_exit(60.0) == 1.0
    assert backoff.after_exit(3.0) == 2.0


def test_backoff_refuses_delays_that_would_spin_or_shrink() -> None:
    with pytest.raises(ValueError, match="above 0"):
        Backoff(initial_s=0.0)
    with pytest.raises(ValueError, match="at least the initial"):
        Backoff(initial_s=5.0, maximum_s=2.0)


def test_an_exit_is_described_by_its_code_or_signal() -> None:
    assert describe_exit(0) == "exited with code 0"
    assert describe_exit(3) == "exited with code 3"
    assert describe_exit(-signal.SIGKILL) == "killed by SIGKILL"


def test_the_command_is_restarted_after_every_exit_until_stopped(
        supervise: Supervise, tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    started = supervise("start", *FAST, "echo", "--",
                        "sh", "-c", f"echo run >> {shlex.quote(str(runs))}; sleep 0.2")
    assert started.returncode == 0, started.stderr
    supervisor = supervise.files("echo").recorded_pid()
    assert supervisor is not None and f"pid {supervisor}" in started.stdout
    assert os.getsid(supervisor) == supervisor, "it runs in a session of its own"

    wait_until(lambda: _lines(runs) >= 3, 15, "three runs of the command")
    status = supervise("status", "echo")
    assert status.returncode == 0, status.stderr
    assert re.search(rf"^echo\s+{supervisor}\s+running\s", status.stdout, re.MULTILINE)
    log = supervise.files("echo").log.read_text()
    assert "exited with code 0 after" in log and "next start in" in log

    stopped = supervise("stop", "echo")
    assert stopped.returncode == 0, stopped.stderr
    assert not pid_alive(supervisor)
    assert not [pid for pid in supervise.command_pids("echo") if pid_alive(pid)]
    assert not supervise.files("echo").pid.exists()
    assert not marked_processes(supervise.marker)
    runs_at_stop = _lines(runs)
    time.sleep(0.5)
    assert _lines(runs) == runs_at_stop, "a stopped supervisor restarts nothing"
    status = supervise("status")
    assert re.search(r"^echo\s+-\s+stopped\s", status.stdout, re.MULTILINE), status.stdout


def test_a_command_killed_by_sigkill_is_started_again(supervise: Supervise,
                                                      tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    started = supervise("start", *FAST, "sleeper", "--",
                        "sh", "-c", f"echo run >> {shlex.quote(str(runs))}; exec sleep 30")
    assert started.returncode == 0, started.stderr
    first = wait_until(lambda: supervise.state("sleeper").get("command_pid"), 10,
                       "the first run")
    os.kill(first, signal.SIGKILL)
    second = wait_until(lambda: supervise.state("sleeper").get("command_pid") not in (None, first)
                        and supervise.state("sleeper")["command_pid"], 10, "a second run")
    assert _lines(runs) == 2
    assert supervise.state("sleeper")["restarts"] == 1
    assert pid_alive(second)
    assert "killed by SIGKILL" in supervise.files("sleeper").log.read_text()


def test_stop_kills_a_process_group_that_ignores_sigterm(supervise: Supervise,
                                                          tmp_path: Path) -> None:
    children = tmp_path / "children"
    script = f"trap '' TERM; sleep 30 & echo $! >> {shlex.quote(str(children))}; wait"
    assert supervise("start", "stubborn", "--", "sh", "-c", script).returncode == 0
    wait_until(lambda: _lines(children) == 1, 10, "the command's child")
    shell = supervise.state("stubborn")["command_pid"]
    child = int(children.read_text())

    began = time.monotonic()
    stopped = supervise("stop", "stubborn", "--timeout", "0.5")
    assert stopped.returncode == 0, stopped.stderr
    assert time.monotonic() - began >= 0.5, "it had its timeout before SIGKILL"
    assert not pid_alive(shell) and not pid_alive(child), "the whole group is killed"
    assert "SIGKILL" in supervise.files("stubborn").log.read_text()


def test_start_refuses_a_name_supervised_already(supervise: Supervise) -> None:
    assert supervise("start", "twice", "--", "sleep", "30").returncode == 0
    first = supervise.files("twice").recorded_pid()
    again = supervise("start", "twice", "--", "sleep", "30")
    assert again.returncode == 1, again.stderr
    assert "rafka supervise stop twice" in again.stderr and "Traceback" not in again.stderr
    assert supervise.files("twice").recorded_pid() == first


def test_a_stale_pid_file_is_replaced_and_its_process_left_alone(supervise: Supervise) -> None:
    files = supervise.files("stale")
    files.folder.mkdir(parents=True)
    files.pid.write_text(f"{os.getpid()}\n")  # alive, but no supervisor
    started = supervise("start", "stale", "--", "sleep", "30")
    assert started.returncode == 0, started.stderr
    assert files.recorded_pid() not in (None, os.getpid())


def test_stopping_a_name_that_is_not_running_is_no_error(supervise: Supervise) -> None:
    result = supervise("stop", "nothing")
    assert result.returncode == 0, result.stderr
    assert "not running" in result.stderr


def test_a_bad_name_or_no_command_is_a_usage_error(supervise: Supervise) -> None:
    for args, needle in ((("start", "a/b", "--", "sleep", "1"), "NAME takes letters"),
                         (("start", "fine", "--"), "no COMMAND")):
        result = supervise(*args)
        assert result.returncode == 2, (result.stdout, result.stderr)
        assert needle in result.stderr and "Traceback" not in result.stderr
    assert not supervise.folder.exists() or not list(supervise.folder.glob("*.pid"))


def test_the_command_is_told_which_supervisor_runs_it(supervise: Supervise,
                                                       tmp_path: Path) -> None:
    # What `rafka zookeeper run` records, so that `rafka zookeeper stop` stops the supervisor.
    told = tmp_path / "told"
    script = (f'echo "$RAFKA_SUPERVISE_NAME $RAFKA_SUPERVISE_FOLDER" > {shlex.quote(str(told))}; '
              f"exec sleep 30")
    assert supervise("start", "teller", "--", "sh", "-c", script).returncode == 0
    wait_until(lambda: _lines(told) == 1, 10, "the command to start")
    assert told.read_text().split() == ["teller", str(supervise.folder)]
