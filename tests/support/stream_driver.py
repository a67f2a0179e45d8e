"""A stream in a driver process of its own, for tests that kill a driver and start another.

    python -m tests.support.stream_driver RAY_ADDRESS ZK CLUSTER TOPIC CHECKPOINT LOG \
        TRIGGER MAX_OFFSETS [KILL_AT_BATCH]

Each batch appends `{"event": "start"|"done", "batch": id, "ranges": ...}` to LOG (flushed and
fsynced before the batch goes on); with KILL_AT_BATCH the process kills itself (SIGKILL)
inside that batch, after its "start" line: a driver lost mid-batch.
"""

from __future__ import annotations

import json
import os
import signal
import sys


def main() -> None:
    ray_address, zk, name, topic, checkpoint, log_path, trigger, max_offsets = sys.argv[1:9]
    kill_at = int(sys.argv[9]) if len(sys.argv) > 9 else None

    from rafka import Cluster
    from rafka.pipelines.spark import start_spark, stop_spark
    from rafka.pipelines.streaming import stream_topic

    cluster = Cluster.connect(zk, name, ray_address=ray_address)
    spark = start_spark("rafka-stream-driver", configs={"spark.ui.enabled": "false"})

    def note(event: str, batch_id: int, frame) -> None:
        ranges = {f"{t}-{p}": list(r) for (t, p), r in sorted(frame.offset_ranges.items())}
        with open(log_path, "a") as out:
            out.write(json.dumps({"event": event, "batch": batch_id, "ranges": ranges,
                                  "pid": os.getpid()}) + "\n")
            out.flush()
            os.fsync(out.fileno())

    def sink(frame, batch_id: int) -> None:
        note("start", batch_id, frame)
        frame.count()
        if batch_id == kill_at:
            os.kill(os.getpid(), signal.SIGKILL)
        note("done", batch_id, frame)

    stream = stream_topic(spark, cluster, topic, None, sink, checkpoint=checkpoint,
                          options={"startingOffsets": "earliest"},
                          trigger=trigger, trigger_interval=0.2,
                          max_records_per_batch=int(max_offsets))
    try:
        stream.await_termination(600)
    finally:
        stop_spark()
        cluster.close()


if __name__ == "__main__":
    main()
