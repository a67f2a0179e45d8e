"""Names of rafka's actors in a cluster's Ray namespace (how any process finds any actor), and
of the partition directories in a broker's data directory.

Actor names are made and read here only.
"""

from __future__ import annotations

import zlib
from pathlib import Path

BROKER_PREFIX = "broker-"
REPLICA_HOST_PREFIX = "replica-host-"


def cluster_namespace(cluster_name: str) -> str:
    return f"rafka-{cluster_name}"


def broker_name(broker_id: int) -> str:
    return f"{BROKER_PREFIX}{broker_id}"


def broker_id_of(name: str) -> int | None:
    """The id in a broker actor's name; None if `name` is not one."""
    suffix = name[len(BROKER_PREFIX):] if name.startswith(BROKER_PREFIX) else ""
    return int(suffix) if suffix.isdigit() else None


def replica_host_name(broker_id: int, topic: str, partition: int, pool_size: int) -> str:
    """The replica-host actor of broker `broker_id` that holds `topic`-`partition`.

    With a pool, a topic's partitions go round the pool from a place its name picks, so that
    the partitions of one topic spread evenly and each topic starts somewhere else. With no
    pool (0), every replica has a host of its own. Topic names are [A-Za-z0-9._-] (validated),
    so the broker id, always right after the prefix, is unambiguous.
    """
    if pool_size <= 0:
        return f"{REPLICA_HOST_PREFIX}{broker_id}-{topic}-{partition}"
    return _pool_host_name(broker_id, (zlib.crc32(topic.encode()) + partition) % pool_size)


def pool_host_names(broker_id: int, pool_size: int) -> list[str]:
    """Every host of broker `broker_id`'s pool (none without a pool)."""
    return [_pool_host_name(broker_id, index) for index in range(max(pool_size, 0))]


def _pool_host_name(broker_id: int, index: int) -> str:
    return f"{REPLICA_HOST_PREFIX}{broker_id}-{index}"


def is_replica_host_of(name: str, broker_id: int) -> bool:
    return name.startswith(f"{REPLICA_HOST_PREFIX}{broker_id}-")


def partition_log_dir(data_dir: Path, topic: str, partition: int) -> Path:
    """A replica's log directory in its broker's data directory: `<topic>-<partition>`, as in
    Kafka (docs/storage.md)."""
    return data_dir / f"{topic}-{partition}"
