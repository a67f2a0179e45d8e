"""A client of the test bed's cluster, run as a Ray driver on the bed's client node:

    python -m tests.harness.bed_client --topic T --out DIR [--partitions 6] [--rate 300]
                                       [--consumers 2]

It creates the topic if it is missing (replication factor 3, min.insync.replicas 2), then writes
numbered records with an idempotent acks=all producer, spread over every partition at a steady
rate, until the file DIR/stop appears. With `--consumers`, members of one consumer group read
the topic meanwhile, each in a thread of its own, and commit what they read after every poll
from a second thread: a commit waiting on a coordinator that went away (up to its timeout)
holds up that member's commits, not its reading, as with Kafka's automatic commits.
Once stopped, the client waits for every send's outcome, reads the whole log back, lets the
group read to its end, and writes DIR/history.json: when each send was due and to which
partition, every acknowledgement with the time it came, every failed send (its partition and
error), every send still without an outcome after the wait (unresolved), every poll, rebalance,
revocation and commit of the group, and the final log.

While it runs, DIR/progress.json, rewritten every second, says how many acknowledgements came
per partition so far, and when the last one did, so a test can wait for writes to resume; and
DIR/leaders.json, every two seconds, each partition's leader and ISR and each broker's host, so
a nemesis can aim at a leader. Times are wall-clock seconds: the test reading them runs in
another process.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import json
import logging
import os
import threading
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

from rafka import Cluster
from rafka.coordination.errors import TopicExistsError
from rafka.coordination.security import load_credentials_file

# Sends not yet answered, per partition: a partition whose leader is silent stops taking new
# sends at this many, and the others go on (the sends it skips are never made).
RECORDS_IN_FLIGHT_PER_PARTITION = 2_000
GROUP = "bed-readers"
# The error of a send that raised before its record was queued: it is certainly not written.
NOT_SENT = "not-sent:"
# How long the group may take, once writes stopped, to read everything acknowledged.
CATCH_UP_S = 180


def _write_atomically(path: Path, data: Any) -> None:
    partial = path.with_suffix(".partial")
    partial.write_text(json.dumps(data))
    os.replace(partial, path)


def _ensure_topic(cluster: Cluster, topic: str, partitions: int) -> None:
    with contextlib.suppress(TopicExistsError):
        cluster.create_topic(topic, partitions=partitions, replication_factor=3,
                             config={"min.insync.replicas": 2})


def _encoded(value: bytes) -> str:
    return base64.b64encode(value).decode()


class GroupReader:
    """One member of the group, polling in a thread until `stop` is set. What it saw is kept
    in the shape of the checker's Poll, Rebalance and Commit (tests/support/checker.py)."""

    def __init__(self, cluster: Cluster, topic: str, name: str, seen: set[tuple[int, int]],
                 lock: threading.Lock, stop: threading.Event) -> None:
        self.name, self.seen, self.lock, self.stop = name, seen, lock, stop
        self.polls: list[tuple[str, float, list[tuple[int, int, str]]]] = []
        self.rebalances: list[tuple[str, float, float, list[int]]] = []
        self.revocations: list[tuple[str, float, list[int]]] = []
        self.commits: list[tuple[str, float | None, int, int, float]] = []
        self.errors: dict[str, int] = defaultdict(int)
        self._poll_started = 0.0
        # The positions to commit next (the newest replaces any not yet taken), and the
        # thread that commits them.
        self._to_commit: dict | None = None
        self._commit_ready = threading.Condition()
        self.committer = threading.Thread(target=self._commit_forever, name=f"{name}-commits",
                                          daemon=True)
        self.consumer = cluster.consumer(
            [topic], group=GROUP, enable_auto_commit=False, auto_offset_reset="earliest",
            max_poll_records=500, on_partitions_assigned=self._gained,
            on_partitions_revoked=self._revoked)
        self.thread = threading.Thread(target=self._run, name=name, daemon=True)

    def _gained(self, partitions: set) -> None:
        # Called inside poll() once the committed offsets of what it claimed are known.
        self.rebalances.append((self.name, self._poll_started, time.time(),
                                sorted(tp.partition for tp in partitions)))

    def _revoked(self, partitions: set) -> None:
        # Called inside poll() before the member lets go of partitions moving away, and at
        # the end for what it holds when it closes.
        self.revocations.append((self.name, time.time(),
                                 sorted(tp.partition for tp in partitions)))

    def _run(self) -> None:
        try:
            while not self.stop.is_set():
                self._poll_started = time.time()
                try:
                    records = self.consumer.poll(200)
                except Exception as error:  # a poll may fail during a fault: poll again
                    self.errors[type(error).__name__] += 1
                    time.sleep(0.2)
                    continue
                read = [(r.partition, r.offset, _encoded(r.value)) for r in records]
                self.polls.append((self.name, time.time(), read))
                if read:
                    with self.lock:
                        self.seen.update((p, o) for p, o, _ in read)
                    self._hand_to_committer()
        finally:
            with self._commit_ready:
                self._commit_ready.notify_all()
            self.committer.join(timeout=30)
            self._revoked(self.consumer.assignment())
            with contextlib.suppress(Exception):
                self.consumer.close(commit=False)

    def _hand_to_committer(self) -> None:
        try:
            positions = {tp: self.consumer.position(*tp) for tp in self.consumer.assignment()}
        except Exception as error:
            self.errors[type(error).__name__] += 1
            return
        with self._commit_ready:
            self._to_commit = positions
            self._commit_ready.notify_all()

    def _commit_forever(self) -> None:
        while True:
            with self._commit_ready:
                while self._to_commit is None and not self.stop.is_set():
                    self._commit_ready.wait(0.5)
                positions, self._to_commit = self._to_commit, None
            if positions is None:
                return  # stopped
            self._commit(positions)

    def _commit(self, positions: dict) -> None:
        """Commit these positions: when asked, and when answered (never, if it failed: it
        may or may not be stored)."""
        asked = time.time()
        try:
            self.consumer.commit(positions)
            answered: float | None = time.time()
        except Exception as error:
            self.errors[type(error).__name__] += 1
            answered = None
        self.commits += [(self.name, answered, tp.partition, offset, asked)
                         for tp, offset in positions.items()]


