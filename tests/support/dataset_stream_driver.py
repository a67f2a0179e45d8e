"""A `stream_dataset` job in a driver process of its own, for tests that kill it and start
another from what it stored.

    python -m tests.support.dataset_stream_driver RAY_ADDRESS ZK CLUSTER TOPIC STATE_DIR \
        TRIGGER MAX_RECORDS [KILL_AT_BATCH]

The job's output and its checkpoint go together, as a user's job would store them: each batch
is one file, STATE_DIR/batch-<id>.json, written whole or not at all, holding the values the
batch read and the batch's checkpoint. A new run resumes from the newest file's checkpoint.
With KILL_AT_BATCH the process kills itself (SIGKILL) in that batch, after reading its records
and before storing them: a job lost mid-batch.
"""

from __future__ import annotations

import json
import os
import signal
import sys
from pathlib import Path


def newest_checkpoint(state: Path) -> dict | None:
    stored = sorted(state.glob("batch-*.json"), key=lambda path: int(path.stem.split("-")[1]))
    return json.loads(stored[-1].read_text())["checkpoint"] if stored else None


def store(state: Path, batch_id: int, document: dict) -> None:
    temporary = state / f".batch-{batch_id}.tmp"
    with open(temporary, "w") as out:
        json.dump(document, out)
        out.flush()
        os.fsync(out.fileno())
    os.replace(temporary, state / f"batch-{batch_id}.json")


def main() -> None:
    ray_address, zk, name, topic, state_dir, trigger, max_records = sys.argv[1:8]
    kill_at = int(sys.argv[8]) if len(sys.argv) > 8 else None
    state = Path(state_dir)
    state.mkdir(parents=True, exist_ok=True)

    from rafka import Cluster, stream_dataset

    cluster = Cluster.connect(zk, name, ray_address=ray_address)
    try:
        with stream_dataset(cluster, topic, starting_offsets="earliest",
                            checkpoint=newest_checkpoint(state), trigger=trigger,
                            trigger_interval=0.2,
                            max_records_per_batch=int(max_records)) as stream:
            for batch in stream:
                values = [row["value"].decode() for row in batch.dataset.iter_rows()]
                if batch.batch_id == kill_at:
                    os.kill(os.getpid(), signal.SIGKILL)
                store(state, batch.batch_id, {"values": values, "checkpoint": batch.checkpoint,
                                              "pid": os.getpid()})
    finally:
        cluster.close()


if __name__ == "__main__":
    main()
