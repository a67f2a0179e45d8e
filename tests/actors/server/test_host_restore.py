"""A broker whose ZooKeeper session outlived a cut gives its hosts their replicas back
(`ReplicaHostPool.restore_all`); nothing else would, so a host whose restore failed is tried
again until it took them. The hosts here are names and the restore of one a plain coroutine:
no Ray, no ZooKeeper."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from rafka.actors.server import replica_host_pool
from rafka.actors.server.replica_host_pool import ReplicaHostPool


def pool() -> ReplicaHostPool:
    hosts = ReplicaHostPool(0, "test", "node", Path("/nonexistent"), {}, 2, lambda: None,
                            lambda: ("127.0.0.1:1", b"token"))
    hosts.hosts = {"host-a": object(), "host-b": object()}
    return hosts


def test_a_host_whose_restore_failed_is_tried_again_until_it_took_its_replicas(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(replica_host_pool, "RESTORE_RETRY_S", 0.01)
    hosts = pool()
    tries: dict[str, int] = {}

    async def recreate(name: str) -> None:
        tries[name] = tries.get(name, 0) + 1
        if name == "host-b" and tries[name] < 3:
            raise ConnectionError("ZooKeeper still settling")

    monkeypatch.setattr(hosts, "_recreate_host", recreate)

    async def scenario() -> None:
        await asyncio.wait_for(hosts.restore_all(), 5)

    asyncio.run(scenario())
    assert tries == {"host-a": 1, "host-b": 3}


def test_a_restore_stops_when_cancelled(monkeypatch: pytest.MonkeyPatch) -> None:
    """A new fence cancels a restore still trying: it must not lead again what was fenced."""
    monkeypatch.setattr(replica_host_pool, "RESTORE_RETRY_S", 0.01)
    hosts = pool()
    tries: list[str] = []

    async def recreate(name: str) -> None:
        tries.append(name)
        raise ConnectionError("ZooKeeper still settling")

    monkeypatch.setattr(hosts, "_recreate_host", recreate)

    async def scenario() -> None:
        restoring = hosts.restore_all()
        await asyncio.sleep(0.05)
        restoring.cancel()
        with pytest.raises(asyncio.CancelledError):
            await restoring
        stopped_at = len(tries)
        await asyncio.sleep(0.05)
        assert len(tries) == stopped_at

    asyncio.run(scenario())
    assert len(tries) > 2
