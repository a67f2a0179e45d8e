"""A click stream, end to end: producers write page views, a consumer group of two reads them,
Spark aggregates views per page, and the aggregates go back to a topic.

    from rafka import Cluster, start_spark
    from rafka.pipelines.examples.clickstream import run
    summary = run(Cluster.start(brokers=3), start_spark())
"""

from __future__ import annotations

import json
import random
import threading
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from rafka.actors.cluster import Cluster
from rafka.common.clock import wall_clock_ms
from rafka.pipelines.decode import json_values
from rafka.pipelines.topics import read_topic, write_topic

PAGES = ["/", "/search", "/product/42", "/product/7", "/cart", "/checkout", "/help", "/blog"]
CLICK_SCHEMA = "user string, page string, referrer string, dwell_ms int, ts long"

Progress = Callable[[str, int, int], None]


def _quiet(_stage: str, _done: int, _total: int) -> None:
    pass


def click_events(count: int, seed: int = 7) -> list[dict[str, Any]]:
    """A realistic-looking stream: a few heavy users, popular pages, skewed dwell times."""
    rng = random.Random(seed)
    start = wall_clock_ms()
    users = [f"user-{i:04d}" for i in range(500)]
    weights = [1 / (rank + 1) for rank in range(len(PAGES))]  # Zipf-like popularity
    events = []
    for i in range(count):
        events.append({
            "user": users[min(int(rng.paretovariate(1.2)) - 1, len(users) - 1)],
            "page": rng.choices(PAGES, weights)[0],
            "referrer": rng.choice(["search", "email", "social", "direct"]),
            "dwell_ms": int(rng.lognormvariate(7, 0.8)),
            "ts": start + i * 5,
        })
    return events


def run(
    cluster: Cluster,
    spark: SparkSession,
    *,
    events: int = 20_000,
    progress: Progress = _quiet,
    clicks_topic: str = "clicks",
    views_topic: str = "page-views",
    spark_warm_up: threading.Thread | None = None,
) -> dict[str, Any]:
    """Run the pipeline once; returns what a summary table shows. `spark_warm_up`: Spark's
    warm-up (`pipelines.spark.warm_up_spark`), waited for before the Spark stage."""
    brokers = len(cluster.brokers())
    replication = min(3, brokers)
    cluster.create_topic(clicks_topic, partitions=6, replication_factor=replication,
                         config={"min.insync.replicas": min(2, replication)})
    cluster.create_topic(views_topic, partitions=3, replication_factor=replication)

    stream = click_events(events)
    started = time.monotonic()
    producer = cluster.producer(acks="all")
    for i, event in enumerate(stream, 1):
        producer.send(clicks_topic, value=json.dumps(event).encode(), key=event["user"].encode())
        if i % 2000 == 0 or i == events:
            progress("produce", i, events)
    producer.flush()
    producer.close()
    produce_s = time.monotonic() - started

    # A consumer group of two Consumer actors shares the six partitions.
    group = cluster.consumer_group(clicks_topic, "clickstream-readers", members=2,
                                   auto_offset_reset="earliest")
    per_member: Counter[int] = Counter()
    read = 0
    deadline = time.monotonic() + 60
    while read < events and time.monotonic() < deadline:
        for member, records in enumerate(group.poll(500, max_records=5000)):
            per_member[member] += len(records)
            read += len(records)
        progress("consume", min(read, events), events)
    group.commit()
    assignment = group.assignment()
    group.close()

    # Spark: views, unique users and mean dwell per page, written back to a topic.
    started = time.monotonic()
    if spark_warm_up is not None:
        spark_warm_up.join()
    warm_up_wait_s = time.monotonic() - started
    started = time.monotonic()
    with read_topic(spark, cluster, clicks_topic, group="clickstream-analytics") as frame:
        clicks = json_values(frame, CLICK_SCHEMA, into="click").select("click.*")
        per_page = (clicks.groupBy("page")
                    .agg(F.count("*").alias("views"),
                         F.countDistinct("user").alias("users"),
                         F.round(F.avg("dwell_ms")).cast("long").alias("mean_dwell_ms"))
                    .orderBy(F.desc("views")))
        rows = per_page.collect()
        # Written from the rows collected (one per page), not computed again from the topic.
        aggregates = spark.createDataFrame(rows, per_page.schema)
        written = write_topic(
            aggregates.select(F.col("page").alias("key"),
                              F.to_json(F.struct("page", "views", "users", "mean_dwell_ms"))
                              .alias("value")),
            cluster, views_topic, key_col="key")
    spark_s = time.monotonic() - started
    back = json_values(read_topic(spark, cluster, views_topic),
                       "page string, views long, users long, mean_dwell_ms long", into="v")
    stored = {row.v.page: row.v.views for row in back.collect()}
    progress("spark", 1, 1)
    return {
        "events": events,
        "produce_s": produce_s,
        "consumed_by_member": [per_member[0], per_member[1]],
        "partitions_by_member": [[p for _t, p in member] for member in assignment],
        "pages": [row.asDict() for row in rows],
        "written_per_partition": written,
        "read_back": stored,
        "spark_s": spark_s,
        "spark_warm_up_wait_s": warm_up_wait_s,
        "consistent": sum(stored.values()) == events == sum(per_member.values()),
    }
