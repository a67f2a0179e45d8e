"""The timeline of one recovery: a partition's leader broker killed, and what happens until the
partition takes writes again and the broker is back in its ISR (issue 54, point 1).

Run from a checkout: `PYTHONPATH=$PWD python bench/recovery_timeline.py`. A local
cluster of three brokers (the tests' timeouts: a 4 s ZooKeeper session) and an RF 3,
`min.insync.replicas=2` topic of three partitions; a producer sends to the one a broker other
than the controller leads every 20 ms, acks=all, and each record's wait is counted from when
it was due, not when it went out. That broker is killed; once writes resume it is started
again. Every 20 ms the watcher
reads ZooKeeper (the registered brokers, the partition's state) and the replicas' own word
(the new leader applying LeaderAndIsr), and prints each change with its time since the kill
(on stderr, as it happens), then the whole as JSON on stdout.

With `--ray-restart` the cluster's brokers are detached actors (as `rafka up` makes them) and
the leader's process is SIGKILLed instead: Ray restarts it, and the broker starts itself
(registering once its old session has expired), as on the multi-node bed.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import threading
import time
from typing import Any

import ray

from rafka import Cluster
from rafka.actors.clients.producer import RecordFuture
from rafka.coordination.registration import read_brokers
from tests.support.cluster import TEST_BROKER_CONFIG

TOPIC = "recovery"
SEND_EVERY_S = 0.02
TICK_S = 0.02


class Timeline:
    """Events with their time since the fault (monotonic s), each said once."""

    def __init__(self) -> None:
        self.fault_at: float | None = None
        self.events: list[tuple[float, str]] = []

    def note(self, what: str) -> None:
        if self.fault_at is not None:
            at = time.monotonic() - self.fault_at
            self.events.append((at, what))
            print(f"{at:7.2f} s  {what}", file=sys.stderr, flush=True)


def _send_on_schedule(producer: Any, partition: int, stop: threading.Event,
                      sent: list[tuple[float, RecordFuture]]) -> None:
    """A record due every SEND_EVERY_S, sent at its due time or as soon after as it can be."""
    due = time.monotonic()
    number = 0
    while not stop.is_set():
        sent.append((due, producer.send(TOPIC, value=b"%d" % number, partition=partition)))
        number += 1
        due += SEND_EVERY_S
        time.sleep(max(0.0, due - time.monotonic()))


def _leader_applied(cluster: Cluster, partition: int, leader: int, epoch: int) -> bool:
    try:
        host = cluster.replica_hosts(TOPIC, partition)[leader]
        (facts,) = [entry for entry in ray.get(host.describe.remote(TOPIC), timeout=1)
                    if entry["partition"] == partition]
    except Exception:  # not there yet, or not answering
        return False
    return facts["role"] == "leader" and facts["leader_epoch"] >= epoch


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ray-restart", action="store_true",
                        help="SIGKILL the leader's process and let Ray restart the broker")
    ray_restart = parser.parse_args().ray_restart
    cluster = Cluster.start(brokers=3, broker_config=dict(TEST_BROKER_CONFIG),
                            detached=ray_restart)
    timeline = Timeline()
    stop = threading.Event()
    sent: list[tuple[float, RecordFuture]] = []
    try:
        # One partition led by each broker: the one written to is led by a broker that is not
        # the controller. A controller Ray restarts may be registered again before its
        # successor reads who is alive, and then nothing is elected (as in Kafka): writes
        # resume at the same leader, and there is no election to time.
        cluster.create_topic(TOPIC, partitions=3, replication_factor=3,
                             config={"min.insync.replicas": 2})
        controller = cluster.wait_for_controller()
        states = cluster.admin.describe_topic(TOPIC).states
        partition, state = next((index, state) for index, state in sorted(states.items())
                                if state is not None and state.value.leader != controller)
        producer = cluster.producer(acks="all", linger_ms=0)
        producer.send(TOPIC, value=b"first", partition=partition).result(30)
        victim = state.value.leader
        sender = threading.Thread(target=_send_on_schedule,
                                  args=(producer, partition, stop, sent), daemon=True)
        sender.start()
        time.sleep(2.0)  # the steady state before the fault

        timeline.fault_at = time.monotonic()
        if ray_restart:
            handle = ray.get_actor(f"broker-{victim}", namespace=cluster.namespace)
            pid = ray.get(handle.pid.remote(), timeout=30)
            timeline.note(f"broker {victim}, the leader, SIGKILLed: Ray restarts it")
            os.kill(pid, signal.SIGKILL)
        else:
            timeline.note(f"broker {victim}, the leader, killed with its replica hosts")
            cluster.kill_broker(victim)
            timeline.note(f"broker {victim}'s actors gone from Ray")
        registered = set(read_brokers(cluster.store))
        last_state = (victim, tuple(state.value.isr), state.value.leader_epoch)
        applied = left_isr = back_in_isr = False
        restarted = ray_restart
        elected_at: float | None = None  # when ZooKeeper first named another leader
        resumed_at: float | None = None  # the first acknowledgement after that
        # Which records the watcher has yet to see acknowledged, and when it saw the others.
        pending: set[int] = set()
        watched = 0
        acknowledged_at: dict[int, float] = {}
        while time.monotonic() - timeline.fault_at < 90 and not back_in_isr:
            now_registered = set(read_brokers(cluster.store))
            for broker in sorted(registered - now_registered):
                timeline.note(f"broker {broker} unregistered in ZooKeeper (its session ended)")
            for broker in sorted(now_registered - registered):
                timeline.note(f"broker {broker} registered again")
            registered = now_registered
            current = cluster.admin.describe_topic(TOPIC).states[partition]
            if current is not None:
                now_state = (current.value.leader, tuple(current.value.isr),
                             current.value.leader_epoch)
                if now_state != last_state:
                    timeline.note(f"ZooKeeper: leader {now_state[0]}, ISR {list(now_state[1])}, "
                                  f"leader epoch {now_state[2]}")
                    if now_state[0] != last_state[0]:
                        applied = False
                        if elected_at is None and now_state[0] not in (-1, victim):
                            elected_at = time.monotonic()
                    last_state = now_state
                if (not applied and now_state[0] not in (-1, victim)
                        and _leader_applied(cluster, partition, now_state[0], now_state[2])):
                    applied = True
                    timeline.note(f"broker {now_state[0]} leads (LeaderAndIsr applied)")
                left_isr = left_isr or victim not in now_state[1]
                back_in_isr = restarted and left_isr and victim in now_state[1]
            pending.update(range(watched, len(sent)))
            watched = len(sent)
            for index in [index for index in pending if sent[index][1].done()]:
                pending.discard(index)
                acknowledged_at[index] = time.monotonic()
                # A record due just after the kill may still be acknowledged by the dying
                # leader's process: writes have resumed once the new leader takes one.
                if (resumed_at is None and elected_at is not None
                        and sent[index][1].exception(0) is None):
                    resumed_at = time.monotonic()
                    timeline.note("writes resume: the first acknowledgement after the election")
            if (resumed_at is not None and not restarted
                    and time.monotonic() - resumed_at > 2.0):
                # From a thread: start_broker returns once the broker has registered, and the
                # watcher goes on watching meanwhile.
                threading.Thread(target=cluster.start_broker, args=(victim,),
                                 daemon=True).start()
                restarted = True
                timeline.note(f"broker {victim} starting again")
            time.sleep(TICK_S)
        if back_in_isr:
            timeline.note(f"broker {victim} back in the ISR")
        stop.set()
        sender.join(10)
        producer.flush()
        result = _summary(timeline, sent, acknowledged_at)
        producer.close()
    finally:
        stop.set()
        cluster.shutdown()
    print(json.dumps(result))


def _summary(timeline: Timeline, sent: list[tuple[float, RecordFuture]],
             acknowledged_at: dict[int, float]) -> dict[str, Any]:
    """The events, the longest wait of a record due after the fault (from its due time to its
    acknowledgement, as the watcher saw it, to a tick), and how many failed."""
    assert timeline.fault_at is not None
    waits, failed = [], 0
    for index, (due, future) in enumerate(sent):
        if due < timeline.fault_at:
            continue
        if future.exception(60) is not None:
            failed += 1
        elif index in acknowledged_at:
            waits.append(acknowledged_at[index] - due)
    return {"events": [{"at_s": round(at, 3), "event": what} for at, what in timeline.events],
            "records_due_after_fault": sum(1 for due, _ in sent if due >= timeline.fault_at),
            "records_failed": failed,
            "longest_wait_s": round(max(waits), 3) if waits else None,
            "tick_s": TICK_S}


if __name__ == "__main__":
    main()