def _watch_leaders(cluster: Cluster, topic: str, out: Path, stop: threading.Event) -> None:
    """Every two seconds, DIR/leaders.json; each change of a leader or ISR is also appended to
    DIR/leaders.jsonl, a timeline for whoever reads a failure."""
    last = None
    while not stop.wait(2):
        try:
            described = cluster.describe_topic(topic)["partitions"]
            brokers = {b["id"]: b["host"] for b in cluster.brokers()}
        except Exception:  # ZooKeeper out of reach during a fault: the file stays as it was
            continue
        partitions = {p: {"leader": s["leader"], "isr": s["isr"], "replicas": s["replicas"]}
                      for p, s in enumerate(described)}
        now = time.time()
        _write_atomically(out / "leaders.json",
                          {"at": now, "brokers": brokers, "partitions": partitions})
        if (brokers, partitions) != last:
            last = (brokers, partitions)
            with open(out / "leaders.jsonl", "a") as timeline:
                timeline.write(json.dumps({"at": now, "brokers": brokers,
                                           "partitions": partitions}) + "\n")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--topic", required=True)
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--partitions", type=int, default=6)
    parser.add_argument("--rate", type=float, default=300.0, help="records per second")
    parser.add_argument("--consumers", type=int, default=0, help="members of a group")
    args = parser.parse_args()
    # The clients' retries and refreshes, in the client's log, for whoever reads a failure.
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    logging.getLogger("rafka.actors.clients.producer").setLevel(logging.DEBUG)
    out: Path = args.out
    credentials = load_credentials_file(Path.home() / ".rafka" / "zookeeper-credentials")
    cluster = Cluster.connect(os.environ["RAFKA_ZK"], "rafka", ray_address="auto",
                              zk_credentials=credentials)
    _ensure_topic(cluster, args.topic, args.partitions)
    watching = threading.Event()
    watcher = threading.Thread(target=_watch_leaders, args=(cluster, args.topic, out, watching),
                               daemon=True)
    watcher.start()
    seen: set[tuple[int, int]] = set()
    seen_lock = threading.Lock()
    reading = threading.Event()
    readers = [GroupReader(cluster, args.topic, f"reader-{i}", seen, seen_lock, reading)
               for i in range(args.consumers)]
    for reader in readers:
        reader.thread.start()
        reader.committer.start()
    producer = cluster.producer(acks="all", enable_idempotence=True, linger_ms=5,
                                retry_backoff_ms=100, delivery_timeout_ms=120_000)
    due: list[tuple[float, int, str]] = []
    acks: list[tuple[str, int, int, float]] = []
    failed: list[tuple[str, int, str, float]] = []
    unresolved: list[tuple[str, int, float]] = []
    pending: dict[str, tuple[int, Any]] = {}
    pending_per_partition: dict[int, int] = defaultdict(int)
    ack_counts: dict[int, int] = defaultdict(int)
    last_ack: dict[int, float] = {}
    started = time.time()
    sequence = 0
    last_progress = 0.0

    def settle(wait: bool) -> None:
        for value, (partition, future) in list(pending.items()):
            if not wait and not future.done():
                continue
            del pending[value]
            pending_per_partition[partition] -= 1
            try:
                meta = future.result(150)
            except Exception as error:
                if future.done():
                    failed.append((value, partition, type(error).__name__, time.time()))
                else:  # no outcome even after the wait: neither acknowledged nor failed
                    unresolved.append((value, partition, time.time()))
                continue
            now = time.time()
            acks.append((value, meta.partition, meta.offset, now))
            ack_counts[meta.partition] += 1
            last_ack[meta.partition] = now

    ready = out / "ready"
    ready.touch()
    while not (out / "stop").exists():
        # Sends fall due on a fixed schedule; a send made late still counts from when it was due.
        due_at = started + sequence / args.rate
        now = time.time()
        if due_at > now:
            time.sleep(min(due_at - now, 0.05))
        if due_at <= time.time():
            partition = sequence % args.partitions
            if pending_per_partition[partition] < RECORDS_IN_FLIGHT_PER_PARTITION:
                value = f"bed-{sequence}"
                due.append((due_at, partition, value))
                try:
                    future = producer.send(args.topic, value=value.encode(),
                                           partition=partition)
                except Exception as error:  # no metadata within max.block.ms: never sent
                    failed.append((value, partition, f"{NOT_SENT}{type(error).__name__}",
                                   time.time()))
                else:
                    pending[value] = (partition, future)
                    pending_per_partition[partition] += 1
            sequence += 1
        settle(wait=False)
        if time.time() - last_progress >= 1:
            last_progress = time.time()
            with seen_lock:
                read = len(seen)
            _write_atomically(out / "progress.json", {
                "sent": sequence, "acknowledged": dict(ack_counts), "last_ack": last_ack,
                "failed": len(failed), "read": read})
    settle(wait=True)
    producer.close()
    watching.set()
    final_log = _read_back(cluster, args.topic, args.partitions)
    in_log = {(p, offset) for p, records in final_log.items() for offset, _ in records}
    deadline = time.monotonic() + CATCH_UP_S
    while readers and time.monotonic() < deadline:
        with seen_lock:
            if in_log <= seen:
                break
        time.sleep(0.5)
    reading.set()
    for reader in readers:
        reader.thread.join(60)
    _write_atomically(out / "history.json", {
        "due": due, "acks": acks, "failed": failed, "unresolved": unresolved,
        "final_log": final_log,
        "polls": [poll for reader in readers for poll in reader.polls],
        "rebalances": [event for reader in readers for event in reader.rebalances],
        "revocations": [event for reader in readers for event in reader.revocations],
        "commits": [commit for reader in readers for commit in reader.commits],
        "consumer_errors": {reader.name: dict(reader.errors) for reader in readers}})
    cluster.close()


def _read_back(cluster: Cluster, topic: str, partitions: int
               ) -> dict[int, list[tuple[int, str]]]:
    """Every record below each partition's high watermark, read after the writes stopped."""
    consumer = cluster.consumer([topic], auto_offset_reset="earliest", max_poll_records=5000)
    ends = consumer.end_offsets([(topic, p) for p in range(partitions)])
    final_log: dict[int, list[tuple[int, str]]] = {p: [] for p in range(partitions)}
    deadline = time.monotonic() + 120
    while any(consumer.position(*tp) < end for tp, end in ends.items()):
        for record in consumer.poll(500):
            final_log[record.partition].append((record.offset, _encoded(record.value)))
        if time.monotonic() > deadline:
            break
    consumer.close()
    return final_log


if __name__ == "__main__":
    main()
