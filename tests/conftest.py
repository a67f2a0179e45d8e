"""The test harness: one real ZooKeeper, one real Ray instance and one real Spark session per
test session; each test gets its own ZooKeeper chroot and Ray namespace.

Ray and Spark start only when a test asks for them, so the pure-logic tests stay fast. Every test
that starts real ZooKeeper, Ray or Spark is marked `cluster` here (its fixtures say so, or its
folder); one that starts them otherwise is marked so in its own module. `pytest -m "not cluster"`
runs the others, in seconds. Run two at a time (`pytest -n 2`), each worker is a test session of
its own; the tests that need the machine to themselves are marked `alone` here and run after, one
by one (README.md's test command). What tests share besides fixtures is in tests/support.
"""

from __future__ import annotations

import contextlib
import os
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import settings
from kazoo.client import KazooClient

from rafka import Cluster
from rafka.coordination.embedded import EmbeddedZooKeeper, ZooKeeperAddress
from tests.support import timeouts
from tests.support.cluster import TEST_BROKER_CONFIG, unique_name
from tests.support.zookeeper import make_chroot

# Hypothesis fails an example that runs past 200 ms by default: on a busy 2-core machine that
# is the machine, not the code (a validation test once took 318 ms under a test suite's load).
# Speed is measured by the benchmarks, never by a test. Examples are new every run, in CI too
# (Hypothesis's own CI profile, which this one would inherit there, derandomizes): a failure
# prints its falsifying example and the `@reproduce_failure` line that replays it.
settings.register_profile("rafka", deadline=None, derandomize=False, print_blob=True)
settings.load_profile("rafka")

# How often the session's Ray exports its metrics (tests/actors/test_metrics.py scrapes them).
METRICS_REPORT_INTERVAL_MS = 1000

# The fixtures that start a real ZooKeeper, Ray or Spark: every cluster fixture builds on them.
CLUSTER_FIXTURES = frozenset({"zookeeper", "ray_session", "spark"})
# Folders whose every test drives real processes: `rafka demo`, a test session or a deployment
# in a subprocess, unmodified Kafka clients against a cluster.
CLUSTER_FOLDERS = frozenset({"harness", "kafka_clients"})
# The modules that use the `spark` fixture. `--dist loadgroup` runs them on one worker, one
# after another, so that a single Spark session (a JVM driver and executor: 20-56 s of setup
# under the suite's load, then their upkeep) serves them all, instead of one per worker.
SPARK_MODULES = frozenset({
    "harness/test_smoke.py",
    "pipelines/test_exactly_once.py",
    "pipelines/test_exactly_once_crash.py",
    "pipelines/test_kafka_source.py",
    "pipelines/test_pipelines.py",
    "pipelines/test_read_failover.py",
    "pipelines/test_spark_worker.py",
    "pipelines/test_streams.py",
})
# Modules whose tests need the machine to themselves, marked `alone`: bounds of a few seconds
# (the full nemesis's liveness limits, a client's move to a new leader, the demo's time the
# README promises), sustained load with memory bounds, cluster.yaml deployed on network
# namespaces. The rest mostly wait (for sessions to expire, leaders to move, clients to time
# out) and the test command runs them two at a time: test_cleanup.py among them (it counts only
# the processes its own inner session started), test_testbed.py (the bed's namespaces and cuts,
# no cluster on them), the faults whose bounds are a minute or more (test_harsh_faults.py,
# test_transaction_faults.py), and the Spark crash runs (executors and drivers killed
# mid-write: their bounds are minutes, and each driver is a Spark of its own, which the
# session's Spark beside it does not disturb), which also spares the second part a Spark
# session of its own.
ALONE_MODULES = frozenset({
    "harness/test_demo.py",
    "harness/test_deployment.py",
    "reliability/test_faults.py",
    "reliability/test_follow_leader.py",
    "reliability/test_sustained_load.py",
})


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark `cluster` what needs a real ZooKeeper, Ray or Spark, and `alone` what needs the
    machine to itself, before `-m` selects."""
    check_spark_modules(items)
    for item in items:
        module = module_under_tests(item)
        folder = module.split("/", 1)[0] if module else None
        if folder in CLUSTER_FOLDERS or CLUSTER_FIXTURES.intersection(
                getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.cluster)
        if module in ALONE_MODULES:
            item.add_marker(pytest.mark.alone)


def module_under_tests(item: pytest.Item) -> str | None:
    """The test's module as a path under tests/ ("harness/test_smoke.py"), None if elsewhere."""
    tests = Path(__file__).parent
    return item.path.relative_to(tests).as_posix() if item.path.is_relative_to(tests) else None


def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """`--dist loadgroup`: a module to a worker, and the Spark modules to one worker together."""
    if config.getvalue("dist") != "loadgroup":
        return None
    from tests.support.xdist_groups import ModuleGroupScheduling

    return ModuleGroupScheduling(config, log, SPARK_MODULES)


