"""A tenant at its produce quota, and what another tenant on the same broker sees.

    python bench/kafka_quotas.py [--seconds 5] [--slices 4] [--rate 200] [--quota 1048576]

One broker with a Kafka listener (embedded ZooKeeper, local Ray). Tenant B (confluent-kafka,
client id ``tenant-b``, ``acks=all``, ``linger.ms`` 0) produces ``--rate`` records of 100 bytes
a second, one at a time, to a topic of its own, through ``--slices`` slices of ``--seconds``
each: alone, and while tenant A (client id ``tenant-a``, a process of its own) pushes records
of ``--value-bytes`` as fast as its client lets it to another topic, held to
``producer_byte_rate`` ``--quota`` (set on ``/config/clients/tenant-a`` first; A then pushes
alone for ``--warmup-seconds``, so that it is at its quota, throttled, when the slices begin).
The slices run alone, loaded, loaded, alone, and again (ABBA), so that both kinds see the same
stretch of the machine's own weather (``bench/machine_canary.py``). Prints one JSON object:

* ``tenant_a``: the bytes a second A had acknowledged while it pushed (past the warm-up),
  against its quota (``rate_to_quota``), and the throttle events its client reported
  (``throttle_cb``), with the longest throttle time;
* ``tenant_b_ms``: B's produce latency, p50 / p99 / max, alone and beside A, and ``p99_ratio``
  (beside A / alone). Latency runs from when each record was due (``start + i / rate``), not
  from when it was sent, so a stalled sender counts its own stall;
* ``machine_slow_fraction``: per kind of slice, the share of the time the machine itself was
  several times slower than its median (the canary's units).

The issue 53 target: ``p99_ratio`` at most 2.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import ray
from confluent_kafka import Producer

from bench.kafka_bounds import (
    _summary,
    add_slice_options,
    by_kind_of,
    run_slices,
    slice_kinds,
)
from bench.machine_canary import MachineCanary
from rafka import Cluster
from rafka.actors.kafka.quota_store import ZooKeeperQuotas
from rafka.wire.quotas import PRODUCER_BYTE_RATE, QuotaEntity

KINDS = ("alone", "loaded")


def tenant_a(bootstrap: str, topic: str, value_bytes: int, pushing: Any, stop: Any,
             results: Any) -> None:
    """In a process of its own: while `pushing` is set, produce as fast as the client takes
    records; once `stop` is, put what was acknowledged (per push, bytes and seconds) and the
    throttle times reported on `results`."""
    throttles: list[int] = []
    acked = [0]

    def throttled(event: Any) -> None:
        throttles.append(int(event.throttle_time * 1000))

    def delivered(error: Any, message: Any) -> None:
        if error is None:
            acked[0] += len(message.value())

    producer = Producer({"bootstrap.servers": bootstrap, "client.id": "tenant-a",
                         "acks": "all", "linger.ms": 5, "throttle_cb": throttled,
                         "queue.buffering.max.kbytes": 4096})
    value = b"a" * value_bytes
    pushes: list[tuple[int, float]] = []
    while not stop.is_set():
        if not pushing.wait(0.05):
            producer.poll(0)
            continue
        began, before = time.perf_counter(), acked[0]
        while pushing.is_set():
            try:
                producer.produce(topic, value, on_delivery=delivered)
            except BufferError:
                producer.poll(0.01)  # the client's queue is full: it is being throttled
            producer.poll(0)
        pushes.append((acked[0] - before, time.perf_counter() - began))
    producer.flush(30)
    results.put({"pushes": pushes, "throttle_ms": throttles})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_slice_options(parser, KINDS, idle_seconds=3.0)
    parser.add_argument("--quota", type=int, default=1 << 20,
                        help="tenant A's producer_byte_rate (bytes a second)")
    parser.add_argument("--value-bytes", type=int, default=10_000,
                        help="the size of each of tenant A's records")
    parser.add_argument("--warmup-seconds", type=float, default=12.0,
                        help="tenant A pushes alone first, until it is held to its quota "
                             "(its first ten seconds' worth goes through at once)")
    args = parser.parse_args()
    if args.slices < 2 or args.slices % 2:
        parser.error("--slices must be even and at least 2")
    cluster = Cluster.start(brokers=1, name=f"quotas-{os.getpid()}",
                            kafka_listeners="PLAINTEXT://127.0.0.1:0")
    context = multiprocessing.get_context("spawn")
    pushing, stop, results = context.Event(), context.Event(), context.Queue()
    try:
        for topic in ("tenant-b", "tenant-a"):
            cluster.create_topic(topic, partitions=1, replication_factor=1)
        ZooKeeperQuotas(cluster.store).alter(QuotaEntity(None, "tenant-a"),
                                             {PRODUCER_BYTE_RATE: float(args.quota)})
        bootstrap = cluster.bootstrap_servers()
        producer = Producer({"bootstrap.servers": bootstrap, "client.id": "tenant-b",
                             "acks": "all", "linger.ms": 0})
        producer.list_topics("tenant-b", timeout=30)
        process = context.Process(target=tenant_a, args=(bootstrap, "tenant-a",
                                                         args.value_bytes, pushing, stop,
                                                         results))
        process.start()
        try:
            with MachineCanary() as canary:
                canary.idle(args.idle_seconds)
                pushing.set()
                time.sleep(args.warmup_seconds)
                pushing.clear()
                slices = run_slices(producer, "tenant-b", args.rate, args.seconds,
                                    slice_kinds(args.slices, KINDS), pushing, settle_s=0.2)
        finally:
            stop.set()
        a = results.get(timeout=120)
        process.join(30)
        by_kind, slow = by_kind_of(slices, canary, KINDS)
        alone, loaded = _summary(by_kind["alone"]), _summary(by_kind["loaded"])
        measured = a["pushes"][1:]  # past the warm-up
        acked = sum(sent for sent, _s in measured)
        pushed_s = sum(seconds for _b, seconds in measured)
        rate = acked / pushed_s if pushed_s else 0.0
        broker = ray.get_actor("broker-0", namespace=cluster.namespace)
        stats = ray.get(broker.kafka_listener_stats.remote(), timeout=30)
        print(json.dumps({
            "benchmark": "kafka_quotas",
            "config": {"seconds_per_slice": args.seconds, "slices": args.slices,
                       "rate": args.rate, "quota_bytes_per_s": args.quota,
                       "value_bytes": args.value_bytes, "cpus": os.cpu_count()},
            "tenant_a": {"bytes_per_s": round(rate), "rate_to_quota": round(rate / args.quota, 2),
                         "throttle_events": len(a["throttle_ms"]),
                         "throttle_ms_max": max(a["throttle_ms"], default=0)},
            "broker_quotas": stats["client_quotas"],
            "tenant_b_ms": {"alone": alone, "beside_a": loaded,
                            "p99_ratio": round(loaded["p99"] / alone["p99"], 2)},
            "machine_slow_fraction": slow,
        }, indent=2))
    finally:
        cluster.shutdown()


if __name__ == "__main__":
    main()
