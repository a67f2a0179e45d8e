"""`write_dataset`: a Ray Dataset into a topic, each row once, read back as a Kafka consumer
and `read_dataset` would; a write run again under its id stores nothing twice."""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from collections import Counter
from itertools import pairwise

import psutil
import pyarrow as pa
import pyarrow.compute as pc
import pytest
import ray

from rafka import Cluster, write_dataset
from rafka.actors.clients.partitioner import default_partition
from rafka.actors.errors import UnknownTopicError
from rafka.pipelines.sequenced_sink import NonDeterministicInputError
from rafka.pipelines.topics import read_dataset
from tests.support.cluster import fresh, module_cluster, stored_count, stored_records
from tests.support.waiting import wait_until

cluster = module_cluster("dataset-sink", 2)


def numbers(count: int, blocks: int, *, keyed: bool = False) -> ray.data.Dataset:
    """Values "0".."count-1" in `blocks` blocks (tables put in the object store: no read
    task), keys "k<value>" if `keyed`."""
    bounds = [count * i // blocks for i in range(blocks + 1)]
    tables = []
    for start, stop in pairwise(bounds):
        values = [str(i).encode() for i in range(start, stop)]
        columns = {"value": pa.array(values, pa.binary())}
        if keyed:
            columns["key"] = pa.array([b"k" + v for v in values], pa.binary())
        tables.append(pa.table(columns))
    return ray.data.from_arrow(tables)


def running_write_tasks() -> list[int]:
    """This test session's Ray workers running a write task now (Ray titles them so)."""
    me = os.getpid()
    found = []
    for process in psutil.process_iter(["cmdline"]):
        with contextlib.suppress(psutil.Error):
            if (process.info["cmdline"] or [""])[0] == "ray::Write" and me in {
                    parent.pid for parent in process.parents()}:
                found.append(process.pid)
    return found


def stored_values(cluster: Cluster, topic: str, expected: int) -> Counter[bytes]:
    return Counter(record.value for record in stored_records(cluster, topic, expected))


def test_each_row_is_stored_once_where_its_key_goes(cluster: Cluster) -> None:
    topic = fresh("keyed")
    cluster.create_topic(topic, partitions=3, replication_factor=2)
    written = write_dataset(numbers(6000, 4, keyed=True), cluster, topic, key_col="key")
    assert sum(written.values()) == 6000
    records = stored_records(cluster, topic, 6000)
    assert Counter(r.value for r in records) == Counter(str(i).encode() for i in range(6000))
    assert all(r.partition == default_partition(r.key, 3) for r in records)
    assert written == dict(sorted(Counter(r.partition for r in records).items()))


def test_a_write_run_again_under_its_id_stores_nothing_twice(cluster: Cluster) -> None:
    topic = fresh("again")
    cluster.create_topic(topic, partitions=2, replication_factor=2)
    dataset = numbers(5000, 5)
    first = write_dataset(dataset, cluster, topic, write_id="nightly-1")
    second = write_dataset(dataset, cluster, topic, write_id="nightly-1")
    assert first == second and sum(first.values()) == 5000
    assert stored_values(cluster, topic, 5000) == Counter(str(i).encode() for i in range(5000))
    # Another write id is another write: its rows are stored again.
    write_dataset(dataset, cluster, topic, write_id="nightly-2")
    assert set(stored_values(cluster, topic, 10_000).values()) == {2}


def test_a_rerun_with_fewer_rows_than_its_first_run_is_refused(cluster: Cluster) -> None:
    topic = fresh("fewer")
    cluster.create_topic(topic, partitions=1, replication_factor=2)
    write_dataset(numbers(300, 3), cluster, topic, write_id="shrinking")
    with pytest.raises(NonDeterministicInputError, match="write task"):
        write_dataset(numbers(150, 3), cluster, topic, write_id="shrinking")
    assert stored_count(cluster, topic, 1) == 300


def test_headers_and_explicit_partitions_round_trip_through_read_dataset(
        cluster: Cluster) -> None:
    topic = fresh("columns")
    cluster.create_topic(topic, partitions=3, replication_factor=2)
    headers_type = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))
    table = pa.table({
        "value": pa.array([f"v{i}" for i in range(30)], pa.string()),
        "partition": pa.array([i % 3 for i in range(30)], pa.int32()),
        "headers": pa.array([[{"key": "n", "value": str(i).encode()}] for i in range(30)],
                            headers_type),
    })
    write_dataset(ray.data.from_arrow(table), cluster, topic, partition_col="partition",
                  headers_col="headers")
    back = read_dataset(cluster, topic, include_headers=True).take_all()
    assert sorted((r["partition"], r["value"]) for r in back) == sorted(
        (i % 3, f"v{i}".encode()) for i in range(30))
    assert sorted(r["headers"][0]["value"] for r in back) == sorted(
        str(i).encode() for i in range(30))


def test_wrong_columns_and_unknown_topics_are_refused_before_anything_is_written(
        cluster: Cluster) -> None:
    topic = fresh("typed")
    cluster.create_topic(topic, partitions=1, replication_factor=2)
    numbers_as_ints = ray.data.from_arrow(pa.table({"value": pa.array([1, 2, 3])}))
    with pytest.raises(TypeError, match="must be binary or string"):
        write_dataset(numbers_as_ints, cluster, topic)
    with pytest.raises(ValueError, match=r"no column \['key'\]"):
        write_dataset(numbers(3, 1), cluster, topic, key_col="key")
    with pytest.raises(UnknownTopicError, match="create it first"):
        write_dataset(numbers(3, 1), cluster, fresh("missing"))
    assert stored_count(cluster, topic, 1) == 0


def test_a_write_whose_worker_is_killed_midway_stores_each_of_a_million_rows_once(
        cluster: Cluster) -> None:
    """SIGKILL the worker of a write task while it writes: Ray runs the task again, and the
    attempt adds only what the killed one did not store; the write run again under its id adds
    nothing."""
    topic = fresh("killed")
    cluster.create_topic(topic, partitions=2, replication_factor=2)
    rows = 1_000_000
    dataset = numbers(rows, 40)
    outcome: dict = {}

    def write() -> None:
        try:
            outcome["written"] = write_dataset(dataset, cluster, topic, write_id="killed",
                                               concurrency=1)
        except BaseException as error:  # the test thread reports it
            outcome["error"] = error

    writer = threading.Thread(target=write)
    writer.start()
    killed = []
    watcher = cluster.consumer()
    try:
        def midway() -> bool:
            stored = sum(watcher.end_offsets([(topic, 0), (topic, 1)]).values())
            if not 0 < stored < rows:
                return False
            for pid in running_write_tasks():
                os.kill(pid, signal.SIGKILL)
                killed.append((pid, stored))
            return bool(killed)

        wait_until(midway, 120, "a write task's worker killed while it writes", interval_s=0.02)
    finally:
        watcher.close()
        writer.join(180)
    assert "error" not in outcome, outcome.get("error")
    assert sum(outcome["written"].values()) == rows
    assert stored_count(cluster, topic, 2) == rows, f"killed {killed}"
    values = pa.concat_tables(ray.get(read_dataset(cluster, topic).to_arrow_refs()))["value"]
    assert len(values) == rows and pc.count_distinct(values).as_py() == rows
    assert write_dataset(dataset, cluster, topic, write_id="killed") == outcome["written"]
    assert stored_count(cluster, topic, 2) == rows
