"""A record's way traced through a real cluster (issue 26's breakdown per hop): the producer,
the leader's and the followers' replicas note their events, and every record's hops, laid out
by `rafka.actors.path_trace.hop_breakdown`, are in order and add up to its latency."""

from __future__ import annotations

import struct
import time

import numpy as np
import ray

from rafka.actors.path_trace import HOPS, TracedRecord, hop_breakdown
from tests.support.waiting import wait_until

STAMP = struct.Struct("<qq")
RECORDS = 60


def test_every_traced_record_has_each_hop_in_order_adding_up_to_its_latency(cluster) -> None:
    cluster.create_topic("traced", partitions=1, replication_factor=3,
                         config={"min.insync.replicas": 2})
    consumer = cluster.consumer(["traced"], auto_offset_reset="earliest")
    with cluster.producer(acks="all", linger_ms=0) as producer:
        producer.send("traced", b"before tracing").result(timeout=30)
        hosts = cluster.replica_hosts("traced", 0)
        assert len(hosts) == 3
        assert all(ray.get([host.start_tracing_path.remote("traced", 0)
                            for host in hosts.values()], timeout=30))
        requests = producer.trace_requests()
        for index in range(RECORDS):
            due = time.monotonic_ns()
            producer.send("traced", STAMP.pack(due, time.monotonic_ns()))
            if index % 10 == 9:
                producer.flush(timeout=30)
        producer.flush(timeout=30)

    records: list[TracedRecord] = []

    def read_all() -> bool:
        for record in consumer.poll(timeout_ms=500):
            if record.offset > 0:
                records.append(TracedRecord(record.offset, *STAMP.unpack(record.value),
                                            time.monotonic_ns()))
        return len(records) == RECORDS

    wait_until(read_all, 60, "every record read back")
    consumer.close()
    traced = {broker: ray.get(host.stop_tracing_path.remote("traced", 0), timeout=30)
              for broker, host in hosts.items()}
    leader = cluster.describe_topic("traced")["partitions"][0]["leader"]
    hops = hop_breakdown(records, requests, traced.pop(leader), traced)

    assert all(len(hops[hop]) == RECORDS for hop in HOPS), {h: len(v) for h, v in hops.items()}
    assert all((hops[hop] >= 0).all() for hop in HOPS), {h: v.min() for h, v in hops.items()}
    latency_ms = np.array([(r.polled_ns - r.due_ns) / 1e6 for r in records])
    assert np.allclose(sum(hops[hop] for hop in HOPS), latency_ms)
    # acks=all: the high watermark waited for a follower's fetch, whose hops took time.
    assert (hops["follower_next_fetch"] > 0).all()
