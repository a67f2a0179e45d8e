"""A batch `write_topic` in a driver process of its own, for tests that kill its executor.

    python -m tests.support.write_driver RAY_ADDRESS ZK CLUSTER TOPIC ROWS WRITE_ID OUTPUT

Writes the numbers 0 .. ROWS-1 (as text, in two Spark partitions) to TOPIC under WRITE_ID,
writes the per-partition counts `write_topic` returns to OUTPUT as JSON, and exits 0.
"""

from __future__ import annotations

import json
import sys


def main() -> None:
    ray_address, zk, name, topic, rows, write_id, output = sys.argv[1:8]

    from pyspark.sql import functions as F

    from rafka import Cluster
    from rafka.pipelines.spark import start_spark, stop_spark
    from rafka.pipelines.topics import write_topic

    cluster = Cluster.connect(zk, name, ray_address=ray_address)
    spark = start_spark("rafka-write-driver", configs={"spark.ui.enabled": "false"})
    try:
        frame = spark.range(0, int(rows), numPartitions=2).select(
            F.col("id").cast("string").alias("value"))
        counts = write_topic(frame, cluster, topic, write_id=write_id)
        with open(output, "w") as out:
            json.dump({str(partition): count for partition, count in counts.items()}, out)
    finally:
        stop_spark()
        cluster.close()


if __name__ == "__main__":
    main()
