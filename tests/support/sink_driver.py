"""A topic-to-topic stream with an exactly-once output, in a driver process of its own, for
tests that kill drivers and executors while it writes.

    python -m tests.support.sink_driver RAY_ADDRESS ZK CLUSTER SOURCE SINK CHECKPOINT \
        MAX_OFFSETS

Each source record's output is its value with "!" appended, under its key. The stream runs
until it has read everything there when it started (`availableNow`), in batches of at most
MAX_OFFSETS records, then the process exits 0.
"""

from __future__ import annotations

import sys


def main() -> None:
    ray_address, zk, name, source, sink, checkpoint, max_offsets = sys.argv[1:8]

    from pyspark.sql import functions as F

    from rafka import Cluster
    from rafka.pipelines.spark import start_spark, stop_spark
    from rafka.pipelines.streaming import stream_topic

    cluster = Cluster.connect(zk, name, ray_address=ray_address)
    spark = start_spark("rafka-sink-driver", configs={"spark.ui.enabled": "false"})

    def enrich(frame, _batch_id: int):
        return frame.select("key", F.concat("value", F.lit("!")).alias("value"))

    stream = stream_topic(spark, cluster, source, None, enrich, checkpoint=checkpoint,
                          output_topic=sink, options={"startingOffsets": "earliest"},
                          trigger="availableNow", max_records_per_batch=int(max_offsets))
    try:
        stream.await_termination(600)
        if stream.exception() is not None:
            raise stream.exception()
    finally:
        stop_spark()
        cluster.close()


if __name__ == "__main__":
    main()
