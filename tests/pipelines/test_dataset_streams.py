"""`stream_dataset` against a live cluster: micro-batches as Ray Datasets, their triggers, the
checkpoint the caller keeps, and a job killed mid-batch three times under a producer."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

import pytest
import ray

from rafka import Cluster, stream_dataset
from rafka.coordination.embedded import EmbeddedZooKeeper
from rafka.pipelines.checkpoint import CheckpointError
from rafka.pipelines.examples.topic_training import plan_workers, start_workers, train
from tests.support.cluster import fresh, module_cluster, produce_numbered
from tests.support.processes import kill_marked, left_behind, run_marked
from tests.support.waiting import eventually
from tests.support.zookeeper import make_chroot

REPO = Path(__file__).resolve().parents[2]

cluster = module_cluster("dstreams", 2)


def values(batch) -> list[str]:
    return [row["value"].decode() for row in batch.dataset.iter_rows()]


def test_available_now_reads_what_was_there_in_capped_batches_then_ends(cluster: Cluster
                                                                         ) -> None:
    topic = fresh("now")
    cluster.create_topic(topic, partitions=2, replication_factor=2)
    produce_numbered(cluster, topic, 100)
    seen = []
    with stream_dataset(cluster, topic, starting_offsets="earliest", trigger="availableNow",
                        max_records_per_batch=30) as stream:
        for batch in stream:
            seen.append((batch.batch_id, values(batch)))
            assert batch.record_count == len(seen[-1][1])
            if batch.batch_id == 0:
                # After the stream started: not read.
                produce_numbered(cluster, topic, 10, start=100)
    assert [batch_id for batch_id, _values in seen] == [0, 1, 2, 3]
    assert all(len(read) <= 31 for _id, read in seen)  # a share rounds up by one at most
    assert sorted(v for _id, read in seen for v in read) == sorted(f"v{i}" for i in range(100))


def test_a_stored_checkpoint_resumes_right_after_its_batch(cluster: Cluster) -> None:
    topic = fresh("resume")
    cluster.create_topic(topic, partitions=3, replication_factor=2)
    produce_numbered(cluster, topic, 60)
    with stream_dataset(cluster, topic, starting_offsets="earliest",
                        trigger="availableNow", max_records_per_batch=25) as stream:
        first = next(stream)
        second = next(stream)  # read, never stored: the next run reads it again
    stored = json.loads(json.dumps(first.checkpoint))  # as a job stores it
    produce_numbered(cluster, topic, 15, start=60)
    with stream_dataset(cluster, topic, checkpoint=stored, trigger="once") as stream:
        rest = list(stream)
    assert [batch.batch_id for batch in rest] == [1]
    assert {tp: start for tp, (start, _until) in rest[0].ranges.items()} == {
        tp: until for tp, (_start, until) in first.ranges.items()}
    assert rest[0].record_count > second.record_count
    read = values(first) + values(rest[0])
    assert sorted(read) == sorted(f"v{i}" for i in range(75))  # nothing skipped or read twice


def test_processing_time_waits_for_records_and_stop_ends_the_wait(cluster: Cluster) -> None:
    topic = fresh("wait")
    cluster.create_topic(topic, partitions=1, replication_factor=2)
    produce_numbered(cluster, topic, 5)
    stream = stream_dataset(cluster, topic, trigger_interval=0.1)  # from the latest offset
    with stream:
        later = threading.Timer(1.5, produce_numbered, (cluster, topic, 3, 5))
        later.start()
        started = time.monotonic()
        batch = next(stream)
        assert time.monotonic() - started >= 1.0  # it waited for the records to come
        assert sorted(values(batch)) == ["v5", "v6", "v7"] and batch.batch_id == 0
        threading.Timer(1.0, stream.stop).start()
        started = time.monotonic()
        with pytest.raises(StopIteration):
            next(stream)
        assert time.monotonic() - started < 10
        later.join()
    assert stream.checkpoint["offsets"] == {topic: {"0": 8}}


def test_a_checkpoint_of_another_stream_or_a_damaged_one_is_refused(cluster: Cluster) -> None:
    topic = fresh("refuse")
    cluster.create_topic(topic, partitions=1, replication_factor=1)
    produce_numbered(cluster, topic, 3)
    with stream_dataset(cluster, topic, starting_offsets="earliest", trigger="once") as stream:
        stored = next(stream).checkpoint
    with pytest.raises(CheckpointError, match="belongs to a stream of"):
        stream_dataset(cluster, [topic, "other"], checkpoint=stored)
    with pytest.raises(CheckpointError, match="damaged"):
        stream_dataset(cluster, topic, checkpoint={**stored, "offsets": {topic: {"0": "x"}}})
    with pytest.raises(CheckpointError, match="not one"):
        stream_dataset(cluster, topic, checkpoint={"offsets": {}})
    with pytest.raises(ValueError, match="trigger"):
        stream_dataset(cluster, topic, trigger="continuous")


def run_job(cluster: Cluster, topic: str, state: Path, trigger: str,
            kill_at: int | None = None) -> subprocess.CompletedProcess:
    args = [sys.executable, "-m", "tests.support.dataset_stream_driver",
            ray.get_runtime_context().gcs_address, str(cluster.stack.zk_address), cluster.name,
            topic, str(state), trigger, "60"]
    if kill_at is not None:
        args.append(str(kill_at))
    return subprocess.run(args, cwd=REPO, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": str(REPO.parent)})


def test_a_job_killed_mid_batch_three_times_under_a_producer_stores_each_record_once(
        cluster: Cluster, tmp_path: Path) -> None:
    topic = fresh("killed")
    cluster.create_topic(topic, partitions=3, replication_factor=2)
    state = tmp_path / "job"
    acknowledged: list[str] = []
    failed: list[BaseException] = []
    stop = threading.Event()

    def keep_producing() -> None:
        producer = cluster.producer(acks="all")
        i = 0
        while not stop.is_set():
            futures = [(f"v{n}", producer.send(topic, value=f"v{n}".encode()))
                       for n in range(i, i + 20)]
            i += 20
            for value, future in futures:
                try:
                    future.result(timeout=30)
                    acknowledged.append(value)
                except Exception as error:  # counted: a send that failed is not expected
                    failed.append(error)
            time.sleep(0.1)
        producer.close()

    producing = threading.Thread(target=keep_producing)
    producing.start()
    try:
        time.sleep(1.0)
        for kill_at in (2, 4, 6):  # each run resumes at the batch the last one died in
            killed = run_job(cluster, topic, state, "processingTime", kill_at=kill_at)
            assert killed.returncode == -9, killed.stderr[-3000:]
    finally:
        stop.set()
        producing.join()
    finished = run_job(cluster, topic, state, "availableNow")
    assert finished.returncode == 0, finished.stderr[-3000:]

    stored = sorted((json.loads(path.read_text()) for path in state.glob("batch-*.json")),
                    key=lambda document: document["checkpoint"]["batch"])
    assert [doc["checkpoint"]["batch"] for doc in stored] == list(range(1, len(stored) + 1))
    assert len({doc["pid"] for doc in stored}) == 4  # every run stored some batches
    read = [value for doc in stored for value in doc["values"]]
    assert not failed
    assert len(read) == len(set(read)), "a record was stored twice"
    assert sorted(read) == sorted(acknowledged), "a record was skipped"


def test_each_block_is_made_on_the_node_that_leads_its_partition(
        zookeeper: EmbeddedZooKeeper, tmp_path: Path) -> None:
    """On a Ray of four nodes (a process of its own: tests/support/leader_node_reads.py), three
    brokers on three nodes; each block of a batch is in the object store of the node whose
    broker leads the partition it holds, and nowhere else, before anything read it; and the
    training example's workers run each on a node whose partitions it reads."""
    chroot = make_chroot(zookeeper, f"leader-node-reads-{os.getpid()}-{time.time_ns()}")
    result = tmp_path / "result.json"
    env = {key: value for key, value in os.environ.items() if key != "RAY_ADDRESS"}
    env["PYTHONPATH"] = str(REPO)
    run = run_marked([sys.executable, "-m", "tests.support.leader_node_reads", str(chroot),
                      str(tmp_path / "data"), str(result)], env, tmp_path / "output.txt",
                     timeout_s=300)
    try:
        output = (tmp_path / "output.txt").read_text(errors="replace")
        assert run.returncode == 0, output[-4000:]
        assert not left_behind(run.marker), "the Ray of four nodes was not stopped"
    finally:
        kill_marked(run.marker)
    found = json.loads(result.read_text())
    assert len(found["nodes"]) == 4
    assert len(set(found["broker_nodes"].values())) == 3, "one broker per node"
    blocks = found["blocks"]
    assert sum(block["rows"] for block in blocks) == 600
    assert sorted(p for block in blocks for p in block["partitions"]) == [0, 1, 2]
    for block in blocks:
        assert block["held_on"] == block["leader_nodes"], block
    pool = found["pool"]
    assert sorted(p for worker in pool for p in worker["partitions"]) == [0, 1, 2]
    for worker in pool:  # each reads what is led on its own node
        assert worker["leader_nodes"] == [worker["node"]], worker
    assert found["learned"] == 600