def check_spark_modules(items: list[pytest.Item]) -> None:
    """Every test module (test_*.py: what the test command collects) whose tests start Spark is
    in SPARK_MODULES, so that it runs in their group."""
    unlisted = sorted({module for item in items
                       if "spark" in getattr(item, "fixturenames", ())
                       and item.path.name.startswith("test_")
                       and (module := module_under_tests(item)) is not None
                       and module not in SPARK_MODULES})
    if unlisted:
        raise pytest.UsageError(f"{', '.join(unlisted)} use the spark fixture: add them to "
                                "SPARK_MODULES in tests/conftest.py")


@pytest.hookimpl(tryfirst=True)
def pytest_timeout_set_timer(item: pytest.Item, settings) -> bool | None:
    """A test that times out in a Spark job fails, and the next one finds Spark usable."""
    return timeouts.set_timer(item, settings)


@pytest.fixture(scope="session")
def zookeeper(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedZooKeeper]:
    """The embedded ZooKeeper server, shared by the whole test session."""
    # Tests need no fsync per write; a user's embedded server keeps it.
    server = EmbeddedZooKeeper(tmp_path_factory.mktemp("zookeeper"), force_sync=False)
    server.start()
    yield server
    server.stop()


@pytest.fixture
def zk_address(zookeeper: EmbeddedZooKeeper, request: pytest.FixtureRequest) -> ZooKeeperAddress:
    """The server's address under a chroot of this test's own, created empty."""
    return make_chroot(zookeeper, unique_name(request))


@pytest.fixture
def zk_client(zk_address: ZooKeeperAddress) -> Iterator[KazooClient]:
    """A started kazoo client inside this test's chroot."""
    client = KazooClient(hosts=str(zk_address))
    client.start(timeout=15)
    yield client
    client.stop()
    client.close()


@pytest.fixture(scope="session")
def ray_session() -> Iterator[None]:
    """A local Ray instance sized for this 2-core machine (actors take num_cpus=0)."""
    import ray

    from rafka.actors.runtime import init_ray

    # Ray's warnings and the actors' lines (in a failing test's captured output) are what a
    # developer reading a test run wants, unlike a user (actors/logs.py).
    os.environ.setdefault("RAFKA_LOG_LEVEL", "warning")
    # A test session starts hundreds of Ray workers, each with two log files. Ray's log monitor
    # looks for new ones every 0.1 s while there are under a thousand, and the dashboard agent
    # sweeps every worker's process stats every 5 s: a few percent of a core, all session long,
    # for output that may reach the driver a second later and stats no test reads. (Ray reads
    # these from the environment of the processes it starts.)
    os.environ.setdefault("RAY_LOG_MONITOR_MANY_FILES_THRESHOLD", "0")
    os.environ.setdefault("LOG_NAME_UPDATE_INTERVAL_S", "1")
    os.environ.setdefault("REPORTER_UPDATE_INTERVAL_MS", "60000")
    # Ray's metrics reach the export port every metrics_report_interval_ms (10 s by default):
    # the metrics tests wait for them several times, and a second is plenty for a test's cluster.
    init_ray(num_cpus=2, log_to_driver=True,
             _system_config={"metrics_report_interval_ms": METRICS_REPORT_INTERVAL_MS})
    yield
    ray.shutdown()


@pytest.fixture
def ray_namespace(ray_session: None, request: pytest.FixtureRequest) -> Iterator[str]:
    """A Ray namespace of this test's own; named actors left in it are killed afterwards."""
    import ray
    from ray.util import list_named_actors

    namespace = unique_name(request)
    yield namespace
    for entry in list_named_actors(all_namespaces=True):
        if entry["namespace"] == namespace:
            with contextlib.suppress(ValueError):
                ray.kill(ray.get_actor(entry["name"], namespace=namespace))


@pytest.fixture(scope="session")
def spark(ray_session: None):
    """A Spark session through RayDP, with one executor of one core."""
    from rafka.pipelines.spark import start_spark, stop_spark

    session = start_spark("rafka-tests", configs={"spark.ui.enabled": "false"})
    yield session
    stop_spark()


@pytest.fixture
def start_cluster(
    zk_address: ZooKeeperAddress, ray_session: None, tmp_path
) -> Iterator[Callable[..., Cluster]]:
    """Start clusters in this test's chroot; every one is shut down afterwards."""
    clusters: list[Cluster] = []

    def start(brokers: int = 3, **options: Any) -> Cluster:
        config = {**TEST_BROKER_CONFIG, **options.pop("broker_config", {})}
        name = options.pop("name", f"t{uuid.uuid4().hex[:10]}")
        cluster = Cluster.start(
            brokers,
            name=name,
            zk=str(zk_address),
            data_dir=tmp_path / name,
            broker_config=config,
            **options,
        )
        clusters.append(cluster)
        return cluster

    yield start
    for cluster in clusters:
        cluster.shutdown()


@pytest.fixture
def cluster(start_cluster: Callable[..., Cluster]) -> Cluster:
    """Three brokers."""
    return start_cluster(3)
