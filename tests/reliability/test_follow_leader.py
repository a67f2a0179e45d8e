"""Clients follow the controller, not the clock (issue 54, point 2).

A partition's leader is paused (SIGSTOP: its broker and its replica hosts) past its ZooKeeper
session: the controller elects another leader within seconds, and an idempotent acks=all producer
and a consumer must move to it as soon as the metadata names it, not after request.timeout.ms
(30 s, left at its default here). The checker then judges the whole history: nothing
acknowledged lost, doubled or reordered, and every acknowledged record read.
"""

from __future__ import annotations

import threading
import time
from itertools import pairwise

from rafka import Cluster
from tests.support.checker import Ack, Fault, History, Limits, Poll, check, longest_write_gaps
from tests.support.cluster import partition_state
from tests.support.faults import SESSION_TIMEOUT_S, broker_pids, paused
from tests.support.waiting import wait_until
from tests.support.workloads import read_final_log

TOPIC = "follow"
PARTITIONS = 3
# Kafka's default, which the clients keep: moving sooner must not need a shorter one.
REQUEST_TIMEOUT_S = 30.0
# From the pause to the first acknowledged write (and read) at the new leader: the session has to
# expire and the controller to elect (ZooKeeper notices at up to 1.5 x the timeout), then the
# clients' next look at the metadata moves them.
RESUME_BOUND_S = SESSION_TIMEOUT_S + 6


class _Writer:
    """A thread sending numbered records to every partition in turn, noting when each was
    acknowledged (to within a pass of 5 ms)."""

    def __init__(self, cluster: Cluster) -> None:
        self.producer = cluster.producer(acks="all", enable_idempotence=True, linger_ms=2)
        self.history = History()
        self.failed: list[BaseException] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        pending = []
        i = 0
        while not self._stop.is_set():
            for _ in range(PARTITIONS):
                value = f"w-{i}".encode()
                pending.append((value, self.producer.send(TOPIC, value=value,
                                                          partition=i % PARTITIONS)))
                self.history.attempts.append(time.monotonic())
                i += 1
            time.sleep(0.005)
            pending = self._settle(pending, wait=False)
        self._settle(pending, wait=True)

    def _settle(self, pending: list, *, wait: bool) -> list:
        left = []
        now = time.monotonic()
        for value, future in pending:
            if not wait and not future.done():
                left.append((value, future))
                continue
            try:
                meta = future.result(120)
            except Exception as error:
                self.failed.append(error)
                continue
            self.history.acks.append(Ack(value, meta.partition, meta.offset, now))
        return left

    def acknowledged_at(self, partition: int, after: float) -> bool:
        return any(ack.partition == partition and ack.at > after
                   for ack in list(self.history.acks))

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(150)
        self.producer.close()


class _Reader:
    """A consumer of every partition (no group), polling in a thread."""

    def __init__(self, cluster: Cluster) -> None:
        self.consumer = cluster.consumer([TOPIC], auto_offset_reset="earliest")
        self.polls: list[Poll] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            records = self.consumer.poll(200)
            if records:
                self.polls.append(Poll("reader", time.monotonic(), tuple(
                    (r.partition, r.offset, r.value) for r in records)))

    def read_at(self, partition: int, after: float) -> bool:
        return any(poll.at > after and any(p == partition for p, _o, _v in poll.records)
                   for poll in list(self.polls))

    def read_everything_of(self, history: History) -> None:
        wanted = {(ack.partition, ack.offset) for ack in history.acks}
        wait_until(lambda: wanted <= {(p, o) for poll in list(self.polls)
                                      for p, o, _v in poll.records},
                   60, "the reader to read every acknowledged record")

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(30)
        self.consumer.close()


def _longest_gap(times: list[float], start: float, end: float) -> tuple[float, float]:
    """The longest stretch between `start` and `end` without one of `times`: how long, and when
    it ended."""
    inside = sorted({start, end, *(t for t in times if start <= t <= end)})
    return max((later - earlier, later) for earlier, later in pairwise(inside))


def test_clients_move_to_the_new_leader_once_it_is_elected(cluster: Cluster) -> None:
    cluster.create_topic(TOPIC, partitions=PARTITIONS, replication_factor=3,
                         config={"min.insync.replicas": 2})
    controller = cluster.controller()
    # A leader that is not the controller: pausing the controller would time its failover too.
    state = next(p for p in cluster.describe_topic(TOPIC)["partitions"]
                 if p["leader"] != controller)
    partition, victim, epoch = state["partition"], state["leader"], state["leader_epoch"]
    writer, reader = _Writer(cluster), _Reader(cluster)
    try:
        wait_until(lambda: sum(a.partition == partition for a in list(writer.history.acks)) > 300,
                   60, "writes before the fault")
        wait_until(lambda: reader.read_at(partition, 0), 60, "reads before the fault")
        with paused(broker_pids(cluster, victim)):
            paused_at = time.monotonic()
            wait_until(lambda: partition_state(cluster, TOPIC, partition)["leader_epoch"] > epoch,
                       60, "a new leader while the old one is paused")
            elected_seen_at = time.monotonic()
            # Kept paused until both clients are at the new leader (what they get after it was
            # elected comes from it), or long past the request timeout: the old leader's return
            # must not be what unblocks them.
            wait_until(lambda: writer.acknowledged_at(partition, elected_seen_at)
                       and reader.read_at(partition, elected_seen_at),
                       REQUEST_TIMEOUT_S + 15, "writes and reads at the new leader",
                       interval_s=0.05)
            time.sleep(1)
            healed_at = time.monotonic()
        wait_until(lambda: victim in partition_state(cluster, TOPIC, partition)["isr"], 90,
                   "the paused broker back in the ISR")
        time.sleep(2)  # writes go on with the old leader a follower again
    finally:
        writer.stop()
    history = writer.history
    history.end = time.monotonic()
    history.faults.append(Fault(paused_at, "leader-paused", f"broker {victim}", healed_at))
    reader.read_everything_of(history)
    reader.stop()
    history.polls = reader.polls
    history.final_log = read_final_log(cluster, TOPIC, PARTITIONS)
    write_gap = longest_write_gaps(history)[partition]
    _gap, write_resumed_at = _longest_gap(
        [ack.at for ack in history.acks if ack.partition == partition], paused_at, healed_at)
    read_gap, read_resumed_at = _longest_gap(
        [poll.at for poll in history.polls if any(p == partition for p, _o, _v in poll.records)],
        paused_at, healed_at)
    read_resumed_s = read_resumed_at - paused_at
    print(f"\nleader of {TOPIC}-{partition} paused: its writes resumed after "
          f"{write_resumed_at - paused_at:.2f} s (longest write gap {write_gap:.2f} s), its reads "
          f"after {read_resumed_s:.2f} s (longest read gap {read_gap:.2f} s); session timeout "
          f"{SESSION_TIMEOUT_S:g} s, request.timeout.ms {REQUEST_TIMEOUT_S * 1000:g}")
    verdict = check(history, Limits(default_resume_within_s=RESUME_BOUND_S, max_failed_sends=0))
    assert not writer.failed, writer.failed[:3]
    assert verdict.ok, verdict.summary()
    assert write_gap < RESUME_BOUND_S < REQUEST_TIMEOUT_S / 2, (
        f"writes to {TOPIC}-{partition} stopped for {write_gap:.2f} s")
    assert read_gap < RESUME_BOUND_S, (
        f"reads of {TOPIC}-{partition} stopped for {read_gap:.2f} s (resumed "
        f"{read_resumed_s:.2f} s after the pause)")
