"""What a member joining costs a group reading under load: Kafka 4's consumer group protocol
(KIP-848) against the classic one, eager and cooperative.

    python bench/consumer_groups.py [--partitions 12] [--rate 300] [--rounds 1]

One cluster (three brokers, embedded ZooKeeper, local Ray) and, per run, a topic of
``--partitions`` partitions and a group of confluent-kafka consumers, each a process of its own
(``tests/support/group_member.py``), with one of three settings:

* ``consumer``: ``group.protocol=consumer``, the coordinator's ``uniform`` assignor;
* ``classic_cooperative``: the classic protocol with ``cooperative-sticky`` (incremental);
* ``classic_eager``: the classic protocol with librdkafka's default (``range,roundrobin``),
  where every member gives up every partition at each rebalance.

Every member heartbeats every 500 ms (the broker's setting for the new protocol, the client's
for the classic one).

A producer sends a record every 1/``--rate`` s, each stamped with when it was due. Three members
join and settle; then a fourth joins, and the run goes on until every member owns its share and
for ``--after`` seconds more. Each run measures:

* ``rebalance_s``: from the fourth member's start until every member owns its share;
* ``unmoved_gap_s``: over the partitions that kept their owner, the longest time between two
  records read of one partition, from the join to the end (the records come every
  ``partitions / rate`` s, so a partition never stopped shows about that);
* ``p99_ms``, ``max_ms``: the latency of the records due from the join to the end, from when
  each was due to when a member read it (a record read twice counts once, its first read).

Settings run in ABBA order over ``--rounds``; prints one JSON object with every run and, per
setting, the median over rounds.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path
from tempfile import TemporaryDirectory
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import confluent_kafka

from bench.common import abba_runs, with_medians
from rafka import Cluster
from tests.support.group_member import logged_events, owned_partitions

REPO = Path(__file__).resolve().parent.parent

# Every member heartbeats each 500 ms: the broker's setting for the new protocol, the
# client's for the classic one (whose members hear of a rebalance on a heartbeat).
HEARTBEAT_MS = 500
Setting = tuple[str, dict[str, str]]
SETTINGS: dict[str, Setting] = {
    "consumer": ("consumer", {}),
    "classic_cooperative": ("classic", {"partition.assignment.strategy": "cooperative-sticky",
                                        "heartbeat.interval.ms": str(HEARTBEAT_MS)}),
    "classic_eager": ("classic", {"heartbeat.interval.ms": str(HEARTBEAT_MS)}),
}
MEMBERS_BEFORE = 3


class Member:
    def __init__(self, cluster: Cluster, group: str, topic: str, setting: Setting,
                 log: Path) -> None:
        protocol, extra = setting
        self.log = log
        self.process = subprocess.Popen(
            [sys.executable, "-m", "tests.support.group_member", cluster.bootstrap_servers(),
             group, topic, protocol, str(log), json.dumps(extra)],
            stdin=subprocess.PIPE, cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)})

    def events(self) -> list[dict[str, Any]]:
        return logged_events(self.log)

    def owned(self) -> set[int]:
        return owned_partitions(self.events())

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait(10)


def settled(members: list[Member], partitions: int) -> bool:
    shares = [member.owned() for member in members]
    quota = partitions // len(members)
    return (sorted(len(share) for share in shares)[0] >= quota
            and sum(len(share) for share in shares) == partitions
            and set().union(*shares) == set(range(partitions)))


def wait(condition: Any, timeout_s: float, what: str) -> float:
    deadline = time.time() + timeout_s
    while not condition():
        if time.time() > deadline:
            raise TimeoutError(what)
        time.sleep(0.05)
    return time.time()


def one_run(cluster: Cluster, args: argparse.Namespace, setting: Setting) -> dict[str, Any]:
    topic, group = f"join-{uuid.uuid4().hex[:8]}", f"bench-{uuid.uuid4().hex[:8]}"
    cluster.create_topic(topic, partitions=args.partitions, replication_factor=1)
    producer = confluent_kafka.Producer({"bootstrap.servers": cluster.bootstrap_servers(),
                                         "linger.ms": 0})
    running = threading.Event()
    running.set()
    sent_at: list[float] = []

    def produce() -> None:
        started = time.time()
        while running.is_set():
            sent = len(sent_at)
            due = started + sent / args.rate
            if due > time.time():
                time.sleep(min(due - time.time(), 0.01))
                continue
            producer.produce(topic, value=repr(due).encode(), partition=sent % args.partitions)
            producer.poll(0)
            sent_at.append(due)

    thread = threading.Thread(target=produce, daemon=True)
    thread.start()
    members: list[Member] = []
    with TemporaryDirectory() as logs:
        try:
            for index in range(MEMBERS_BEFORE):
                members.append(Member(cluster, group, topic, setting, Path(logs) / f"{index}"))
            wait(lambda: settled(members, args.partitions), 120, "three members settle")
            time.sleep(2)
            before = [member.owned() for member in members]
            joined = time.time()
            members.append(Member(cluster, group, topic, setting, Path(logs) / "joiner"))
            stable = wait(lambda: settled(members, args.partitions), 120, "four settle")
            time.sleep(args.after)
            end = time.time()
            running.clear()
            thread.join(10)
            producer.flush(30)
            figures = _figures(members, before, joined, stable, end, args)
            figures["records_due"] = sum(joined <= due <= end for due in sent_at)
            return figures
        finally:
            running.clear()
            for member in members:
                member.stop()


def _figures(members: list[Member], before: list[set[int]], joined: float, stable: float,
             end: float, args: argparse.Namespace) -> dict[str, Any]:
    unmoved = set().union(*(share & member.owned() for share, member in zip(
        before, members, strict=False)))
    reads: dict[int, list[float]] = {}
    first_read: dict[float, float] = {}
    for member in members:
        for event in member.events():
            if event["event"] == "record":
                due = float(event["value"])
                reads.setdefault(event["partition"], []).append(event["time"])
                if due >= joined and (due not in first_read or event["time"] < first_read[due]):
                    first_read[due] = event["time"]
    gaps = []
    for partition in unmoved:
        times = sorted(t for t in reads.get(partition, []) if t >= joined)
        bounds = [joined, *times]
        gaps.append(max(b - a for a, b in itertools.pairwise(bounds)))
    latencies = sorted(read - due for due, read in first_read.items() if due <= end)
    return {"rebalance_s": round(stable - joined, 2),
            "unmoved_partitions": len(unmoved),
            "unmoved_gap_s": round(max(gaps, default=0.0), 2),
            "p99_ms": round(1000 * latencies[int(0.99 * (len(latencies) - 1))], 1),
            "max_ms": round(1000 * latencies[-1], 1),
            "records": len(latencies)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--partitions", type=int, default=12)
    parser.add_argument("--rate", type=int, default=300, help="records a second")
    parser.add_argument("--after", type=float, default=5.0,
                        help="seconds measured after the group settles")
    parser.add_argument("--rounds", type=int, default=1)
    args = parser.parse_args()
    cluster = Cluster.start(
        brokers=3, name=f"group-bench-{os.getpid()}", kafka_listeners="PLAINTEXT://127.0.0.1:0",
        broker_config={"group.consumer.heartbeat.interval.ms": HEARTBEAT_MS,
                       "group.initial.rebalance.delay.ms": 500})
    try:
        runs = abba_runs(args.rounds, SETTINGS, lambda setting: one_run(cluster, args, setting))
    finally:
        cluster.shutdown()
    print(json.dumps(with_medians(args, runs), indent=2))


if __name__ == "__main__":
    main()
