"""The offset manager: the leader of a `__consumer_offsets` partition, serving the commits and
offset fetches of the groups mapped to it (`OffsetCache` below is its pure part; the topic's format
is `rafka.actors.offsets_topic`).

A commit is a produce request with acks=all to that partition, so it is answered once the ISR
holds it, as in Kafka; the cache answers fetches and is rebuilt from the log whenever the
replica becomes leader.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from rafka.actors.messages import Appended
from rafka.actors.offsets_topic import OffsetAndMetadata, decode_commit, encode_commit
from rafka.actors.server.replica import LEADER, PartitionReplica
from rafka.common.clock import wall_clock_ms
from rafka.logstore.batch import build_batch, decode_batches


class OffsetCache:
    """Every group's committed offsets, as the log of commits says (newest wins)."""

    def __init__(self) -> None:
        self._groups: dict[str, dict[tuple[str, int], OffsetAndMetadata]] = {}

    def apply(self, key: bytes, value: bytes | None) -> None:
        group, topic, partition, committed = decode_commit(key, value)
        offsets = self._groups.setdefault(group, {})
        if committed is None:
            offsets.pop((topic, partition), None)
        else:
            offsets[(topic, partition)] = committed

    def load(self, records: Iterable[tuple[bytes | None, bytes | None]]) -> int:
        """Replay commit records (key, value) in log order; returns how many were applied."""
        applied = 0
        for key, value in records:
            if key is not None:
                self.apply(key, value)
                applied += 1
        return applied

    def get(
        self, group: str, partitions: Iterable[tuple[str, int]] | None = None
    ) -> dict[tuple[str, int], OffsetAndMetadata]:
        offsets = self._groups.get(group, {})
        if partitions is None:
            return dict(offsets)
        return {tp: offsets[tp] for tp in map(tuple, partitions) if tp in offsets}

    def groups(self) -> list[str]:
        return sorted(group for group, offsets in self._groups.items() if offsets)


class OffsetManager:
    """The offsets of the groups whose `__consumer_offsets` partition `replica` leads."""

    def __init__(self, replica: PartitionReplica) -> None:
        self.replica = replica
        self.cache = OffsetCache()
        log = replica.log
        offset = log.log_start_offset
        while offset < log.log_end_offset:
            data = log.read(offset, 1 << 20)
            if data.next_offset <= offset:
                break
            self.cache.load((r.key, r.value) for r in decode_batches(data.records,
                                                                     min_offset=offset))
            offset = data.next_offset

    @property
    def serving(self) -> bool:
        return self.replica.role == LEADER

    async def commit(
        self, group: str, offsets: list[list[Any]], timeout_ms: int = 5000
    ) -> dict[str, Any]:
        """Store a group's offsets `[[topic, partition, offset, metadata], ...]`."""
        now = wall_clock_ms()
        return await self._write(group, {
            (topic, partition): OffsetAndMetadata(offset, metadata or "", now)
            for topic, partition, offset, metadata in offsets}, timeout_ms)

    async def forget(self, group: str, timeout_ms: int = 5000) -> dict[str, Any]:
        """Remove every offset the group committed (Kafka's DeleteGroups): a tombstone each,
        which compaction then drops. How many there were, as `forgotten`."""
        committed = self.cache.get(group)
        reply = await self._write(group, dict.fromkeys(committed), timeout_ms)
        return {**reply, "forgotten": len(committed)} if reply["error"] == 0 else reply

    async def _write(self, group: str, offsets: dict[tuple[str, int], OffsetAndMetadata | None],
                     timeout_ms: int) -> dict[str, Any]:
        if not self.serving:
            return self.replica.not_leader()
        if not offsets:
            return {"error": 0}
        now = wall_clock_ms()
        records = [(*encode_commit(group, topic, partition, committed), now, None)
                   for (topic, partition), committed in offsets.items()]
        reply = await self.replica.produce(build_batch(records), acks=-1, timeout_ms=timeout_ms)
        if not isinstance(reply, Appended):
            return reply
        for key, value, _timestamp, _headers in records:
            self.cache.apply(key, value)
        return {"error": 0}

    def fetch(self, group: str, partitions: list[list[Any]] | None = None) -> dict[str, Any]:
        """A group's committed offsets, from the cache: `[[topic, partition, offset, meta]]`."""
        if not self.serving:
            return self.replica.not_leader()
        found = self.cache.get(group, partitions)
        return {"error": 0, "offsets": [[topic, partition, committed.offset, committed.metadata]
                                        for (topic, partition), committed in found.items()]}

    def groups(self) -> dict[str, Any]:
        if not self.serving:
            return self.replica.not_leader()
        return {"error": 0, "groups": self.cache.groups()}
