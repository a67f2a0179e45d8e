"""Names of rafka's actors in a cluster's Ray namespace: how any process finds any actor."""

from __future__ import annotations


def cluster_namespace(cluster_name: str) -> str:
    return f"rafka-{cluster_name}"


def broker_name(broker_id: int) -> str:
    return f"broker-{broker_id}"


def replica_name(topic: str, partition: int, broker_id: int) -> str:
    # Topic names are [A-Za-z0-9._-] (validated), so this is unambiguous: the partition and
    # broker ids are the last two dash-separated parts.
    return f"replica-{topic}-{partition}-{broker_id}"
