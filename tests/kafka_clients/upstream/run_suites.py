"""Run a Kafka client's own integration suite against an already running rafka.

    python tests/kafka_clients/upstream/run_suites.py kafka-python --bootstrap 127.0.0.1:9092
    python tests/kafka_clients/upstream/run_suites.py aiokafka --bootstrap 127.0.0.1:9092 \\
        --source PATH    # aiokafka's git directory or a checkout of its v0.14.0 tree

The suite's source is taken at the pinned version of the client installed here: kafka-python's
from its sdist on PyPI (pip download, checked against its sha256), aiokafka's from `--source`,
since aiokafka's sdists ship no tests. A fresh copy is unpacked under the cache directory, the
patch beside this file (`<suite>.patch`, a `diff -ruN` against that tree that changes only the
broker fixture) is applied, the client's own package is removed from the copy so that the
installed one is what runs, and pytest runs in a subprocess with the suite's own configuration.
This script starts no broker. The tests left out (SSL, SASL, KRaft, and what rafka
lacks) are deselected, each with its reason in its suite's `left_out`;
`--subset ci` runs a short list, `--only NODE_ID` one test. A JSON summary (counts, and each
failure's test id and first error line) goes to stdout; pytest's own output goes to stderr.
When pytest loads this module as a plugin (`-p run_suites`), its hooks below record each test's
outcome.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pytest

HERE = Path(__file__).resolve().parent
RESULTS_ENV = "RAFKA_UPSTREAM_RESULTS"
DEFAULT_CACHE = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "rafka-upstream"

# Reasons a test is left out.
KRAFT = "KRaft-only API (DescribeQuorum, DescribeTopicPartitions, ListConfigResources)"
SSL = "needs an SSL listener"


@dataclass(frozen=True)
class Suite:
    dist: str                      # the client's distribution on PyPI
    version: str                   # the pinned version: the one installed must be it
    package: str                   # its top-level package, removed from the unpacked tree
    files: tuple[str, ...]         # the integration test files run
    ci: tuple[str, ...]            # node ids of the short subset
    left_out: dict[str, str]       # node id prefix -> reason it is deselected
    kafka_version: str             # the Kafka version rafka stands for (gates version checks)
    sha256: str = ""               # of the sdist (kafka-python)
    commit: str = ""               # of the git tree (aiokafka)
    needs: tuple[str, ...] = ()    # modules the suite imports besides pytest


KP = "test/integration/"
AK = "tests/"
SUITES: dict[str, Suite] = {
    "kafka-python": Suite(
        dist="kafka-python", version="3.0.12", package="kafka",
        sha256="4ccda3616b9aa5c353d74a97f2770d6cd1b950890d77ab0e8890e09a48eeed65",
        # 2.3 is the newest Kafka whose API versions, which kafka-python takes as given when
        # api_version is set, all lie within what rafka serves (2.4 asks CreateTopics v5).
        kafka_version="2.3",
        needs=("pytest_timeout", "snappy"),  # snappy: its snappy codec (python-snappy)
        files=tuple(KP + f for f in ("test_admin_integration.py",
                                     "test_consumer_integration.py",
                                     "test_producer_integration.py")),
        ci=tuple(KP + t for t in (
            "test_consumer_integration.py::test_consumer",
            "test_consumer_integration.py::test_consumer_topics",
            "test_consumer_integration.py::test_paused",
            "test_consumer_integration.py::test_kafka_consumer",
            "test_consumer_integration.py::test_kafka_consumer__offset_commit_resume",
            "test_consumer_integration.py::test_kafka_consumer_offsets_for_time",
            "test_consumer_integration.py::test_kafka_consumer_position_after_seek_to_end",
            "test_consumer_integration.py::test_heartbeat_thread",
            "test_admin_integration.py::test_create_delete_topics",
            "test_admin_integration.py::test_create_describe_delete_acls",
            "test_admin_integration.py::test_describe_configs_topic_resource_returns_configs",
            "test_admin_integration.py::test_describe_configs_broker_resource_returns_configs",
            "test_admin_integration.py::test_list_partition_offsets",
            "test_producer_integration.py::test_idempotent_producer_max_in_flight[5]",
            "test_producer_integration.py::test_end_to_end[snappy]",
            "test_producer_integration.py::test_transactional_producer_messages",
            "test_producer_integration.py::test_transactional_producer_offsets",
        )),
        left_out={KP + k: v for k, v in {
            "test_admin_integration.py::test_describe_metadata_quorum": KRAFT,
            "test_admin_integration.py::test_describe_topic_partitions": KRAFT,
            "test_admin_integration.py::test_list_config_resources": KRAFT,
            # rafka's ApiVersions makes kafka-python infer 3.6, and kafka-python asks at
            # 3.6's API versions when told it, some beyond rafka's: no KAFKA_VERSION passes
            # both.
            "test_consumer_integration.py::test_kafka_version_infer":
                "expects the inferred version to equal KAFKA_VERSION",
        }.items()},
    ),
    "aiokafka": Suite(
        dist="aiokafka", version="0.14.0", package="aiokafka",
        commit="672947afe85c91b7d953f0259e69837a711d3246",  # tag v0.14.0
        kafka_version="2.8.1",  # aiokafka's own default broker
        needs=("pytest_asyncio", "pytest_mock", "docker"),
        files=tuple(AK + f for f in ("test_admin.py", "test_client.py", "test_conn.py",
                                     "test_consumer.py", "test_coordinator.py",
                                     "test_pep492.py", "test_producer.py", "test_sender.py",
                                     "test_transactional_producer.py",
                                     "test_transactional_consumer.py")),
        ci=tuple(AK + t for t in (
            "test_conn.py::ConnIntegrationTest::test_global_loop_for_create_conn",
            "test_conn.py::ConnIntegrationTest::test_basic_connection_load_meta",
            "test_admin.py::TestAdmin::test_create_topics",
            "test_admin.py::TestAdmin::test_list_topics",
            "test_admin.py::TestAdmin::test_delete_topics",
        )),
        left_out={},
    ),
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     epilog="Arguments after `--` go to pytest.")
    parser.add_argument("suite", choices=sorted(SUITES))
    parser.add_argument("--bootstrap", required=True, metavar="HOST:PORT",
                        help="a running rafka's Kafka listener")
    parser.add_argument("--subset", choices=("full", "ci"), default="full")
    parser.add_argument("--only", action="append", metavar="NODE_ID",
                        help="run this test (node id in the suite's tree) instead; repeatable")
    parser.add_argument("--kafka-version", help="the Kafka version rafka stands for")
    parser.add_argument("--source", type=Path,
                        help="aiokafka: its git directory, or a checkout of the pinned tree")
    parser.add_argument("--cache-dir", type=Path, default=DEFAULT_CACHE)
    parser.add_argument("--keep-left-out", action="store_true",
                        help="run the left-out tests too")
    argv = sys.argv[1:] if argv is None else argv
    cut = argv.index("--") if "--" in argv else len(argv)
    args = parser.parse_args(argv[:cut])
    pytest_args = argv[cut + 1:]  # what follows `--` goes to pytest as it is
    suite = SUITES[args.suite]

    problem = _check_environment(suite)
    if problem:
        print(f"run_suites: {problem}", file=sys.stderr)
        return 2
    try:
        tree = _prepare_tree(args.suite, suite, args.cache_dir, args.source)
    except (OSError, RuntimeError, subprocess.CalledProcessError) as failure:
        print(f"run_suites: cannot prepare {args.suite}'s suite: {failure}", file=sys.stderr)
        return 2

    kafka_version = args.kafka_version or suite.kafka_version
    command = [sys.executable, "-m", "pytest", "-c", str(tree / "pyproject.toml"),
               "--rootdir", str(tree), "-p", "no:cacheprovider", "-p", Path(__file__).stem,
               "-rfE"]
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(HERE), env.get("PYTHONPATH")]))
    if args.suite == "kafka-python":
        env["KAFKA_URI"] = f"PLAINTEXT://{args.bootstrap}"
        env["KAFKA_VERSION"] = kafka_version
    else:
        command += ["--kafka-bootstrap", args.bootstrap, "--kafka-version", kafka_version,
                    "-m", "not ssl", "-o", "asyncio_default_fixture_loop_scope=function"]
    if not args.keep_left_out:
        command += [f"--deselect={prefix}" for prefix in suite.left_out]
    command += args.only or list(suite.ci if args.subset == "ci" else suite.files)
    command += pytest_args

    with tempfile.TemporaryDirectory() as scratch:
        results = Path(scratch) / "results.json"
        env[RESULTS_ENV] = str(results)
        exit_code = subprocess.call(command, cwd=tree, env=env, stdout=sys.stderr)
        recorded = json.loads(results.read_text()) if results.exists() else {}

    outcomes: dict[str, str] = recorded.get("outcomes", {})
    errors: dict[str, str] = recorded.get("errors", {})
    summary = {
        "suite": args.suite, "client_version": suite.version, "bootstrap": args.bootstrap,
        "kafka_version": kafka_version, "subset": "only" if args.only else args.subset,
        "pytest_exit_code": exit_code,
        **{kind: sum(1 for o in outcomes.values() if o == kind)
           for kind in ("passed", "failed", "skipped")},
        "deselected": recorded.get("deselected", 0),
        "failures": [{"id": test_id, "error": errors.get(test_id, "")}
                     for test_id, outcome in outcomes.items() if outcome == "failed"],
    }
    print(json.dumps(summary, indent=2))
    return 0 if exit_code == 0 else 1


def _check_environment(suite: Suite) -> str:
    try:
        installed = metadata.version(suite.dist)
    except metadata.PackageNotFoundError:
        return f"{suite.dist} is not installed (want {suite.version})"
    if installed != suite.version:
        return f"{suite.dist} {installed} is installed; this suite is pinned to {suite.version}"
    missing = [m for m in suite.needs if not _importable(m)]
    if missing:
        return f"the suite needs these modules, not installed: {', '.join(missing)}"
    if shutil.which("patch") is None:
        return "the `patch` program is missing (apt-get install patch)"
    return ""


def _importable(module: str) -> bool:
    from importlib.util import find_spec
    return find_spec(module) is not None


def _prepare_tree(name: str, suite: Suite, cache: Path, source: Path | None) -> Path:
    """A freshly patched copy of the suite's tree, without the client's own package."""
    pristine = cache / f"{name}-{suite.version}"
    if not (pristine / "pyproject.toml").exists():
        shutil.rmtree(pristine, ignore_errors=True)
        if name == "kafka-python":
            _unpack_sdist(suite, cache, pristine)
        else:
            _export_git_tree(suite, source, pristine)
    work = cache / "work" / name
    shutil.rmtree(work, ignore_errors=True)
    shutil.copytree(pristine, work, symlinks=True)
    subprocess.run(["patch", "-p1", "--batch", "--forward", "--quiet",
                    "-i", str(HERE / f"{name.replace('-', '_')}.patch")],
                   cwd=work, check=True, stdout=sys.stderr)
    shutil.rmtree(work / suite.package, ignore_errors=True)
    return work


def _unpack_sdist(suite: Suite, cache: Path, pristine: Path) -> None:
    downloads = cache / "downloads"
    subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps",
                    "--no-binary", ":all:", f"{suite.dist}=={suite.version}",
                    "-d", str(downloads)], check=True, stdout=sys.stderr)
    stem = f"{suite.dist.replace('-', '_')}-{suite.version}"
    archive = downloads / f"{stem}.tar.gz"
    digest = hashlib.sha256(archive.read_bytes()).hexdigest()
    if digest != suite.sha256:
        raise RuntimeError(f"{archive.name} has sha256 {digest}, expected {suite.sha256}")
    with tempfile.TemporaryDirectory(dir=cache) as scratch, tarfile.open(archive) as sdist:
        sdist.extractall(scratch, filter="data")
        shutil.move(Path(scratch) / stem, pristine)


def _export_git_tree(suite: Suite, source: Path | None, pristine: Path) -> None:
    """aiokafka's tests/ and pyproject.toml at the pinned commit, from a tree or a git dir."""
    if source is None:
        raise RuntimeError("aiokafka's sdists ship no tests: give --source (its git directory "
                           f"or a checkout of commit {suite.commit})")
    pristine.mkdir(parents=True)
    if (source / "tests" / "conftest.py").exists():
        shutil.copytree(source / "tests", pristine / "tests")
        shutil.copy2(source / "pyproject.toml", pristine / "pyproject.toml")
        return
    git_dir = source / ".git" if (source / ".git").exists() else source
    archive = subprocess.run(["git", "--git-dir", str(git_dir), "archive", suite.commit,
                              "tests", "pyproject.toml"], check=True, capture_output=True)
    subprocess.run(["tar", "-x", "-C", str(pristine)], input=archive.stdout, check=True)


