"""`rafka demo`: the embedded stack end to end on this machine, in under two minutes.

ZooKeeper (embedded), local Ray, three brokers, a replicated topic, a producer writing a click
stream, a consumer group of two, a Spark aggregation through RayDP, a summary table, and a clean
shutdown of everything it started.
"""

from __future__ import annotations

import argparse
import time

import ray

from rafka.actors.cluster import Cluster
from rafka.actors.runtime import init_ray
from rafka.cli.commands.output import table
from rafka.cli.commands.progress import Progress
from rafka.pipelines.examples.clickstream import run as run_clickstream
from rafka.pipelines.spark import start_spark, stop_spark, warm_up_spark


def register(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser(
        "demo",
        help="run the click-stream pipeline on the embedded stack (ZooKeeper, Ray, 3 brokers, "
             "Spark through RayDP), print a summary, and stop everything",
    )
    parser.add_argument("--events", type=int, default=20_000, help="click events to produce")
    parser.add_argument("--brokers", type=int, default=3)
    parser.add_argument("--data-dir", help="where data goes (default: a temporary directory)")
    parser.set_defaults(run=run)


class _Bars:
    """The pipeline's progress callback: a bar per stage (on a terminal only)."""

    def __init__(self) -> None:
        self.bars: dict[str, Progress] = {}

    def __call__(self, stage: str, done: int, total: int) -> None:
        bar = self.bars.get(stage)
        if bar is None:
            bar = self.bars[stage] = Progress(f"  {stage}", total=total, unit="")
        bar.update(done - bar.count)
        if done >= total:
            bar.close()


def _table(summary: dict) -> str:
    rows = [(page["page"], page["views"], page["users"], f"{page['mean_dwell_ms']} ms")
            for page in summary["pages"]]
    grid = table(["page", "views", "users", "mean dwell"], rows)
    return "\n".join(f"  {line}" for line in grid.splitlines())


def run(args: argparse.Namespace) -> int:
    started = time.monotonic()
    print(f"starting the embedded stack: ZooKeeper, Ray, {args.brokers} brokers ...", flush=True)
    # The actors' own logs stay in Ray's log files unless RAFKA_LOG_LEVEL asks for them.
    init_ray()
    cluster = Cluster.start(brokers=args.brokers, name="demo", data_dir=args.data_dir)
    spark = None
    try:
        print(f"  brokers {[b['id'] for b in cluster.brokers()]}, controller "
              f"{cluster.controller()} ({time.monotonic() - started:.0f} s)")
        print("starting Spark through RayDP ...", flush=True)
        spark_started = time.monotonic()
        spark = start_spark("rafka-demo", configs={"spark.ui.enabled": "false",
                                                   "spark.ui.showConsoleProgress": "false"})
        print(f"  Spark {spark.version}, {spark.sparkContext.defaultParallelism} executor "
              f"core(s) ({time.monotonic() - spark_started:.0f} s)", flush=True)
        # Spark warms up while the events are produced and consumed.
        warm_up = warm_up_spark(spark)
        summary = run_clickstream(cluster, spark, events=args.events, progress=_Bars(),
                                  spark_warm_up=warm_up)
        clicks = cluster.describe_topic("clicks")
        print(f"\ntopic clicks: {len(clicks['partitions'])} partitions, replication factor "
              f"{len(clicks['partitions'][0]['replicas'])}, leaders "
              f"{[p['leader'] for p in clicks['partitions']]}")
        print(f"produced {summary['events']} events in {summary['produce_s']:.1f} s; the group "
              f"of 2 read {summary['consumed_by_member']} (partitions "
              f"{summary['partitions_by_member']})")
        waited = summary["spark_warm_up_wait_s"]
        print(f"Spark aggregated them in {summary['spark_s']:.1f} s"
              + (f" (after {waited:.1f} s more of its warm-up)" if waited >= 0.1 else "")
              + f":\n{_table(summary)}")
        print(f"page-views written back per partition: {summary['written_per_partition']}; "
              f"read back: {sum(summary['read_back'].values())} views")
    finally:
        if spark is not None:
            stop_spark()
        cluster.shutdown()
        ray.shutdown()
    ok = summary["consistent"]
    print(f"stack stopped; {'all counts agree' if ok else 'COUNTS DISAGREE'} "
          f"({time.monotonic() - started:.0f} s)")
    return 0 if ok else 1
