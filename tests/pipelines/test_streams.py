"""Streams against a live cluster and Spark session: triggers, rate limits, and a driver
killed mid-batch whose successor, in a process of its own, runs that batch again."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import ray

from rafka import Cluster
from rafka.pipelines.streaming import stream_topic
from tests.support.cluster import fresh, module_cluster, produce_numbered

REPO = Path(__file__).resolve().parents[2]


cluster = module_cluster("streams", 2)


def values_of(frame) -> list[bytes]:
    return [bytes(row.value) for row in frame.select("value").collect()]


def test_available_now_reads_what_was_there_in_capped_batches_then_stops(
        spark, cluster: Cluster, tmp_path) -> None:
    topic = fresh("now")
    cluster.create_topic(topic, partitions=2, replication_factor=2)
    produce_numbered(cluster, topic, 100)
    seen: list[tuple[int, list[bytes]]] = []

    def sink(frame, batch_id: int) -> None:
        seen.append((batch_id, values_of(frame)))
        if batch_id == 0:
            produce_numbered(cluster, topic, 10, start=100)  # after the stream started: not read

    stream = stream_topic(spark, cluster, topic, None, sink, checkpoint=str(tmp_path / "cp"),
                          trigger="availableNow", options={
                              "startingOffsets": "earliest", "maxOffsetsPerTrigger": "30"})
    assert stream.await_termination(120)
    assert [batch for batch, _values in seen] == [0, 1, 2, 3]
    assert all(len(values) <= 31 for _batch, values in seen)  # a share rounds up by one at most
    assert sorted(v for _batch, values in seen for v in values) == sorted(
        f"v{i}".encode() for i in range(100))


def test_once_reads_everything_in_one_batch_and_continues_from_its_checkpoint(
        spark, cluster: Cluster, tmp_path) -> None:
    topic = fresh("once")
    cluster.create_topic(topic, partitions=2, replication_factor=2)
    produce_numbered(cluster, topic, 50)
    seen: list[tuple[int, int]] = []

    def sink(frame, batch_id: int) -> None:
        seen.append((batch_id, frame.count()))

    def once() -> None:
        stream_topic(spark, cluster, topic, None, sink, checkpoint=str(tmp_path / "cp"),
                     trigger="once", options={"startingOffsets": "earliest",
                                              "maxOffsetsPerTrigger": "10"}
                     ).await_termination(120)

    once()
    produce_numbered(cluster, topic, 7, start=50)
    once()
    once()  # nothing new: no batch
    assert seen == [(0, 50), (1, 7)]  # Trigger.Once ignores the rate limit, as Spark's


def test_min_offsets_per_trigger_waits_for_records_or_the_delay(spark, cluster: Cluster,
                                                                tmp_path) -> None:
    topic = fresh("min")
    cluster.create_topic(topic, partitions=1, replication_factor=2)
    seen: list[int] = []
    stream = stream_topic(spark, cluster, topic, None, lambda frame, _id: seen.append(
        frame.count()), checkpoint=str(tmp_path / "cp"), trigger_interval=0.2,
        options={"minOffsetsPerTrigger": "20", "maxTriggerDelay": "4s"})
    try:
        time.sleep(1.0)  # the stream's first plan, at latest, is made
        produce_numbered(cluster, topic, 5)
        time.sleep(2.0)
        assert seen == []  # 5 < 20, and the delay has not passed
        produce_numbered(cluster, topic, 15)
        deadline = time.monotonic() + 30
        while not seen and time.monotonic() < deadline:
            time.sleep(0.2)
        assert seen == [20]
        produce_numbered(cluster, topic, 3)
        started = time.monotonic()
        while len(seen) < 2 and time.monotonic() < started + 30:
            time.sleep(0.2)
        assert seen == [20, 3] and time.monotonic() - started >= 2.5  # after maxTriggerDelay
    finally:
        stream.stop()
    assert stream.exception() is None


def run_driver(cluster: Cluster, topic: str, checkpoint: Path, log: Path, trigger: str,
               kill_at: int | None = None) -> subprocess.CompletedProcess:
    args = [sys.executable, "-m", "tests.support.stream_driver",
            ray.get_runtime_context().gcs_address, str(cluster.stack.zk_address), cluster.name,
            topic, str(checkpoint), str(log), trigger, "40"]
    if kill_at is not None:
        args.append(str(kill_at))
    return subprocess.run(args, cwd=REPO, capture_output=True, text=True, timeout=600,
                          env={**os.environ, "PYTHONPATH": str(REPO.parent)})


def test_a_driver_killed_mid_batch_is_followed_by_one_that_runs_the_same_ranges_again(
        cluster: Cluster, tmp_path) -> None:
    topic = fresh("restart")
    cluster.create_topic(topic, partitions=2, replication_factor=2)
    produce_numbered(cluster, topic, 100)
    checkpoint, log = tmp_path / "checkpoint", tmp_path / "batches.jsonl"
    killed = run_driver(cluster, topic, checkpoint, log, "processingTime", kill_at=1)
    assert killed.returncode == -9, killed.stderr[-3000:]
    first = [json.loads(line) for line in log.read_text().splitlines()]
    assert [(e["event"], e["batch"]) for e in first] == [("start", 0), ("done", 0),
                                                         ("start", 1)]
    restarted = run_driver(cluster, topic, checkpoint, log, "availableNow")
    assert restarted.returncode == 0, restarted.stderr[-3000:]
    events = [json.loads(line) for line in log.read_text().splitlines()][len(first):]
    assert events[0]["event"] == "start" and events[0]["batch"] == 1
    assert events[0]["ranges"] == first[2]["ranges"]  # the same batch, the same ranges
    assert events[0]["pid"] != first[2]["pid"]
    done = [e for e in first + events if e["event"] == "done"]
    assert [e["batch"] for e in done] == list(range(len(done)))
    covered = sorted((tp, offset) for e in done for tp, (start, until) in e["ranges"].items()
                     for offset in range(start, until))
    assert len(covered) == len(set(covered)) == 100  # every record in exactly one batch
