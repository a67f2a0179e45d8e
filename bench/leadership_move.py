"""Time for leadership to move after its broker is killed (one run), on whichever rafka imports:
run from a checkout with `PYTHONPATH=$PWD python bench/leadership_move.py`."""

from __future__ import annotations

import time

import rafka
from rafka import Cluster
from tests.support.cluster import TEST_BROKER_CONFIG


def _leaders(cluster: Cluster) -> list[int]:
    return [p["leader"] for p in cluster.describe_topic("moves")["partitions"]]


def main() -> None:
    print("rafka from", rafka.__file__)
    cluster = Cluster.start(brokers=3, broker_config=dict(TEST_BROKER_CONFIG))
    try:
        cluster.create_topic("moves", partitions=3, replication_factor=3,
                             config={"min.insync.replicas": 2})
        producer = cluster.producer(acks="all")
        producer.send("moves", value=b"x").result(30)
        victim = _leaders(cluster)[0]
        led = [p for p, leader in enumerate(_leaders(cluster)) if leader == victim]
        start = time.monotonic()
        cluster.kill_broker(victim)
        while any(_leaders(cluster)[p] in (victim, -1) for p in led):
            time.sleep(0.05)
        moved = time.monotonic() - start
        producer.send("moves", value=b"y").result(30)
        written = time.monotonic() - start
        print(f"leadership moved {moved:.2f} s, a write acknowledged {written:.2f} s "
              "after the kill")
        producer.close()
    finally:
        cluster.shutdown()


if __name__ == "__main__":
    main()