def test_a_training_pool_killed_midway_resumes_from_its_checkpoints_exactly(
        cluster: Cluster, tmp_path: Path) -> None:
    """pipelines/examples/topic_training.py: its workers killed while training, a new pool
    started from their checkpoints learns every record once."""
    topic = fresh("train")
    cluster.create_topic(topic, partitions=4, replication_factor=2)
    produced = 20_000
    produce_numbered(cluster, topic, produced)
    directory = tmp_path / "training"
    workers = start_workers(cluster, topic, directory)
    running = [worker.train.remote(50) for worker in workers]

    def learned() -> int:
        stored = [json.loads(path.read_text()) for path in directory.glob("worker-*.json")]
        return sum(sum(document["model"].values()) for document in stored)

    assert eventually(lambda: learned() > 0, 60, interval_s=0.1), "the pool never trained"
    for worker in workers:
        ray.kill(worker)  # mid-batch or between two: wherever it was
    with pytest.raises(ray.exceptions.RayActorError):
        ray.get(running)
    assert learned() < produced, "the kill came while the pool was training"
    produce_numbered(cluster, topic, 500, start=produced)  # and more records come meanwhile
    model = train(cluster, topic, directory)
    assert model == Counter(f"v{i}" for i in range(produced + 500))  # each record once


def test_the_training_plan_gives_each_node_the_partitions_it_leads() -> None:
    assert plan_workers({0: "b", 1: "a", 2: "b", 3: "c", 4: "a"}) == [[0, 2], [1, 4], [3]]
    assert plan_workers({}) == []
