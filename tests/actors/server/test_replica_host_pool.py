"""A broker's pool of replica hosts, with the hosts as names, their calls and the registrations
as plain coroutines: no Ray, no ZooKeeper.

- A broker whose ZooKeeper session outlived a cut gives its hosts their replicas back
  (`restore_all`); nothing else would, so a host whose restore failed is tried again.
- A follower told of a leader whose registration the broker has not read gets no guessed host
  (one that may not exist, followed for good): the registrations are read again until it is
  found, and the follower is then told where its leader is."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from rafka.actors.messages import LeaderAndIsrRequest, PartitionErrors
from rafka.actors.naming import replica_host_name
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


def test_a_follower_of_a_leader_not_registered_yet_learns_its_host_once_it_is(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(replica_host_pool, "LEADER_LOOKUP_RETRY_S", 0.01)
    hosts = pool()
    registered: dict[int, int] = {0: 2}  # broker 1, the leader, not yet
    applied: list[LeaderAndIsrRequest] = []

    async def leader_hosts(leaders: set[int]) -> dict[int, int]:
        return dict(registered)

    async def apply(by_host: dict[str, list[LeaderAndIsrRequest]]) -> PartitionErrors:
        applied.extend(request for requests in by_host.values() for request in requests)
        return PartitionErrors({})

    monkeypatch.setattr(hosts, "_leader_hosts", leader_hosts)
    monkeypatch.setattr(hosts, "_apply_on_hosts", apply)
    request = LeaderAndIsrRequest("orders", 3, 1, 0, (0, 1), (1, 0), 5, 7)

    async def scenario() -> None:
        await hosts.leader_and_isr(5, [request])
        assert [r.leader_host for r in applied] == [None]
        await asyncio.sleep(0.05)
        assert len(applied) == 1, "nothing to tell while the leader is not registered"
        registered[1] = 3
        for _ in range(100):
            if len(applied) == 2:
                break
            await asyncio.sleep(0.01)
        assert applied[1].leader_host == replica_host_name(1, "orders", 3, 3)
        assert (applied[1].leader_epoch, applied[1].zk_version) == (0, 7)
        await asyncio.sleep(0.05)
        assert len(applied) == 2, "told once"

    asyncio.run(scenario())
