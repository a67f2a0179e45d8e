"""Records/s between a topic and Spark, beside what Spark and RayDP do with the same rows
without rafka, all in one Spark session and one run. Prints one JSON object; `--plot out.png`
draws a bar chart.

    .venv/bin/python bench/pipeline.py --records 200000

What it times (medians of `--repeat` runs, each materialised with persist().count()):

* `read_topic`: the topic into a DataFrame.
* `arrow_handoff`: the same rows as in-memory Arrow tables (one per partition) handed to Spark
  through a Ray Dataset (`to_spark`): the ceiling RayDP sets for any read that goes through it.
* `parquet_read`: Spark's own Parquet reader over the same rows.
* `create_dataframe`: `spark.createDataFrame` of the same rows from the driver.
* `ray_data`: the topic into a materialised Ray Dataset (no Spark).
* `ray_data_read_kafka`: the same through the front door: Ray Data's own `ray.data.read_kafka`
  (confluent-kafka in its read tasks) against the broker's Kafka listener, materialised.
* `write_topic`: the rows' values written to a topic created for each run (untimed, as
  Parquet's directory), beside `parquet_write`, Spark writing the same rows to Parquet, and
  `python_handoff`, Spark handing the same rows as Arrow batches to its Python workers
  (`mapInArrow`) that only count them: the floor of any writer in Spark's tasks.
* `write_topic_keyed`: the same rows with a 16-byte key each (the value's first bytes), placed
  by key as Java's producer would.
* `write_topic_transactional`, `write_topic_keyed_transactional`: the same two writes in one
  Kafka transaction each (`write_topic(transactional=True)`: the rows shuffled to one task per
  partition, sent under the driver's transaction, committed by the driver).
* `write_dataset`: the rows' values as a Ray Dataset (Arrow blocks in the object store) written
  to a topic by `write_dataset`, beside `ray_data_write_kafka`, Ray Data's own
  `Dataset.write_kafka` (confluent-kafka in its write tasks) writing the same Dataset to the
  broker's Kafka listener. Both write tasks ask for no CPU (Spark's executors hold them).

Ratios: `read_topic_vs_arrow_handoff` (issue 24's target is 0.8), `write_topic_vs_parquet_write`
(also 0.8), `python_handoff_vs_parquet_write`, `write_topic_vs_python_handoff`,
`read_topic_vs_create_dataframe`, `ray_data_read_kafka_vs_ray_data` and
`write_dataset_vs_ray_data_write_kafka` (issue 55's target is 5); what a transaction costs:
`write_topic_transactional_vs_write_topic`, `write_topic_keyed_transactional_vs_write_topic_keyed`.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable
from typing import Any

import pyarrow as pa
import ray
from pyspark.sql import functions as F

from rafka import Cluster
from rafka.actors.runtime import init_ray
from rafka.pipelines import topics as pipeline_topics
from rafka.pipelines.spark import start_spark, stop_spark
from rafka.pipelines.topics import SPARK_SCHEMA, read_topic, write_topic


def produce(cluster: Cluster, topic: str, records: int, record_size: int) -> None:
    producer = cluster.producer(acks=1)
    value = os.urandom(record_size)
    sent = 0
    while sent < records:
        step = min(10_000, records - sent)
        producer.send_batch(topic, [value] * step)
        sent += step
    producer.flush()
    producer.close()


def count_rows(batches: Any) -> Any:
    """In a Spark task's Python worker: the rows handed over as Arrow batches, counted (a
    writer that keeps them columns needs nothing more of Spark)."""
    rows = sum(batch.num_rows for batch in batches)
    yield pa.RecordBatch.from_pydict({"rows": [rows]})


def timed(repeat: int, run: Callable[[], int], expected: int,
          prepare: Callable[[], None] | None = None) -> list[float]:
    """Seconds of each of `repeat` runs; `prepare` runs before each, untimed."""
    seconds = []
    for _ in range(repeat):
        if prepare is not None:
            prepare()
        started = time.perf_counter()
        count = run()
        seconds.append(time.perf_counter() - started)
        assert count == expected, (count, expected)
    return seconds


def materialised_count(frame: Any) -> int:
    frame = frame.persist()
    count = frame.count()
    frame.unpersist()
    return count


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--record-size", type=int, default=100)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--repeat", type=int, default=3, help="runs of each; medians reported")
    parser.add_argument("--phases", default="read_topic,arrow_handoff,parquet_read,"
                        "create_dataframe,ray_data,ray_data_read_kafka,write_topic,"
                        "write_topic_keyed,write_topic_transactional,"
                        "write_topic_keyed_transactional,parquet_write,python_handoff,"
                        "write_dataset,ray_data_write_kafka")
    parser.add_argument("--plot", help="write a bar chart to this PNG file")
    args = parser.parse_args()
    phases = args.phases.split(",")

    init_ray(log_to_driver=False)
    scratch = tempfile.mkdtemp(prefix="rafka-bench-pipeline-")
    cluster = Cluster.start(brokers=1, name="bench-pipeline", data_dir=scratch + "/data",
                            kafka_listeners="PLAINTEXT://127.0.0.1:0"
                            if {"ray_data_read_kafka", "ray_data_write_kafka"} & set(phases)
                            else None)
    spark = start_spark("rafka-bench", configs={"spark.ui.enabled": "false",
                                                 "spark.ui.showConsoleProgress": "false"})
    seconds: dict[str, list[float]] = {}
    records = args.records
    try:
        cluster.create_topic("bench", partitions=args.partitions, replication_factor=1)
        produce(cluster, "bench", records, args.record_size)
        rows = read_topic(spark, cluster, "bench").toPandas()
        tables = [pa.Table.from_pandas(part, preserve_index=False)
                  for _partition, part in rows.groupby("partition")]
        parquet = os.path.join(scratch, "parquet")
        spark.createDataFrame(rows, SPARK_SCHEMA).write.parquet(parquet)

        def arrow_handoff() -> int:
            refs = [ray.put(table) for table in tables]
            return materialised_count(ray.data.from_arrow_refs(refs).to_spark(spark))

        def ray_data() -> int:
            return pipeline_topics.read_dataset(cluster, "bench").materialize().count()

        def ray_data_read_kafka() -> int:
            return ray.data.read_kafka("bench", bootstrap_servers=cluster.bootstrap_servers()
                                       ).materialize().count()

        written = iter(range(10_000))
        out_topics: list[str] = []

        def new_topic() -> None:
            # Spark's Kafka sink writes to a topic that exists, as Parquet's writes to a
            # directory: creating it is not the write's work, and is not timed.
            for topic in out_topics:
                cluster.delete_topic(topic, wait=False)
            out_topics[:] = [f"bench-out-{next(written)}"]
            cluster.create_topic(out_topics[0], partitions=args.partitions,
                                 replication_factor=1)

        def write() -> int:
            return sum(write_topic(values, cluster, out_topics[0]).values())

        def write_keyed() -> int:
            return sum(write_topic(keyed, cluster, out_topics[0], key_col="key").values())

        def write_transactional() -> int:
            return sum(write_topic(values, cluster, out_topics[0], transactional=True).values())

        def write_keyed_transactional() -> int:
            return sum(write_topic(keyed, cluster, out_topics[0], key_col="key",
                                   transactional=True).values())

        def parquet_write() -> int:
            target = os.path.join(scratch, f"out-{next(written)}")
            values.write.parquet(target)
            shutil.rmtree(target)
            return records

        value_blocks = ray.data.from_arrow([table.select(["value"]) for table in tables])
        value_blocks.materialize()

        def write_blocks() -> int:
            return sum(pipeline_topics.write_dataset(value_blocks, cluster,
                                                     out_topics[0]).values())

        def ray_data_write_kafka() -> int:
            value_blocks.write_kafka(out_topics[0], cluster.bootstrap_servers(),
                                     value_serializer="bytes", ray_remote_args={"num_cpus": 0})
            return records

        def python_handoff() -> int:
            return sum(row["rows"] for row in
                       values.mapInArrow(count_rows, "rows long").collect())

        values = spark.read.parquet(parquet).select("value").persist()
        values.count()
        # Keys of 16 bytes, each row's own: every row is hashed and placed by its key.
        keyed = values.select(F.expr("substring(value, 1, 16)").alias("key"), "value").persist()
        keyed.count()
        runs: dict[str, Callable[[], int]] = {
            "read_topic": lambda: materialised_count(read_topic(spark, cluster, "bench")),
            "arrow_handoff": arrow_handoff,
            "parquet_read": lambda: materialised_count(spark.read.parquet(parquet)),
            "create_dataframe": lambda: materialised_count(
                spark.createDataFrame(rows, SPARK_SCHEMA)),
            "ray_data": ray_data,
            "ray_data_read_kafka": ray_data_read_kafka,
            "write_topic": write,
            "write_topic_keyed": write_keyed,
            "write_topic_transactional": write_transactional,
            "write_topic_keyed_transactional": write_keyed_transactional,
            "parquet_write": parquet_write,
            "python_handoff": python_handoff,
            "write_dataset": write_blocks,
            "ray_data_write_kafka": ray_data_write_kafka,
        }
        for phase in phases:
            if phase == "ray_data" and not hasattr(pipeline_topics, "read_dataset"):
                continue  # before read_dataset existed
            writes = phase.startswith("write_") or phase == "ray_data_write_kafka"
            seconds[phase] = timed(args.repeat, runs[phase], records,
                                   new_topic if writes else None)
    finally:
        stop_spark()
        cluster.shutdown()
        shutil.rmtree(scratch, ignore_errors=True)

    result: dict[str, Any] = {"records": records, "record_size": args.record_size,
                              "partitions": args.partitions, "repeat": args.repeat}
    rates = {}
    for phase, runs_s in seconds.items():
        median = statistics.median(runs_s)
        rates[phase] = records / median
        result[phase] = {"seconds": [round(s, 3) for s in runs_s],
                         "records_per_s": int(rates[phase])}
    for name, (numerator, denominator) in {
        "read_topic_vs_arrow_handoff": ("read_topic", "arrow_handoff"),
        "read_topic_vs_create_dataframe": ("read_topic", "create_dataframe"),
        "ray_data_read_kafka_vs_ray_data": ("ray_data_read_kafka", "ray_data"),
        "write_topic_vs_parquet_write": ("write_topic", "parquet_write"),
        "write_topic_keyed_vs_parquet_write": ("write_topic_keyed", "parquet_write"),
        "python_handoff_vs_parquet_write": ("python_handoff", "parquet_write"),
        "write_topic_vs_python_handoff": ("write_topic", "python_handoff"),
        "write_dataset_vs_ray_data_write_kafka": ("write_dataset", "ray_data_write_kafka"),
        "write_topic_transactional_vs_write_topic": ("write_topic_transactional",
                                                     "write_topic"),
        "write_topic_keyed_transactional_vs_write_topic_keyed": (
            "write_topic_keyed_transactional", "write_topic_keyed"),
    }.items():
        if numerator in rates and denominator in rates:
            result[name] = round(rates[numerator] / rates[denominator], 2)
    print(json.dumps(result, indent=2))
    if args.plot:
        try:
            import matplotlib

            matplotlib.use("Agg")
            import matplotlib.pyplot as plt
        except ImportError:
            print("matplotlib is not installed: no plot")
        else:
            plt.bar(list(rates), list(rates.values()))
            plt.xticks(rotation=30, ha="right")
            plt.ylabel("records/s (median)")
            plt.title(f"{records} records of {args.record_size} B")
            plt.tight_layout()
            plt.savefig(args.plot)


if __name__ == "__main__":
    main()
