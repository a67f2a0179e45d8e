"""Training from a topic where its records lie: a pool of Ray actors, one per node that leads
partitions, each reading the partitions led on its node, each keeping its model and its
stream's offsets in one checkpoint, so that a pool started again resumes exactly.

    from rafka import Cluster
    from rafka.pipelines.examples.topic_training import train
    model = train(Cluster.connect("127.0.0.1:2181"), "events", "/data/training")

The model is deliberately small, a frequency table of the records' values (a `Counter`), so
that what matters shows: each worker's step and its checkpoint go together, written whole or
not at all, and a worker started from it reads right after the last batch it trained on.

The plan (which partitions each worker reads) is made once, from where the leaders are
(`Cluster.leader_nodes`), and kept in the checkpoint directory: a stream's checkpoint belongs
to what it reads, so a pool started again reads the same groups of partitions. Each worker is
placed on the node leading its first partition when the pool starts (Ray's node affinity, not
soft: a soft one let Ray place workers elsewhere on an idle cluster of four nodes). A leader
that moves later leaves the worker reading across the network, as before it moved.
"""

from __future__ import annotations

import json
import os
from collections import Counter
from pathlib import Path
from typing import Any

import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from rafka.actors.cluster import Cluster
from rafka.pipelines.checkpoint import write_json_atomically
from rafka.pipelines.dataset_streams import stream_dataset

PLAN_FILE = "plan.json"


def plan_workers(leader_nodes: dict[int, str]) -> list[list[int]]:
    """The partitions each worker reads: those led on one node, a worker per node (pure)."""
    by_node: dict[str, list[int]] = {}
    for partition, node in sorted(leader_nodes.items()):
        by_node.setdefault(node, []).append(partition)
    return sorted(by_node.values())


@ray.remote(num_cpus=0)
class TrainingWorker:
    """Trains on `partitions` of `topic`; its checkpoint is `checkpoint_path`, one JSON file
    holding the model and the stream's checkpoint after the last batch trained on."""

    def __init__(self, zk: str, cluster_name: str, topic: str, partitions: list[int],
                 checkpoint_path: str) -> None:
        self.cluster = Cluster.connect(zk, cluster_name, ray_address=None)
        self.topic, self.partitions = topic, partitions
        self.path = Path(checkpoint_path)
        self.model: Counter[str] = Counter()
        self.stream_checkpoint: dict[str, Any] | None = None
        if self.path.exists():
            stored = json.loads(self.path.read_text())
            self.model = Counter(stored["model"])
            self.stream_checkpoint = stored["stream"]

    def where(self) -> dict[str, Any]:
        """The Ray node this worker runs on, and the partitions it reads."""
        return {"node": ray.get_runtime_context().get_node_id(), "partitions": self.partitions}

    def train(self, batch_size: int = 500) -> dict[str, int]:
        """Train on what the partitions hold now, `batch_size` records a step at most; the
        model so far."""
        with stream_dataset(self.cluster, options={"assign": {self.topic: self.partitions}},
                            starting_offsets="earliest", checkpoint=self.stream_checkpoint,
                            trigger="availableNow", max_records_per_batch=batch_size) as stream:
            for batch in stream:
                step = Counter(row["value"].decode() for row in batch.dataset.iter_rows())
                self.model.update(step)
                self.stream_checkpoint = batch.checkpoint
                self._save()
        return dict(self.model)

    def _save(self) -> None:
        """The model and the offsets after the batch it learned last, in one file written
        whole or not at all."""
        write_json_atomically(self.path, {"model": self.model, "stream": self.stream_checkpoint})


def start_workers(cluster: Cluster, topic: str, checkpoint_dir: str | os.PathLike[str]
                  ) -> list[Any]:
    """The pool: a worker per group of the plan (made now, or read back from
    `checkpoint_dir`), each on the node that leads its first partition."""
    directory = Path(checkpoint_dir)
    directory.mkdir(parents=True, exist_ok=True)
    leaders = cluster.leader_nodes(topic)
    plan_path = directory / PLAN_FILE
    if plan_path.exists():
        groups = json.loads(plan_path.read_text())["groups"]
    else:
        groups = plan_workers(leaders)
        plan_path.write_text(json.dumps({"topic": topic, "groups": groups}))
    workers = []
    for index, partitions in enumerate(groups):
        node = leaders.get(partitions[0])
        options = {} if node is None else {
            "scheduling_strategy": NodeAffinitySchedulingStrategy(node, soft=False)}
        workers.append(TrainingWorker.options(**options).remote(  # type: ignore[attr-defined]
            str(cluster.stack.zk_address), cluster.name, topic, partitions,
            str(directory / f"worker-{index}.json")))
    return workers


def train(cluster: Cluster, topic: str, checkpoint_dir: str | os.PathLike[str], *,
          batch_size: int = 500) -> Counter[str]:
    """Train a pool on everything `topic` holds now, resuming from `checkpoint_dir`; the
    model, the workers' models together."""
    workers = start_workers(cluster, topic, checkpoint_dir)
    try:
        models = ray.get([worker.train.remote(batch_size) for worker in workers])
    finally:
        for worker in workers:
            ray.kill(worker)
    total: Counter[str] = Counter()
    for model in models:
        total.update(model)
    return total
