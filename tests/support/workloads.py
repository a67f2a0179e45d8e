"""A workload and what it left: a producer writing numbered records until stopped, the final log
read back once the dust settled, and the check that no acknowledged record was lost."""

from __future__ import annotations

import threading
import time
from collections import defaultdict
from collections.abc import Callable
from typing import Any

from rafka import Cluster

from .waiting import wait_until


def read_everything(cluster: Cluster, topic: str, timeout_s: float = 60) -> list:
    """Every record below each partition's high watermark, read after the dust settled."""
    consumer = cluster.consumer([topic], auto_offset_reset="earliest")
    ends = consumer.end_offsets(sorted(consumer.assignment()))
    records = []
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        records += consumer.poll(500)
        positions = {tp: consumer.position(*tp) for tp in ends}
        if all(positions[tp] >= end for tp, end in ends.items()):
            break
    consumer.close()
    return records


def read_final_log(cluster: Cluster, topic: str, partitions: int, timeout_s: float = 120,
                   **consumer_config: Any) -> dict[int, list[tuple[int, bytes]]]:
    """(offset, value) of every record below each partition's end offset as it is now, by
    partition: the log a checker judges once the writes stopped. Fails if not read in time."""
    consumer = cluster.consumer([topic], auto_offset_reset="earliest", **consumer_config)
    ends = consumer.end_offsets([(topic, p) for p in range(partitions)])
    log: dict[int, list[tuple[int, bytes]]] = {p: [] for p in range(partitions)}
    deadline = time.monotonic() + timeout_s
    while any(consumer.position(*tp) < end for tp, end in ends.items()):
        for record in consumer.poll(500):
            log[record.partition].append((record.offset, record.value))
        assert time.monotonic() < deadline, "the final read did not finish"
    consumer.close()
    return log


def check_acknowledged(acknowledged: dict[tuple[int, int], bytes], records: list) -> None:
    """No acknowledged write lost or moved; no value twice; order per partition kept."""
    stored = {(r.partition, r.offset): r.value for r in records}
    lost = {key: value for key, value in acknowledged.items() if stored.get(key) != value}
    assert not lost, f"{len(lost)} acknowledged records lost or changed, e.g. {list(lost)[:5]}"
    values = [r.value for r in records]
    assert len(values) == len(set(values)), "a record appears twice"
    by_partition = defaultdict(list)
    for record in records:
        by_partition[record.partition].append(int(record.value.split(b"-")[1]))
    for partition, sequence in by_partition.items():
        assert sequence == sorted(sequence), f"partition {partition} out of order"


Send = tuple[bytes, Any]  # a value sent, and the future of its acknowledgement


def settle(
    pending: list[Send],
    *,
    wait: bool,
    on_ack: Callable[[bytes, Any], object],
    on_error: Callable[[bytes, BaseException], object],
    on_unresolved: Callable[[bytes], object] | None = None,
    timeout_s: float = 150,
) -> list[Send]:
    """Hand each send that is done to `on_ack(value, metadata)` or, refused or timed out (it
    may or may not be in the log), to `on_error(value, error)`; return those not done yet. With
    `wait`, wait up to `timeout_s` for each, so none is left: one still without an outcome then
    goes to `on_unresolved(value)` if given (to `on_error` as a timeout if not)."""
    left = []
    for value, future in pending:
        if not wait and not future.done():
            left.append((value, future))
            continue
        try:
            meta = future.result(timeout_s)
        except Exception as error:
            if on_unresolved is not None and not future.done():
                on_unresolved(value)
            else:
                on_error(value, error)
            continue
        on_ack(value, meta)
    return left


