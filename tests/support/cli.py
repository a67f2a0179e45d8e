"""Running `rafka` as a user does: a subprocess with its own HOME and RAFKA_HOME.

The pytest process may hold an in-process Ray of other tests (tests/conftest.py); these tests
never connect to it nor to the Ray heads they start: everything goes through subprocesses, whose
environment drops the RAY_ADDRESS that the in-process Ray exports.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from rafka.actors.stack import RayHead
from rafka.coordination.embedded import is_embedded_server, pid_alive

RAFKA = [sys.executable, "-m", "rafka"]
# What would point a subprocess at some other cluster than the test's own.
_DROPPED = ("RAY_ADDRESS", "RAFKA_CLUSTER", "RAFKA_ZK", "RAFKA_HOME", "RAY_AUTH_MODE",
            "RAFKA_ZK_CREDENTIALS_FILE")


class Rafka:
    """`rafka(*args, input=...)` runs the command line and returns the finished process."""

    def __init__(self, root: Path) -> None:
        self.root = root
        home = root / "home"
        home.mkdir(parents=True, exist_ok=True)
        self.env = {key: value for key, value in os.environ.items() if key not in _DROPPED}
        self.env.update(HOME=str(home), RAFKA_HOME=str(root / "rafka-home"),
                        PYTHONUNBUFFERED="1")

    def __call__(self, *args: str, input: str | bytes | None = None, timeout: float = 120,
                 env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
        text = not isinstance(input, bytes)
        result = subprocess.run(
            [*RAFKA, *args], input=input, capture_output=True, text=text, timeout=timeout,
            cwd=self.root, env={**self.env, **(env or {})},
        )
        if not text:
            result.stdout = result.stdout.decode("utf-8", "replace")
            result.stderr = result.stderr.decode("utf-8", "replace")
        return result


@contextlib.contextmanager
def rafka_up(rafka: Rafka, name: str, data_dir: Path, brokers: int, *options: str,
             ) -> Iterator[tuple[subprocess.CompletedProcess[str], dict[str, Any]]]:
    """`rafka up` a cluster of `brokers` (with more `options`), yield its result and the state
    it recorded, and always take it down: `rafka down`, then, if that failed, what `up`
    recorded, by PID."""
    rafka.env["RAFKA_CLUSTER"] = name
    state: dict[str, Any] = {}
    try:
        result = rafka("up", "--brokers", str(brokers), "--num-cpus", "1",
                       "--data-dir", str(data_dir), *options, timeout=300)
        if (data_dir / "cluster.json").exists():
            state = json.loads((data_dir / "cluster.json").read_text())
        assert result.returncode == 0, result.stderr
        # Said explicitly, so that no RAY_ADDRESS of another Ray can leak in.
        rafka.env["RAY_ADDRESS"] = state["ray_address"]
        yield result, state
    finally:
        rafka("down", timeout=180)
        _stop_leftovers(state)


def _stop_leftovers(state: dict[str, Any]) -> None:
    head = state.get("ray_head")
    if head and pid_alive(head["pid"]):
        RayHead.from_record(head).stop(30)
    zk = state.get("zookeeper")
    if zk and is_embedded_server(zk["pid"], zk["data_dir"]):
        os.kill(zk["pid"], signal.SIGKILL)


def assert_clean_error(result: subprocess.CompletedProcess[str], code: int, *needles: str) -> None:
    """An expected error: its exit code, a message on stderr, and no Python traceback."""
    assert result.returncode == code, (result.returncode, result.stdout, result.stderr)
    assert "Traceback" not in result.stderr, result.stderr
    for needle in needles:
        assert needle in result.stderr, (needle, result.stderr)


def exit_code_in_process(argv: list[str]) -> int:
    """`rafka <argv>` run in this process, as `main` ends it: argparse's own exit, or ours."""
    from rafka.cli.main import main

    try:
        return main(argv)
    except SystemExit as exit:
        return exit.code
