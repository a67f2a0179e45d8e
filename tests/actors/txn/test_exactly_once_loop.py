"""Exactly-once in a consume-transform-produce loop, tested by killing it: the loop (a Ray actor
with a read_committed consumer and a transactional producer, committing its input offsets in
its transactions) is SIGKILLed between its sends and its commit, between sending its offsets
and committing, and at random moments, and started again each time under the same
transactional id. Each input record's output is read by read_committed consumers exactly
once; the aborted attempts are in the log all the same (read_uncommitted sees them). The random
moments are new every run, from a seed it prints (RAFKA_SEED replays them)."""

from __future__ import annotations

import collections
import os
import random
import signal
import threading
from typing import Any

import pytest
import ray

from rafka import Cluster
from rafka.actors.clients.consumer import Consumer
from rafka.actors.clients.group_consumer import fetch_committed
from rafka.actors.clients.producer import Producer
from tests.support.cluster import read_values
from tests.support.seeds import run_seed
from tests.support.waiting import wait_until

PARTITIONS = 3
INPUT = 600


@ray.remote(num_cpus=0, max_restarts=0)
class TransformLoop:
    """Reads `source` from the group's committed offsets, writes each record's output to
    `sink` and commits the offsets in the same transaction."""

    def __init__(self, namespace: str, source: str, sink: str, group: str,
                 transactional_id: str) -> None:
        self.source, self.sink, self.group = source, sink, group
        self.producer = Producer(namespace, transactional_id=transactional_id)
        # Fences the instance killed before, and aborts what it left open.
        self.producer.init_transactions()
        self.consumer = Consumer(namespace, isolation_level="read_committed")
        partitions = [(source, p) for p in range(PARTITIONS)]
        self.consumer.assign(partitions)
        for tp, offset in fetch_committed(self.consumer.metadata, group, partitions,
                                          30).items():
            self.consumer.seek(tp.topic, tp.partition, offset)

    def pid(self) -> int:
        return os.getpid()

    def step(self, max_records: int, die: str | None = None) -> int:
        """One transaction over what one poll brings; `die` kills this process at that point."""
        records = self.consumer.poll(500, max_records=max_records)
        if not records:
            return 0
        self.producer.begin_transaction()
        for record in records:
            self.producer.send(self.sink, b"out-" + record.value, partition=record.partition)
        if die == "after_sends":
            self.producer.flush()  # the outputs are in the log, uncommitted
            os.kill(os.getpid(), signal.SIGKILL)
        self.producer.send_offsets_to_transaction(
            {(r.topic, r.partition): r.offset + 1 for r in records}, self.group)
        if die == "after_offsets":
            os.kill(os.getpid(), signal.SIGKILL)
        self.producer.commit_transaction()
        return len(records)


def run_until_killed(loop: Any, die: str | None, kill_after_s: float | None) -> None:
    """Steps of the loop until it dies: by its own hand at `die`, or by a SIGKILL from here
    after `kill_after_s`."""
    if kill_after_s is not None:
        pid = ray.get(loop.pid.remote(), timeout=60)
        threading.Timer(kill_after_s, os.kill, (pid, signal.SIGKILL)).start()
    with pytest.raises(ray.exceptions.RayActorError):
        for step in range(200):
            ray.get(loop.step.remote(25, die if step == 2 else None), timeout=120)
        raise AssertionError("the loop was not killed")


def test_each_input_records_output_is_read_once_whatever_kills_the_loop(
    cluster: Cluster,
) -> None:
    source, sink = "clicks", "enriched-clicks"
    for topic in (source, sink):
        cluster.create_topic(topic, partitions=PARTITIONS, replication_factor=3,
                             config={"min.insync.replicas": 2})
    producer = cluster.producer()
    for i in range(INPUT):
        producer.send(source, b"click-%d" % i, partition=i % PARTITIONS)
    producer.close()
    # The group starts at the beginning (this also creates __consumer_offsets).
    cluster.commit_offsets("enricher", {(source, p): 0 for p in range(PARTITIONS)})
    args = (cluster.namespace, source, sink, "enricher", "enricher-1")
    chance = random.Random(run_seed("the loop's kill moments"))
    for die in ("after_sends", "after_offsets", "after_sends", None, None):
        kill_after_s = chance.uniform(0.3, 1.5) if die is None else None
        run_until_killed(TransformLoop.remote(*args), die, kill_after_s)
    last = TransformLoop.remote(*args)
    idle = 0
    while idle < 3:
        idle = idle + 1 if ray.get(last.step.remote(100), timeout=120) == 0 else 0
    ray.kill(last)

    expected = sorted(b"out-click-%d" % i for i in range(INPUT))
    committed = read_values(cluster, sink, "read_committed", INPUT)
    assert sorted(committed) == expected, collections.Counter(committed).most_common(3)
    # The killed transactions' outputs are in the log, aborted: the kills hit mid-transaction.
    everything = read_values(cluster, sink, "read_uncommitted", INPUT + 25)
    assert len(everything) > INPUT
    # The last commit's markers may still be on their way (EndTxn does not wait for them).
    wait_until(lambda: cluster.committed_offsets(
        "enricher", [(source, p) for p in range(PARTITIONS)]) == {
        (source, p): INPUT // PARTITIONS for p in range(PARTITIONS)}, 30,
        "the last transaction's offsets")
