"""Issue 24's crash test: a topic-to-topic stream with an exactly-once output loses a Spark
executor and then its driver (both SIGKILLed while it writes); a new driver resumes from the
checkpoint, and the output topic holds every result exactly once.

The kill points are random (the seed is in the test's output; RAFKA_CRASH_SEED or RAFKA_SEED
replays it), so repeated runs hit different moments: within a batch's write, between its tasks,
as it commits.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import time
import uuid
from collections import Counter
from pathlib import Path

import pytest

from rafka import Cluster
from tests.support.cluster import module_cluster, stored_count, stored_records
from tests.support.pipelines import ExecutorWatch, spark_executor_pids, start_driver
from tests.support.seeds import run_seed

RECORDS = 60_000
# A micro-batch's records: four batches, so that a kill can land within one, between two or
# as one commits, and the restarted driver still has batches to run.
BATCH_RECORDS = 15_000
SOURCE_PARTITIONS, SINK_PARTITIONS = 2, 3


cluster = module_cluster("crash", 2)


def start_sink_driver(cluster: Cluster, source: str, sink: str, checkpoint: Path,
                      log: Path) -> subprocess.Popen:
    return start_driver("tests.support.sink_driver", cluster,
                        [source, sink, str(checkpoint), str(BATCH_RECORDS)], log)


def wait_until_stored(cluster: Cluster, sink: str, count: int, driver: subprocess.Popen,
                      timeout_s: float = 300, executors: ExecutorWatch | None = None) -> int:
    """Wait until the sink holds `count` records; returns how many it held then.

    Given `executors`, it also returns once they say the driver lost its executor for good
    (RayDP's lost restart): the driver is killed next anyway."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        stored = stored_count(cluster, sink, SINK_PARTITIONS)
        if stored >= count:
            return stored
        if executors is not None and executors.lost():
            print(f"RayDP lost the restarted executor at {stored} records")
            return stored
        if driver.poll() is not None:
            pytest.fail(f"the driver exited ({driver.returncode}) with {stored} records "
                        f"written, before {count}")
        time.sleep(0.02)
    pytest.fail(f"the sink did not reach {count} records in {timeout_s} s")


def test_a_stream_killed_twice_while_writing_stores_every_result_once(
        cluster: Cluster, tmp_path: Path) -> None:
    seed = run_seed("the kill points", variable="RAFKA_CRASH_SEED")
    chance = random.Random(seed)
    source, sink = f"crash-in-{uuid.uuid4().hex[:6]}", f"crash-out-{uuid.uuid4().hex[:6]}"
    cluster.create_topic(source, partitions=SOURCE_PARTITIONS, replication_factor=2)
    cluster.create_topic(sink, partitions=SINK_PARTITIONS, replication_factor=2)
    producer = cluster.producer(acks="all")
    producer.send_batch(source, [str(i).encode() for i in range(RECORDS)],
                        [f"k{i % 97}".encode() for i in range(RECORDS)])
    producer.close()
    checkpoint, log = tmp_path / "checkpoint", tmp_path / "drivers.log"
    executor_at = chance.randrange(1_000, 36_000)
    driver_after = chance.randrange(0, 24_000)  # more records after the executor's kill

    others = set(spark_executor_pids())  # the test session's own Spark, if it runs
    driver = start_sink_driver(cluster, source, sink, checkpoint, log)
    try:
        at_executor_kill = wait_until_stored(cluster, sink, executor_at, driver)
        executors = [pid for pid in spark_executor_pids() if pid not in others]
        assert executors, "the driver's Spark has no executor alive"
        for pid in executors:
            os.kill(pid, signal.SIGKILL)
        # The output grows a Spark task's share at a time: within the last batch at most.
        driver_at = min(at_executor_kill + driver_after, RECORDS - BATCH_RECORDS)
        at_driver_kill = wait_until_stored(cluster, sink, driver_at, driver,
                                           executors=ExecutorWatch(others | set(executors)))
        driver.kill()
        driver.wait(60)
    finally:
        if driver.poll() is None:
            driver.kill()
            driver.wait(60)
    print(f"executor killed at {at_executor_kill} records, driver at {at_driver_kill}")
    assert at_executor_kill <= at_driver_kill < RECORDS, "a kill came after the writing"

    restarted = start_sink_driver(cluster, source, sink, checkpoint, log)
    try:
        assert restarted.wait(600) == 0, log.read_text()[-5000:]
    finally:
        if restarted.poll() is None:
            restarted.kill()
            restarted.wait(60)

    records = stored_records(cluster, sink, RECORDS)
    stored = Counter(record.value for record in records)
    twice = sorted(value for value, times in stored.items() if times > 1)[:10]
    missing = [i for i in range(RECORDS) if f"{i}!".encode() not in stored][:10]
    assert not twice and not missing, (f"seed {seed}: stored twice {twice}, missing {missing} "
                                       f"(executor killed at {at_executor_kill}, driver at "
                                       f"{at_driver_kill})")
    assert sum(stored.values()) == RECORDS
    # Each key's results stayed together: every attempt partitioned them the same way.
    partitions_of_key = {}
    for record in records:
        partitions_of_key.setdefault(record.key, set()).add(record.partition)
    assert all(len(partitions) == 1 for partitions in partitions_of_key.values())
