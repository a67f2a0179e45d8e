"""The transactional sink's crash test (issues 24 and 55): a topic-to-topic stream whose output
is written in a transaction per batch loses a Spark executor and then its driver (both
SIGKILLed while it writes); a new driver resumes from the checkpoint. A read_committed reader
watches the output throughout: it must never see a record twice (an aborted or partial
attempt made visible, then written again), and at the end it has every result once, each
batch's records as many as the batch read.

The kill points are random (the seed is in the test's output; RAFKA_CRASH_SEED or RAFKA_SEED
replays it), so repeated runs hit different moments: within a batch's write, between its tasks,
as it commits.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import threading
import time
import uuid
from collections import Counter
from pathlib import Path

import pytest

from rafka import Cluster
from rafka.actors.clients.consumer import ConsumerRecord
from tests.support.cluster import module_cluster, stored_count
from tests.support.pipelines import ExecutorWatch, spark_executor_pids, start_driver
from tests.support.seeds import run_seed

RECORDS = 60_000
# A micro-batch's records: four batches, so that a kill can land within one, between two or
# as one commits, and the restarted driver still has batches to run.
BATCH_RECORDS = 15_000
SOURCE_PARTITIONS, SINK_PARTITIONS = 2, 3


cluster = module_cluster("crash", 2)


class CommittedWatch:
    """A read_committed consumer of `topic` polling in a thread of its own until stopped:
    every record it was given, in order, and any error it met."""

    def __init__(self, cluster: Cluster, topic: str) -> None:
        self.records: list[ConsumerRecord] = []
        self.errors: list[BaseException] = []
        self._consumer = cluster.consumer([topic], auto_offset_reset="earliest",
                                          isolation_level="read_committed")
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="committed-watch", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.records += self._consumer.poll(200)
            except Exception as error:  # noted, and the test fails on it
                self.errors.append(error)
                time.sleep(0.2)

    def until(self, count: int, timeout_s: float) -> None:
        """Wait until `count` records were seen, then poll a little longer (a duplicate past
        them is seen too), and stop."""
        deadline = time.monotonic() + timeout_s
        while len(self.records) < count and time.monotonic() < deadline:
            time.sleep(0.1)
        time.sleep(1.5)
        self.stop()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(30)
        self._consumer.close()


def start_sink_driver(cluster: Cluster, source: str, sink: str, checkpoint: Path,
                      log: Path) -> subprocess.Popen:
    return start_driver("tests.support.sink_driver", cluster,
                        [source, sink, str(checkpoint), str(BATCH_RECORDS), "transactional"],
                        log)


def wait_until_written(cluster: Cluster, sink: str, count: int, driver: subprocess.Popen,
                       timeout_s: float = 300, executors: ExecutorWatch | None = None) -> int:
    """Wait until the sink's logs hold `count` records, committed or not (its high
    watermarks: they grow as a batch's tasks write); returns how many they held then.

    Given `executors`, it also returns once they say the driver lost its executor for good
    (RayDP's lost restart): the driver is killed next anyway."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        written = stored_count(cluster, sink, SINK_PARTITIONS)
        if written >= count:
            return written
        if executors is not None and executors.lost():
            print(f"RayDP lost the restarted executor at {written} records")
            return written
        if driver.poll() is not None:
            pytest.fail(f"the driver exited ({driver.returncode}) with {written} records "
                        f"written, before {count}")
        time.sleep(0.02)
    pytest.fail(f"the sink did not reach {count} records in {timeout_s} s")


def batch_sizes(checkpoint: Path) -> dict[int, int]:
    """How many source records each batch of the stream read, from its checkpoint's offset
    files (`pipelines.checkpoint`)."""
    sizes = {}
    for path in (checkpoint / "offsets").iterdir():
        ranges = json.loads(path.read_text())["ranges"]
        sizes[int(path.name)] = sum(until - start for partitions in ranges.values()
                                    for start, until in partitions.values())
    return sizes


def test_a_transactional_stream_killed_twice_shows_each_batch_whole_and_once(
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
    driver_after = chance.randrange(0, 24_000)  # more records written after the executor's

    watch = CommittedWatch(cluster, sink)
    others = set(spark_executor_pids())  # the test session's own Spark, if it runs
    driver = start_sink_driver(cluster, source, sink, checkpoint, log)
    try:
        at_executor_kill = wait_until_written(cluster, sink, executor_at, driver)
        seen_at_executor_kill = len(watch.records)
        executors = [pid for pid in spark_executor_pids() if pid not in others]
        assert executors, "the driver's Spark has no executor alive"
        for pid in executors:
            os.kill(pid, signal.SIGKILL)
        # Kill the driver before the last batch is written: the logs hold at most one open
        # batch's records past the committed ones, so they reach this with more to come.
        last_batch_from = (at_executor_kill + RECORDS - seen_at_executor_kill
                           - 3 * BATCH_RECORDS // 2)
        driver_at = max(at_executor_kill,
                        min(at_executor_kill + driver_after, last_batch_from))
        at_driver_kill = wait_until_written(cluster, sink, driver_at, driver,
                                            executors=ExecutorWatch(others | set(executors)))
        driver.kill()
        driver.wait(60)
        seen_at_driver_kill = len(watch.records)
    finally:
        if driver.poll() is None:
            driver.kill()
            driver.wait(60)
    print(f"executor killed at {at_executor_kill} records written "
          f"({seen_at_executor_kill} committed), driver at {at_driver_kill} "
          f"({seen_at_driver_kill} committed)")
    assert seen_at_driver_kill < RECORDS, "the driver was killed after the writing"

    restarted = start_sink_driver(cluster, source, sink, checkpoint, log)
    try:
        assert restarted.wait(600) == 0, log.read_text()[-5000:]
    finally:
        if restarted.poll() is None:
            restarted.kill()
            restarted.wait(60)
        watch.until(RECORDS, timeout_s=120)

    assert not watch.errors, f"the read_committed reader failed: {watch.errors[:3]}"
    seen = Counter(record.value for record in watch.records)
    twice = sorted(value for value, times in seen.items() if times > 1)[:10]
    missing = [i for i in range(RECORDS) if f"{i}!".encode() not in seen][:10]
    assert not twice and not missing, (
        f"seed {seed}: seen twice {twice}, missing {missing} (executor killed at "
        f"{at_executor_kill} records written, driver at {at_driver_kill})")
    assert sum(seen.values()) == RECORDS
    # Each batch's output was seen whole: as many records as the batch read.
    by_batch = Counter(dict(record.headers)["batch"].decode() for record in watch.records)
    assert {int(batch): count for batch, count in by_batch.items()} == batch_sizes(checkpoint)
    # Each key's results stayed together: every attempt partitioned them the same way.
    partitions_of_key: dict[bytes | None, set[int]] = {}
    for record in watch.records:
        partitions_of_key.setdefault(record.key, set()).add(record.partition)
    assert all(len(partitions) == 1 for partitions in partitions_of_key.values())
