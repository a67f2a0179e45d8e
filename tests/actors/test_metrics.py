"""The metrics of `rafka.actors.metrics`, read the way Prometheus reads them: scraped from the
session Ray's metrics export port, in Prometheus text.

`include_dashboard=False` (what `init_ray` asks for) turns off the dashboard, not the per-node
agent that exports metrics, so the session Ray serves them; its port is chosen at start and read
from the driver's node. Ray pushes new values to that agent every few seconds (10 s by default),
so every check polls the scrape until it holds. Names carry Ray's `ray_` prefix; every process
exports its own series (label `WorkerId`), so the checks sum over the labels they do not name.
"""

from __future__ import annotations

import time
import urllib.request
import uuid
from collections.abc import Callable
from typing import Any

import pytest
import ray
from prometheus_client.parser import text_string_to_metric_families

from rafka import Cluster
from tests.support.cluster import partition_state
from tests.support.waiting import wait_until

# The test session's Ray exports every second (tests/conftest.py); allow many rounds on a busy
# machine, and a user's default of 10 s too.
SCRAPE_TIMEOUT_S = 60.0


@pytest.fixture
def metrics_port(ray_session: None) -> int:
    port = ray._private.worker.global_worker.node.metrics_export_port
    assert port, "the session Ray exports no metrics"
    return port


def scrape(port: int) -> list[tuple[str, dict[str, str], float]]:
    """Every sample on the export port: (name, labels, value)."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as reply:
        text = reply.read().decode()
    return [(sample.name, sample.labels, sample.value)
            for family in text_string_to_metric_families(text)
            for sample in family.samples]


def total(samples: list[tuple[str, dict[str, str], float]], name: str, **labels: str) -> float:
    """The sum of `name`'s samples whose labels include `labels` (over processes, partitions)."""
    return sum(value for sample_name, sample_labels, value in samples
               if sample_name == name
               and all(sample_labels.get(k) == v for k, v in labels.items()))


def series(samples: list[tuple[str, dict[str, str], float]], name: str,
           **labels: str) -> list[float]:
    return [value for sample_name, sample_labels, value in samples
            if sample_name == name and all(sample_labels.get(k) == v for k, v in labels.items())]


def wait_for_scrape(port: int, check: Callable[[list], Any], what: str) -> list:
    """Scrape until `check(samples)` holds; the last scrape is in the error otherwise."""
    last: list = []

    def holds() -> Any:
        nonlocal last
        last = scrape(port)
        return check(last)

    try:
        wait_until(holds, timeout_s=SCRAPE_TIMEOUT_S, what=what)
    except AssertionError as error:
        rafka = sorted({(n, tuple(sorted((k, v) for k, v in labels.items()
                                         if k not in ("WorkerId", "SessionName", "Version",
                                                      "NodeAddress", "Component")
                                         and not k.startswith("otel"))), value)
                        for n, labels, value in last if "rafka" in n and "_bucket" not in n})
        raise AssertionError(f"{error}; rafka samples: {rafka}") from None
    return last


def test_traffic_and_lag_metrics(start_cluster: Callable[..., Cluster], metrics_port: int) -> None:
    cluster = start_cluster(3)
    topic, group = f"m-{uuid.uuid4().hex[:8]}", f"g-{uuid.uuid4().hex[:8]}"
    cluster.create_topic(topic, partitions=1, replication_factor=3)
    produced = 500
    producer = cluster.producer(acks="all", linger_ms=5)
    producer.send_batch(topic, [b"v%05d" % i for i in range(produced)])
    producer.flush(timeout=60)
    producer.close()

    # A member that took part of the log: its lag is what it has not taken yet. One partition,
    # so the first fetch brings the whole log and its high watermark.
    consumer = cluster.consumer([topic], group=group, auto_offset_reset="earliest",
                                enable_auto_commit=False)
    try:
        records: list = []
        deadline = time.monotonic() + 60
        while not records and time.monotonic() < deadline:
            records = consumer.poll(1000, max_records=100)
        assert records, "the group consumer read nothing"
        first = len(records)
        wait_for_scrape(metrics_port, lambda s: series(
            s, "ray_rafka_consumer_lag", group=group, topic=topic, partition="0")
            == [produced - first], f"consumer lag {produced - first}")

        deadline = time.monotonic() + 60
        while len(records) < produced and time.monotonic() < deadline:
            records += consumer.poll(500)
        assert len(records) == produced
        consumer.poll(200)  # caught up: one more round, as a consuming loop would

        # The fetch that found nothing new ends after fetch.max.wait.ms: counted then.
        samples = wait_for_scrape(metrics_port, lambda s: (
            total(s, "ray_rafka_records_in_total", topic=topic) == produced
            and total(s, "ray_rafka_records_out_total", topic=topic) == produced
            and series(s, "ray_rafka_consumer_lag", group=group, topic=topic) == [0]
            and total(s, "ray_rafka_fetch_latency_ms_count", topic=topic,
                      fetcher="consumer") >= 2
        ), "records in and out, lag 0, two consumer fetches")
    finally:
        consumer.close()

    assert total(samples, "ray_rafka_records_in_total", topic=topic, partition="0") == produced
    assert total(samples, "ray_rafka_bytes_in_total", topic=topic) > produced * 6
    # The consumer read each batch once, whole: as many bytes out as in.
    assert (total(samples, "ray_rafka_bytes_out_total", topic=topic)
            == total(samples, "ray_rafka_bytes_in_total", topic=topic))
    assert total(samples, "ray_rafka_produce_latency_ms_count", topic=topic) >= 1
    assert total(samples, "ray_rafka_produce_latency_ms_sum", topic=topic) > 0
    assert total(samples, "ray_rafka_fetch_latency_ms_count", topic=topic,
                 fetcher="consumer") >= 2
    # Followers long-poll their leader all the time.
    assert total(samples, "ray_rafka_fetch_latency_ms_count", topic=topic,
                 fetcher="follower") >= 2
    assert total(samples, "ray_rafka_replication_bytes_out_total", topic=topic) > 0
    # Everyone in sync: the leader reports 0, the followers too.
    assert total(samples, "ray_rafka_under_replicated_partitions", topic=topic) == 0
    assert series(samples, "ray_rafka_under_replicated_partitions", topic=topic, partition="0")


