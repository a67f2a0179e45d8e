"""Nothing left behind: a test session stops every ZooKeeper, Ray and Spark process it started."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import psutil

from tests.support.waiting import eventually


def _still_running(entry: dict) -> bool:
    try:
        process = psutil.Process(entry["pid"])
        # A reused PID is another process; a zombie has already exited.
        return (
            abs(process.create_time() - entry["create_time"]) < 0.01
            and process.status() != psutil.STATUS_ZOMBIE
        )
    except psutil.NoSuchProcess:
        return False


def test_a_test_session_leaves_no_process_behind(tmp_path: Path) -> None:
    report_path = tmp_path / "processes.json"
    inner = Path(__file__).with_name("stack_session.py")
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(inner)],
        env={**os.environ, "RAFKA_PROCESS_REPORT": str(report_path)},
        capture_output=True,
        text=True,
        timeout=400,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    report = json.loads(report_path.read_text())
    commands = " ".join(entry["cmdline"] for entry in report["processes"])
    # The inner session really started all three parts.
    assert report["zookeeper"] in [entry["pid"] for entry in report["processes"]]
    assert "raylet" in commands and "gcs_server" in commands
    assert "org.apache.spark" in commands or "pyspark" in commands

    left = report["processes"]

    def all_gone() -> bool:
        nonlocal left
        left = [entry for entry in left if _still_running(entry)]
        return not left

    assert eventually(all_gone, 30, interval_s=0.5), (
        f"still running after the test session ended: {left}")
