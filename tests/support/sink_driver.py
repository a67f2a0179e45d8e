"""A topic-to-topic stream with an exactly-once output, in a driver process of its own, for
tests that kill drivers and executors while it writes.

    python -m tests.support.sink_driver RAY_ADDRESS ZK CLUSTER SOURCE SINK CHECKPOINT \
        MAX_OFFSETS [transactional]

Each source record's output is its value with "!" appended, under its key, with a header
"batch" naming the batch that wrote it and a header "pad" of 1 KiB. The stream runs until it
has read everything there when it started (`availableNow`), in batches of at most MAX_OFFSETS
records, then the process exits 0. With "transactional", each batch's output is written in a
transaction.
"""

from __future__ import annotations

import sys

PAD_BYTES = 1024


def main() -> None:
    ray_address, zk, name, source, sink, checkpoint, max_offsets = sys.argv[1:8]
    transactional = sys.argv[8:] == ["transactional"]

    from pyspark.sql import functions as F

    from rafka import Cluster
    from rafka.pipelines.spark import start_spark, stop_spark
    from rafka.pipelines.streaming import stream_topic

    cluster = Cluster.connect(zk, name, ray_address=ray_address)
    spark = start_spark("rafka-sink-driver", configs={"spark.ui.enabled": "false"})

    def enrich(frame, batch_id: int):
        batch = F.struct(F.lit("batch").alias("key"),
                         F.lit(str(batch_id)).cast("binary").alias("value"))
        # 1 KiB more per record: the writing of a batch lasts long enough for a kill to land
        # within it, not only between batches.
        pad = F.struct(F.lit("pad").alias("key"), F.lit(b"." * PAD_BYTES).alias("value"))
        return frame.select("key", F.concat("value", F.lit("!")).alias("value"),
                            F.array(batch, pad).alias("headers"))

    stream = stream_topic(spark, cluster, source, None, enrich, checkpoint=checkpoint,
                          output_topic=sink, transactional=transactional,
                          options={"startingOffsets": "earliest"}, max_attempts=5,
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
