"""`rafka demo`: the embedded stack end to end, on this machine."""

from __future__ import annotations

import argparse
import time

import ray

from actors.stack import LocalStack
from pipelines.spark import start_spark, stop_spark


def register(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser(
        "demo",
        help="start the embedded stack (ZooKeeper, Ray, Spark through RayDP), check it, stop it",
    )
    parser.add_argument("--data-dir", help="where ZooKeeper keeps its data (default: a temp dir)")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    started = time.monotonic()
    print("starting the embedded stack: ZooKeeper, Ray, Spark through RayDP ...", flush=True)
    with LocalStack.start(data_dir=args.data_dir) as stack:
        health = stack.health()
        spark = start_spark("rafka-demo", configs={"spark.ui.enabled": "false"})
        try:
            frame = spark.range(1000).selectExpr("id", "id % 7 AS key")
            dataset = ray.data.from_spark(frame)
            back = dataset.to_spark(spark)
            total = back.groupBy().sum("id").collect()[0][0]
            health["spark"] = {
                "version": spark.version,
                "round trip": f"{dataset.count()} rows to a Ray Dataset and back, sum {total}",
            }
            healthy = total == sum(range(1000)) and health["zookeeper"]["mode"] == "standalone"
        finally:
            stop_spark()
        for part, facts in health.items():
            print(f"{part:>10}: " + ", ".join(f"{key} {value}" for key, value in facts.items()))
    print(f"stack stopped; {'healthy' if healthy else 'NOT HEALTHY'} "
          f"({time.monotonic() - started:.1f} s)")
    return 0 if healthy else 1
