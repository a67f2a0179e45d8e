"""Each part of the stack the tests run on is real: ZooKeeper, Ray and Spark through RayDP."""

from __future__ import annotations

import threading

import ray
from kazoo.client import KazooClient
from kazoo.protocol.states import EventType

from rafka.coordination.embedded import ZooKeeperAddress


def test_ephemeral_znode_disappears_with_its_session(zk_address: ZooKeeperAddress) -> None:
    owner = KazooClient(hosts=str(zk_address))
    watcher = KazooClient(hosts=str(zk_address))
    owner.start(timeout=15)
    watcher.start(timeout=15)
    try:
        owner.create("/brokers/ids/1", b'{"node_id": 1}', ephemeral=True, makepath=True)
        deleted = threading.Event()
        events = []

        def on_change(event) -> None:
            events.append(event)
            if event.type == EventType.DELETED:
                deleted.set()

        data, stat = watcher.get("/brokers/ids/1", watch=on_change)
        assert data == b'{"node_id": 1}'
        assert stat.ephemeralOwner == owner.client_id[0]

        owner.stop()
        assert deleted.wait(10), f"no deletion event, saw {events}"
        assert watcher.exists("/brokers/ids/1") is None
    finally:
        owner.close()
        watcher.stop()
        watcher.close()


def test_chroots_isolate_tests(zookeeper, zk_address: ZooKeeperAddress, zk_client) -> None:
    zk_client.create("/marker", b"mine")
    root = KazooClient(hosts=zookeeper.address.servers)
    root.start(timeout=15)
    try:
        assert root.get(f"{zk_address.chroot}/marker")[0] == b"mine"
        assert root.exists("/marker") is None
    finally:
        root.stop()
        root.close()


@ray.remote(num_cpus=0)
class Echo:
    def answer(self, value: bytes) -> tuple[bytes, int]:
        import os

        return value[::-1], os.getpid()


def test_ray_actor_answers_from_its_own_process(ray_namespace: str) -> None:
    import os

    actor = Echo.options(name="echo", namespace=ray_namespace).remote()
    value, pid = ray.get(actor.answer.remote(b"rafka"), timeout=60)
    assert value == b"akfar"
    assert pid != os.getpid()
    assert ray.get_actor("echo", namespace=ray_namespace) is not None


def test_spark_dataframe_round_trips_through_a_ray_dataset(spark) -> None:
    rows = [(i, f"value-{i}", i * 0.5) for i in range(1000)]
    frame = spark.createDataFrame(rows, "id long, name string, score double")

    dataset = ray.data.from_spark(frame)
    assert dataset.count() == 1000
    assert sorted(dataset.schema().names) == ["id", "name", "score"]

    back = dataset.to_spark(spark)
    assert sorted(tuple(row) for row in back.collect()) == rows
    assert back.groupBy().sum("id").collect()[0][0] == sum(range(1000))
