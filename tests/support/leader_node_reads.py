"""Where `stream_dataset`'s blocks are made, on a Ray of several nodes: a process of its own.

    python -m tests.support.leader_node_reads ZK_CHROOT DATA_DIR RESULT

Starts a Ray of four nodes on this machine (`ray.cluster_utils`: a head and three nodes, each
a raylet and object store of its own, each offering one `rafka_broker`), a cluster of three
brokers on it (one per node), a topic of three partitions, and reads one batch. RESULT gets,
for every block of the batch, the partitions its rows came from, the node of each one's
leader, and the nodes Ray's object directory says hold the block, asked before anything read
it (a read elsewhere would add a copy there); and, for the training example's pool of
workers (pipelines/examples/topic_training.py), the partitions each reads, the node it runs on
and the nodes leading its partitions.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def main() -> None:
    zk, data_dir, result_path = sys.argv[1:4]

    import pyarrow as pa
    import ray
    from ray.cluster_utils import Cluster as RayCluster
    from ray.experimental import get_object_locations

    from rafka import Cluster, stream_dataset
    from rafka.pipelines.examples.topic_training import start_workers
    from tests.support.cluster import TEST_BROKER_CONFIG

    nodes = RayCluster(initialize_head=True, head_node_args={"num_cpus": 1})
    cluster = None
    try:
        for _ in range(3):
            nodes.add_node(num_cpus=0, resources={"rafka_broker": 1})
        nodes.wait_for_nodes()
        ray.init(address=nodes.address, namespace="leader-node-reads")
        cluster = Cluster.start(3, name="leader-node-reads", zk=zk, data_dir=data_dir,
                                broker_config=TEST_BROKER_CONFIG,
                                broker_resources={"rafka_broker": 1},
                                ray_address=nodes.address)
        cluster.create_topic("spread", partitions=3, replication_factor=1)
        producer = cluster.producer(acks="all")
        # 1 KiB values, 200 KiB a partition: Ray hands a result under 100 KiB back inline,
        # with the call's answer, instead of leaving it in the object store where it was made.
        for i in range(600):
            producer.send("spread", value=f"v{i}".encode().ljust(1024, b"."), partition=i % 3)
        producer.flush()
        producer.close()

        node_of_broker = {
            broker["id"]: ray.get(ray.get_actor(broker["actor"], namespace=cluster.namespace)
                                  .describe.remote())["node_id"]
            for broker in cluster.brokers()}
        leaders = {partition["partition"]: partition["leader"]
                   for partition in cluster.describe_topic("spread")["partitions"]}
        with stream_dataset(cluster, "spread", starting_offsets="earliest",
                            trigger="once") as stream:
            batch = next(stream)
        refs = batch.dataset.to_arrow_refs()
        locations = get_object_locations(refs)  # before any read copies a block elsewhere
        blocks = []
        for ref in refs:
            table: pa.Table = ray.get(ref)
            partitions = sorted(set(table.column("partition").to_pylist()))
            blocks.append({
                "rows": table.num_rows,
                "partitions": partitions,
                "leader_nodes": sorted({node_of_broker[leaders[p]] for p in partitions}),
                "held_on": sorted(locations[ref]["node_ids"]),
            })
        # The training example's pool: a worker per leading node, reading what it leads.
        workers = start_workers(cluster, "spread", Path(data_dir) / "training")
        pool = [{**where, "leader_nodes": sorted({node_of_broker[leaders[p]]
                                                  for p in where["partitions"]})}
                for where in ray.get([worker.where.remote() for worker in workers])]
        model = ray.get([worker.train.remote() for worker in workers])
        Path(result_path).write_text(json.dumps({
            "nodes": sorted(node["NodeID"] for node in ray.nodes() if node["Alive"]),
            "broker_nodes": node_of_broker, "blocks": blocks, "pool": pool,
            "learned": sum(sum(part.values()) for part in model)}))
    finally:
        if cluster is not None:
            cluster.shutdown()
        ray.shutdown()
        nodes.shutdown()


if __name__ == "__main__":
    main()
