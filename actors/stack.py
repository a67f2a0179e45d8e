"""The processes a rafka cluster runs on: ZooKeeper (embedded unless given) and Ray (local unless
given). `Cluster.start()` builds on this; `rafka demo` shows it healthy."""

from __future__ import annotations

import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import ray

from actors.runtime import init_ray
from coordination.embedded import EmbeddedZooKeeper, ZooKeeperAddress, four_letter_word


@dataclass
class LocalStack:
    """ZooKeeper plus Ray, started here or joined; `stop()` stops only what `start()` started."""

    data_dir: Path
    zk_address: ZooKeeperAddress
    zookeeper: EmbeddedZooKeeper | None = None
    started_ray: bool = False
    _temporary: tempfile.TemporaryDirectory | None = field(default=None, repr=False)

    @classmethod
    def start(
        cls,
        *,
        zk: str | None = None,
        ray_address: str | None = None,
        data_dir: str | Path | None = None,
        num_cpus: int | None = None,
    ) -> LocalStack:
        temporary = None
        if data_dir is None:
            temporary = tempfile.TemporaryDirectory(prefix="rafka-")
            data_dir = temporary.name
        data_dir = Path(data_dir).resolve()
        data_dir.mkdir(parents=True, exist_ok=True)
        zookeeper = None
        if zk is None:
            zookeeper = EmbeddedZooKeeper(data_dir / "zookeeper").start()
            address = zookeeper.address
        else:
            address = ZooKeeperAddress.parse(zk)
        started_ray = not ray.is_initialized()
        try:
            init_ray(ray_address, num_cpus=num_cpus)
        except BaseException:
            if zookeeper is not None:
                zookeeper.stop()
            raise
        return cls(data_dir, address, zookeeper, started_ray, temporary)

    def health(self) -> dict[str, dict[str, object]]:
        """What a user checks first: is ZooKeeper serving, how big is Ray."""
        host, port = self.zk_address.hosts[0]
        answer = four_letter_word(host, port, "srvr")
        mode = "not serving"
        for line in answer.splitlines():
            if line.startswith("Mode:"):
                mode = line.removeprefix("Mode:").strip()
        resources = ray.cluster_resources()
        return {
            "zookeeper": {
                "address": str(self.zk_address),
                "mode": mode,
                "embedded": self.zookeeper is not None,
                "pid": self.zookeeper.pid if self.zookeeper else None,
            },
            "ray": {
                "version": ray.__version__,
                "nodes": sum(1 for node in ray.nodes() if node["Alive"]),
                "cpus": resources.get("CPU", 0),
            },
        }

    def stop(self) -> None:
        if self.started_ray and ray.is_initialized():
            ray.shutdown()
        if self.zookeeper is not None:
            self.zookeeper.stop()
        if self._temporary is not None:
            self._temporary.cleanup()

    def __enter__(self) -> LocalStack:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()
