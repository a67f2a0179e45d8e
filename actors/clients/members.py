"""Consumer groups that rafka runs itself: one Consumer actor per member (the pipelines use
them), and `describe_group`, which reports members, assignment, offsets and lag."""

from __future__ import annotations

import contextlib
from collections.abc import Iterable
from typing import Any

import ray

from rafka.actors.clients.group_consumer import GroupConsumer
from rafka.coordination.security import ClusterCredentials


class ConsumerMember:
    """A Ray actor holding one group member; it reads in its own process."""

    def __init__(
        self, namespace: str, zk_address: str, cluster_name: str, topics: list[str],
        config: dict[str, Any], zk_credentials: ClusterCredentials | None = None,
    ) -> None:
        self.consumer = GroupConsumer(namespace, zk_address, cluster_name, topics,
                                      zk_credentials=zk_credentials, **config)

    def member_id(self) -> str:
        return self.consumer.member_id

    def poll(self, timeout_ms: int = 1000, max_records: int | None = None) -> list[tuple]:
        """Records as plain tuples `(topic, partition, offset, timestamp, key, value, headers)`."""
        return [tuple(record) for record in self.consumer.poll(timeout_ms, max_records)]

    def commit(self, offsets: dict[tuple[str, int], int] | None = None) -> None:
        self.consumer.commit(offsets)

    def positions(self) -> dict[tuple[str, int], int]:
        return {(tp.topic, tp.partition): self.consumer.position(*tp)
                for tp in self.consumer.assignment()}

    def assignment(self) -> list[tuple[str, int]]:
        return sorted((tp.topic, tp.partition) for tp in self.consumer.assignment())

    def close(self) -> None:
        self.consumer.close()


ConsumerMemberActor = ray.remote(num_cpus=0, max_restarts=0)(ConsumerMember)


class ConsumerGroupHandle:
    """`cluster.consumer_group(topic, group, members=N)`: N member actors of one group."""

    def __init__(self, group: str, members: list[Any]) -> None:
        self.group = group
        self.members = members

    def poll(self, timeout_ms: int = 1000, max_records: int | None = None) -> list[list[tuple]]:
        """One poll on every member at once; each member's records."""
        return ray.get([m.poll.remote(timeout_ms, max_records) for m in self.members])

    def commit(self) -> None:
        ray.get([m.commit.remote() for m in self.members])

    def assignment(self) -> list[list[tuple[str, int]]]:
        return ray.get([m.assignment.remote() for m in self.members])

    def close(self) -> None:
        for member in self.members:
            with contextlib.suppress(Exception):
                ray.get(member.close.remote(), timeout=30)
            ray.kill(member)
        self.members = []


def start_members(
    cluster: Any, topics: Iterable[str], group: str, count: int, config: dict[str, Any]
) -> ConsumerGroupHandle:
    settings = {**config, "group_id": group}
    members = [
        ConsumerMemberActor.options(namespace=cluster.namespace).remote(
            cluster.namespace, str(cluster.stack.zk_address), cluster.name, sorted(topics),
            settings, cluster.zk_credentials,
        )
        for _ in range(count)
    ]
    # Ray's stubs type an actor's methods as the class's, without .remote.
    ray.get([member.member_id.remote() for member in members])  # type: ignore[union-attr]  # constructed and registered
    return ConsumerGroupHandle(group, members)