def test_isr_and_controller_metrics(start_cluster: Callable[..., Cluster],
                                    metrics_port: int) -> None:
    cluster = start_cluster(3)
    name = cluster.name
    topic = f"f-{uuid.uuid4().hex[:8]}"
    cluster.create_topic(topic, partitions=1, replication_factor=3)
    controller = cluster.wait_for_controller()
    wait_for_scrape(metrics_port, lambda s: total(
        s, "ray_rafka_controller_changes_total", cluster=name) == 1, "the first controller")

    def isr_change_scraped(counter: str, under_replicated: int, what: str) -> None:
        """Wait for a scrape that counts an ISR change of the topic's partition 0 in `counter`,
        and shows `under_replicated` (1 or 0) for it."""
        wait_for_scrape(metrics_port, lambda s: (
            total(s, counter, topic=topic) >= 1
            and total(s, "ray_rafka_under_replicated_partitions", topic=topic,
                      partition="0") == under_replicated
        ), what)

    # Kill a follower of the partition (not the controller, so that each check sees one
    # change): its leader's ISR shrinks and the partition is under-replicated.
    state = partition_state(cluster, topic, 0)
    victim = next(b for b in state["replicas"] if b not in (state["leader"], controller))
    cluster.kill_broker(victim)
    wait_until(lambda: victim not in partition_state(cluster, topic, 0)["isr"], 60,
               "the ISR to shrink")
    isr_change_scraped("ray_rafka_isr_shrinks_total", 1,
                       "an ISR shrink and an under-replicated partition")

    # Back: it catches up, the ISR expands and the partition is fully replicated again.
    cluster.start_broker(victim)
    wait_until(lambda: victim in partition_state(cluster, topic, 0)["isr"], 60,
               "the ISR to expand")
    isr_change_scraped("ray_rafka_isr_expands_total", 0,
                       "an ISR expansion and no under-replicated partition")

    # Kill the controller: another broker takes over, and counts it.
    cluster.kill_broker(controller)
    wait_until(lambda: cluster.controller() not in (None, controller), 60, "a new controller")
    samples = wait_for_scrape(metrics_port, lambda s: total(
        s, "ray_rafka_controller_changes_total", cluster=name) == 2, "the second controller")
    assert total(samples, "ray_rafka_controller_changes_total", cluster=name,
                 broker=str(controller)) == 1


def test_pending_counts_hand_ray_one_sum_per_counter_and_tags(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A replica's counters are summed until the host's timer flushes them (pure logic: Ray's
    side is `metrics.inc`, replaced here by a list)."""
    from rafka.actors import metrics

    handed: list[tuple[str, float, dict[str, str]]] = []
    monkeypatch.setattr(metrics, "inc", lambda name, value, tags: handed.append(
        (name, value, tags)))
    first, second = {"topic": "a", "partition": "0"}, {"topic": "a", "partition": "1"}
    counts = metrics.PendingCounts()
    for records in (3, 4, 5):
        counts.add("rafka_records_in", records, first)
    counts.add("rafka_records_in", 7, second)
    counts.add("rafka_bytes_in", 100, first)
    assert handed == []
    counts.flush()
    assert sorted(handed, key=lambda item: (item[0], item[2]["partition"])) == [
        ("rafka_bytes_in", 100, first), ("rafka_records_in", 12, first),
        ("rafka_records_in", 7, second)]
    counts.flush()
    assert len(handed) == 3  # nothing new: nothing handed
