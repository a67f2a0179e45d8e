"""A stream's checkpoint: which offsets each batch reads, written before the batch runs, and
which batches finished, written after; laid out as Spark's own checkpoint is.

    PATH/metadata            {"id": ..., "source": ...}: the stream it belongs to
    PATH/offsets/<batch id>  {"ranges": {"topic": {"partition": [start, until]}},
                              "readTasks": n}: the batch's ranges, and how many Spark
                              tasks read them (so a rerun splits them the same way)
    PATH/commits/<batch id>  written once the batch's function returned

Each file is written whole or not at all (a temporary file, fsync, rename, fsync of the
directory), so a driver killed at any point leaves either the old state or the new one. A
restarted stream (`TopicStream`) reads it back: a batch with offsets and no commit ran
partly, and runs again with exactly the same ranges and the same id; otherwise the next batch
starts where the last one ended. As Spark, it keeps the last `RETAINED_BATCHES` batches.
"""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any, NamedTuple

from rafka.common.errors import RafkaError
from rafka.pipelines.source_options import OffsetRanges

# Spark's spark.sql.streaming.minBatchesToRetain.
RETAINED_BATCHES = 100


class CheckpointError(RafkaError, ValueError):
    """The checkpoint belongs to another stream, or cannot be read."""


class PlannedBatch(NamedTuple):
    batch_id: int
    ranges: OffsetRanges
    committed: bool
    read_tasks: int


class StreamCheckpoint:
    def __init__(self, path: str | os.PathLike[str], source: Mapping[str, Any]) -> None:
        """Open (or start) the checkpoint at `path` for a stream reading `source` (its
        options, as JSON): one written by a stream of another source is refused, as Spark
        refuses a checkpoint whose query changed its sources."""
        self.path = Path(path)
        self.offsets_dir = self.path / "offsets"
        self.commits_dir = self.path / "commits"
        for directory in (self.offsets_dir, self.commits_dir):
            directory.mkdir(parents=True, exist_ok=True)
        metadata = self.path / "metadata"
        source = json.loads(json.dumps(source, sort_keys=True))
        if metadata.exists():
            stored = self._read(metadata)
            if stored.get("source") != source:
                raise CheckpointError(
                    f"checkpoint {self.path} belongs to a stream of {stored.get('source')}, "
                    f"not of {source}: give this stream a checkpoint of its own")
            self.stream_id = stored["id"]
        else:
            self.stream_id = uuid.uuid4().hex
            write_json_atomically(metadata, {"id": self.stream_id, "source": source})

    def last_batch(self) -> PlannedBatch | None:
        """The newest batch planned, and whether it finished."""
        ids = self._ids(self.offsets_dir)
        if not ids:
            return None
        batch_id = ids[-1]
        stored = self._read(self.offsets_dir / str(batch_id))
        try:
            ranges = {(topic, int(partition)): (int(start), int(until))
                      for topic, partitions in stored["ranges"].items()
                      for partition, (start, until) in partitions.items()}
            read_tasks = int(stored["readTasks"])
        except (AttributeError, KeyError, TypeError, ValueError):
            raise CheckpointError(f"{self.offsets_dir / str(batch_id)} does not hold offset "
                                  "ranges: the checkpoint is damaged") from None
        return PlannedBatch(batch_id, ranges, (self.commits_dir / str(batch_id)).exists(),
                            read_tasks)

    def plan(self, batch_id: int, ranges: OffsetRanges, read_tasks: int) -> None:
        """Record the ranges batch `batch_id` reads, and by how many Spark tasks, before it
        runs."""
        document: dict[str, dict[str, list[int]]] = {}
        for (topic, partition), (start, until) in sorted(ranges.items()):
            document.setdefault(topic, {})[str(partition)] = [start, until]
        write_json_atomically(self.offsets_dir / str(batch_id),
                          {"ranges": document, "readTasks": read_tasks})

    def commit(self, batch_id: int) -> None:
        """Record that batch `batch_id` finished; forget batches older than the retained."""
        write_json_atomically(self.commits_dir / str(batch_id), {"batch": batch_id})
        for directory in (self.offsets_dir, self.commits_dir):
            for old in self._ids(directory):
                if old <= batch_id - RETAINED_BATCHES:
                    (directory / str(old)).unlink(missing_ok=True)

    def _ids(self, directory: Path) -> list[int]:
        return sorted(int(entry.name) for entry in directory.iterdir() if entry.name.isdigit())

    def _read(self, path: Path) -> Any:
        try:
            return json.loads(path.read_text())
        except (OSError, ValueError) as error:
            raise CheckpointError(f"cannot read {path}: {error}; the checkpoint is damaged"
                                  ) from None


def write_json_atomically(path: Path, document: Any) -> None:
    """`document` as JSON at `path`, whole or not at all, and durably: a temporary file,
    fsync, rename, fsync of the directory."""
    temporary = path.with_name(f".{path.name}.{uuid.uuid4().hex}.tmp")
    with open(temporary, "w") as out:
        json.dump(document, out)
        out.flush()
        os.fsync(out.fileno())
    os.replace(temporary, path)
    directory = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(directory)
    finally:
        os.close(directory)