class Workload:
    """A producer thread writing numbered records (acks=all, idempotent) until stopped."""

    def __init__(self, cluster: Cluster, topic: str, **producer_options: object) -> None:
        self.producer = cluster.producer(**{"acks": "all", "linger_ms": 2,
                                            "retry_backoff_ms": 50, **producer_options})
        self.topic = topic
        self.acknowledged: dict[tuple[int, int], bytes] = {}
        self.failed = 0
        self.errors: list[BaseException] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        # When the last pass over the answered sends began (monotonic s).
        self._last_settle_began = 0.0

    def _run(self) -> None:
        i = 0
        pending = []
        while not self._stop.is_set():
            for _ in range(50):
                value = f"{i // 1000}-{i}".encode()
                pending.append((value, self.producer.send(self.topic, value=value,
                                                          key=str(i % 13).encode())))
                i += 1
            time.sleep(0.005)
            began = time.monotonic()
            pending = settle(pending, wait=False, on_ack=self._acknowledged,
                             on_error=self._failed)
            self._last_settle_began = began
        settle(pending, wait=True, on_ack=self._acknowledged, on_error=self._failed,
               timeout_s=120)

    def settle_answered(self, timeout_s: float = 60) -> None:
        """Return once every send answered before this call is in `acknowledged` (or counted
        as failed): the thread takes answers in passes, between sends."""
        asked = time.monotonic()
        wait_until(lambda: self._last_settle_began >= asked, timeout_s,
                   "the workload to take in the answers to its sends", interval_s=0.01)

    def _acknowledged(self, value: bytes, meta: Any) -> None:
        self.acknowledged[(meta.partition, meta.offset)] = value

    def _failed(self, _value: bytes, error: BaseException) -> None:
        self.failed += 1
        self.errors.append(error)

    def __enter__(self) -> Workload:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(180)
        self.producer.close()


class SendUntilStopped:
    """A thread sending `v0`, `v1`, ... to a topic (keyed `k<i % keys>` if `keys`, else
    keyless) until `stop()`, pausing 20 ms every `pause_every` sends; then it waits up to
    `ack_timeout_s` for each answer: `acknowledged[(partition, offset)] = value`. What it
    raised is in `failures`."""

    def __init__(self, cluster: Cluster, topic: str, *, pause_every: int, ack_timeout_s: float,
                 keys: int | None = None) -> None:
        self.cluster = cluster
        self.topic = topic
        self.pause_every = pause_every
        self.ack_timeout_s = ack_timeout_s
        self.keys = keys
        self.acknowledged: dict[tuple[int, int], bytes] = {}
        self.failures: list[BaseException] = []
        self._stop = threading.Event()
        self.thread = threading.Thread(target=self._run)
        self.thread.start()

    def _run(self) -> None:
        try:
            producer = self.cluster.producer(acks="all", metadata_max_age_ms=500, linger_ms=1)
            futures = []
            i = 0
            while not self._stop.is_set():
                value = f"v{i}".encode()
                key = None if self.keys is None else f"k{i % self.keys}".encode()
                futures.append((value, producer.send(self.topic, value=value, key=key)))
                i += 1
                if i % self.pause_every == 0:
                    time.sleep(0.02)
            producer.flush()
            for value, future in futures:
                meta = future.result(self.ack_timeout_s)
                self.acknowledged[(meta.partition, meta.offset)] = value
            producer.close()
        except BaseException as error:  # reported by the test thread
            self.failures.append(error)

    def stop(self, timeout_s: float) -> None:
        """Stop sending, and wait up to `timeout_s` for the answers to be in."""
        self._stop.set()
        self.thread.join(timeout_s)


class GroupReading:
    """Members of one consumer group on a topic, polled together: what they read, by
    (partition, offset)."""

    def __init__(self, cluster: Cluster, topic: str, group: str, members: int = 2) -> None:
        self.consumers = [cluster.consumer([topic], group=group, auto_offset_reset="earliest",
                                           session_timeout_ms=4000) for _ in range(members)]
        self.read: dict[tuple[int, int], bytes] = {}

    def poll(self) -> None:
        for consumer in self.consumers:
            for record in consumer.poll(100):
                self.read[(record.partition, record.offset)] = record.value

    def poll_for(self, seconds: float) -> None:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            self.poll()

    def check_read(self, acknowledged: dict[tuple[int, int], bytes]) -> None:
        """Wait until every acknowledged record is read, with its value; close the members."""
        wait_until(lambda: (self.poll(), set(acknowledged) <= set(self.read))[1], 60,
                   "the group to read every acknowledged record")
        assert all(self.read[key] == value for key, value in acknowledged.items())
        for consumer in self.consumers:
            consumer.close()
