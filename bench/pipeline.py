"""Records/s from a topic to a materialised Spark DataFrame (read_topic: consumers in Ray tasks,
Arrow, a Ray Dataset, RayDP), beside `spark.createDataFrame` of the same rows from the driver,
measured in the same run. Prints one JSON object; `--plot out.png` draws a bar chart.

    .venv/bin/python bench/pipeline.py --records 200000
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time

from rafka import Cluster
from rafka.actors.runtime import init_ray
from rafka.pipelines.spark import start_spark, stop_spark
from rafka.pipelines.topics import SPARK_SCHEMA, read_topic


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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--record-size", type=int, default=100)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--repeat", type=int, default=3, help="best of this many reads")
    parser.add_argument("--plot", help="write a bar chart to this PNG file")
    args = parser.parse_args()

    init_ray(log_to_driver=False)
    cluster = Cluster.start(brokers=1, name="bench-pipeline", data_dir=tempfile.mkdtemp())
    spark = start_spark("rafka-bench", configs={"spark.ui.enabled": "false",
                                                 "spark.ui.showConsoleProgress": "false"})
    try:
        cluster.create_topic("bench", partitions=args.partitions, replication_factor=1)
        produce(cluster, "bench", args.records, args.record_size)

        topic_seconds = []
        rows = None
        for _ in range(args.repeat):
            started = time.perf_counter()
            frame = read_topic(spark, cluster, "bench").persist()
            count = frame.count()
            topic_seconds.append(time.perf_counter() - started)
            assert count == args.records, count
            if rows is None:
                rows = frame.collect()  # the same rows, for the baseline
            frame.unpersist()

        driver_seconds = []
        for _ in range(args.repeat):
            started = time.perf_counter()
            baseline = spark.createDataFrame(rows, SPARK_SCHEMA).persist()
            assert baseline.count() == args.records
            driver_seconds.append(time.perf_counter() - started)
            baseline.unpersist()

        best_topic, best_driver = min(topic_seconds), min(driver_seconds)
        result = {
            "records": args.records,
            "record_size": args.record_size,
            "partitions": args.partitions,
            "read_topic": {"seconds": round(best_topic, 3),
                           "records_per_s": int(args.records / best_topic)},
            "createDataFrame_from_driver": {"seconds": round(best_driver, 3),
                                            "records_per_s": int(args.records / best_driver)},
            "read_topic_vs_driver": round(best_driver / best_topic, 2),
        }
        print(json.dumps(result, indent=2))
        if args.plot:
            try:
                import matplotlib

                matplotlib.use("Agg")
                import matplotlib.pyplot as plt
            except ImportError:
                print("matplotlib is not installed: no plot")
            else:
                labels = ["read_topic", "createDataFrame (driver)"]
                values = [result["read_topic"]["records_per_s"],
                          result["createDataFrame_from_driver"]["records_per_s"]]
                plt.bar(labels, values)
                plt.ylabel("records/s")
                plt.title(f"{args.records} records of {args.record_size} B to a DataFrame")
                plt.savefig(args.plot)
    finally:
        stop_spark()
        cluster.shutdown()


if __name__ == "__main__":
    main()
