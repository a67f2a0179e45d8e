"""A client of the test bed's cluster, run as a Ray driver on the bed's client node:

    python -m tests.harness.bed_client --topic T --out DIR [--partitions 6] [--rate 300]

It creates the topic if it is missing (replication factor 3, min.insync.replicas 2), then writes
numbered records with an idempotent acks=all producer, spread over every partition at a steady
rate, until the file DIR/stop appears. It then waits for every send's outcome, reads the whole
log back, and writes DIR/history.json: when each send was due and to which partition, every
acknowledgement with the time it came, every failed send (its partition and error), and the
final log. DIR/progress.json,
rewritten every second, says how many acknowledgements came per partition so far, and when the
last one did, so a test can wait for writes to resume. Times are wall-clock seconds: the test
reading them runs in another process.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import json
import os
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

from rafka import Cluster
from rafka.coordination.errors import TopicExistsError
from rafka.coordination.security import load_credentials_file

RECORDS_IN_FLIGHT = 5_000


def _write_atomically(path: Path, data: Any) -> None:
    partial = path.with_suffix(".partial")
    partial.write_text(json.dumps(data))
    os.replace(partial, path)


def _ensure_topic(cluster: Cluster, topic: str, partitions: int) -> None:
    with contextlib.suppress(TopicExistsError):
        cluster.create_topic(topic, partitions=partitions, replication_factor=3,
                             config={"min.insync.replicas": 2})


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--topic", required=True)
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--partitions", type=int, default=6)
    parser.add_argument("--rate", type=float, default=300.0, help="records per second")
    args = parser.parse_args()
    out: Path = args.out
    credentials = load_credentials_file(Path.home() / ".rafka" / "zookeeper-credentials")
    cluster = Cluster.connect(os.environ["RAFKA_ZK"], "rafka", ray_address="auto",
                              zk_credentials=credentials)
    _ensure_topic(cluster, args.topic, args.partitions)
    producer = cluster.producer(acks="all", enable_idempotence=True, linger_ms=5,
                                retry_backoff_ms=100, delivery_timeout_ms=120_000)
    due: list[tuple[float, int, str]] = []
    acks: list[tuple[str, int, int, float]] = []
    failed: list[tuple[str, int, str, float]] = []
    pending: dict[str, tuple[int, Any]] = {}
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
            try:
                meta = future.result(150)
            except Exception as error:
                failed.append((value, partition, type(error).__name__, time.time()))
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
        if len(pending) < RECORDS_IN_FLIGHT and due_at <= time.time():
            partition = sequence % args.partitions
            value = f"bed-{sequence}"
            due.append((due_at, partition, value))
            pending[value] = (partition, producer.send(args.topic, value=value.encode(),
                                                       partition=partition))
            sequence += 1
        settle(wait=False)
        if time.time() - last_progress >= 1:
            last_progress = time.time()
            _write_atomically(out / "progress.json", {
                "sent": sequence, "acknowledged": dict(ack_counts), "last_ack": last_ack,
                "failed": len(failed)})
    settle(wait=True)
    producer.close()
    consumer = cluster.consumer([args.topic], auto_offset_reset="earliest",
                                max_poll_records=5000)
    ends = consumer.end_offsets([(args.topic, p) for p in range(args.partitions)])
    final_log: dict[int, list[tuple[int, str]]] = {p: [] for p in range(args.partitions)}
    deadline = time.monotonic() + 120
    while any(consumer.position(*tp) < end for tp, end in ends.items()):
        for record in consumer.poll(500):
            final_log[record.partition].append(
                (record.offset, base64.b64encode(record.value).decode()))
        if time.monotonic() > deadline:
            break
    consumer.close()
    _write_atomically(out / "history.json", {
        "due": due, "acks": acks, "failed": failed, "final_log": final_log,
        "ends": {str(tp[1]): end for tp, end in ends.items()}})
    cluster.close()


if __name__ == "__main__":
    main()
