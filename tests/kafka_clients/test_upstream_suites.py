"""kafka-python's own integration tests, a short subset of them, against rafka's Kafka listener
with only their broker fixture changed (tests/kafka_clients/upstream/: the full run, aiokafka's
suite and what is left out, with the reason for each)."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

from rafka import Cluster

RUNNER = Path(__file__).parent / "upstream" / "run_suites.py"


def test_kafka_pythons_own_integration_tests_pass_against_rafka(
    kafka_cluster: Cluster, tmp_path: Path,
) -> None:
    spec = importlib.util.spec_from_file_location("run_suites", RUNNER)
    assert spec is not None and spec.loader is not None
    runner = sys.modules["run_suites"] = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(runner)
    bootstrap = kafka_cluster.bootstrap_servers().split(",")[0]
    run = subprocess.run([sys.executable, str(RUNNER), "kafka-python", "--bootstrap", bootstrap,
                          "--subset", "ci", "--cache-dir", str(tmp_path / "cache")],
                         capture_output=True, text=True, timeout=900)
    assert run.stdout, run.stderr[-3000:]
    summary = json.loads(run.stdout)
    assert summary["failures"] == [], summary["failures"]
    assert summary["passed"] == len(runner.SUITES["kafka-python"].ci), (summary, run.stderr[-3000:])