# ------------------------------------------------------------- pytest plugin (-p run_suites)

_outcomes: dict[str, str] = {}
_errors: dict[str, str] = {}
_deselected: list[int] = [0]


def _first_line(report: Any) -> str:
    crash = getattr(report.longrepr, "reprcrash", None)
    text = crash.message if crash is not None else str(report.longrepr)
    line = next((line for line in text.splitlines() if line.strip()), "")
    when = getattr(report, "when", None)
    return line if when in (None, "call") else f"[{when}] {line}"


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if report.failed:
        _outcomes[report.nodeid] = "failed"
        _errors.setdefault(report.nodeid, _first_line(report))
    elif report.skipped and _outcomes.get(report.nodeid) != "failed":
        _outcomes[report.nodeid] = "skipped"
    elif report.when == "call" and report.passed:
        _outcomes.setdefault(report.nodeid, "passed")


def pytest_collectreport(report: pytest.CollectReport) -> None:
    if report.failed:
        _outcomes[report.nodeid] = "failed"
        _errors[report.nodeid] = f"[collect] {_first_line(report)}"


def pytest_deselected(items: list[pytest.Item]) -> None:
    _deselected[0] += len(items)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    path = os.environ.get(RESULTS_ENV)
    if path:
        Path(path).write_text(json.dumps(
            {"outcomes": _outcomes, "errors": _errors, "deselected": _deselected[0]}))


if __name__ == "__main__":
    sys.exit(main())
