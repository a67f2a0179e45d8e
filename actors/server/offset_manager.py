"""The offset manager: the leader of a `__consumer_offsets` partition, serving the commits and
offset fetches of the groups mapped to it (`OffsetCache` below is its pure part; the topic's format
is `rafka.actors.offsets_topic`).

A commit is a produce request with acks=all to that partition, so it is answered once the ISR
holds it, as in Kafka; the cache answers fetches and is rebuilt from the log whenever the
replica becomes leader.

A transactional producer's commit (Kafka's TxnOffsetCommit) is written in a batch of its
transaction and held aside, per producer, until the transaction's marker reaches this
partition: a commit marker makes the offsets count, an abort marker drops them. Rebuilding from
the log does the same with the markers it finds.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from rafka.actors.messages import (
    Appended,
    CommittedOffset,
    CommittedOffsets,
    ErrorReply,
    TxnMarker,
)
from rafka.actors.offsets_topic import (
    OFFSETS_TOPIC,
    OffsetAndMetadata,
    decode_commit,
    encode_commit,
    is_legacy_commit,
    legacy_commit_key,
)
from rafka.actors.server.host_reads import unknown_partition
from rafka.actors.server.replica import LEADER, PartitionReplica
from rafka.common.clock import wall_clock_ms
from rafka.common.sequences import increment_sequence
from rafka.logstore.batch import BatchHeader, build_batch, decode_records, iter_batches
from rafka.logstore.transactions import read_marker


class OffsetCache:
    """Every group's committed offsets, as the log of commits says (newest wins), and the
    commits of transactions not yet decided."""

    def __init__(self) -> None:
        self._groups: dict[str, dict[tuple[str, int], OffsetAndMetadata]] = {}
        # Producer id -> its transaction's commit records (key, value), in log order.
        self._pending: dict[int, list[tuple[bytes, bytes | None]]] = {}
        # The (group, topic, partition) whose newest record is in rafka's msgpack format: the
        # next commit of each also writes a tombstone under its old key (`commit_records`).
        self.legacy: set[tuple[str, str, int]] = set()

    def stage(self, producer_id: int, key: bytes, value: bytes | None) -> None:
        """A commit record of a producer's transaction: it counts if the transaction commits."""
        self._pending.setdefault(producer_id, []).append((key, value))

    def end_transaction(self, producer_id: int, committed: bool) -> None:
        for key, value in self._pending.pop(producer_id, ()):
            if committed:
                self.apply(key, value)

    def load_batches(self, batches: Iterable[tuple[BatchHeader, memoryview]]) -> None:
        """Replay whole batches in log order: plain commits apply, a transaction's are staged
        until its marker."""
        for header, view in batches:
            if header.is_control:
                marker = read_marker(view, header)
                self.end_transaction(header.producer_id, marker.committed)
                continue
            for record in decode_records(view, verify_crc=False):
                if record.key is None:
                    continue
                if header.is_transactional:
                    self.stage(header.producer_id, record.key, record.value)
                else:
                    self.apply(record.key, record.value)

    def apply(self, key: bytes, value: bytes | None) -> None:
        decoded = decode_commit(key, value)
        if decoded is None:  # a group's metadata, which rafka keeps elsewhere
            return
        group, topic, partition, committed = decoded
        if is_legacy_commit(key) and committed is not None:
            self.legacy.add((group, topic, partition))
        else:
            self.legacy.discard((group, topic, partition))
        offsets = self._groups.setdefault(group, {})
        if committed is None:
            offsets.pop((topic, partition), None)
        else:
            offsets[(topic, partition)] = committed

    def get(
        self, group: str, partitions: Iterable[Sequence[Any]] | None = None
    ) -> dict[tuple[str, int], OffsetAndMetadata]:
        """The group's offsets, of every partition or of those `[topic, partition]` names."""
        offsets = self._groups.get(group, {})
        if partitions is None:
            return dict(offsets)
        return {tp: offsets[tp] for tp in map(tuple, partitions) if tp in offsets}

    def groups(self) -> list[str]:
        return sorted(group for group, offsets in self._groups.items() if offsets)

    def commit_records(self, group: str,
                       offsets: Mapping[tuple[str, int], OffsetAndMetadata | None],
                       now_ms: int) -> list[tuple[bytes, bytes | None, int, None]]:
        """The records that store `offsets` (None: forget it), in Kafka's format. An offset
        whose newest record is in rafka's earlier msgpack format gets a tombstone under that
        key first: compaction keeps the newest record per key, so the old one would otherwise
        outlive a later tombstone in Kafka's format and bring the offset back."""
        records: list[tuple[bytes, bytes | None, int, None]] = []
        for (topic, partition), committed in offsets.items():
            if (group, topic, partition) in self.legacy:
                records.append((legacy_commit_key(group, topic, partition), None, now_ms, None))
            records.append((*encode_commit(group, topic, partition, committed), now_ms, None))
        return records


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
            self.cache.load_batches(iter_batches(data.records))
            offset = data.next_offset

    @property
    def serving(self) -> bool:
        return self.replica.role == LEADER

    async def commit(
        self, group: str, offsets: list[list[Any]], timeout_ms: int = 5000
    ) -> ErrorReply | None:
        """Store a group's offsets `[[topic, partition, offset, metadata(, leader epoch)],
        ...]`."""
        now = wall_clock_ms()
        return await self._write(group, _stored(offsets, now), timeout_ms)

    async def commit_transactional(
        self, group: str, producer_id: int, producer_epoch: int, offsets: list[list[Any]],
        timeout_ms: int = 5000, transactional_id: str | None = None,
    ) -> ErrorReply | None:
        """Store a group's offsets in a producer's transaction (Kafka's TxnOffsetCommit): they
        count once the transaction commits, and never if it aborts. The write is verified as
        a produce is, by `transactional_id` (KIP-890): one that comes after its transaction
        ended is refused, rather than open a transaction no coordinator knows of."""
        if not self.serving:
            return self.replica.not_leader()
        now = wall_clock_ms()
        records = self.cache.commit_records(group, _stored(offsets, now), now)
        if not records:
            return None
        # The producer's next sequence here, as its own batches would carry it.
        last = self.replica.log.last_sequence(producer_id)
        sequence = (increment_sequence(last[1], 1) if last is not None and last[0] == producer_epoch
                    else 0)
        batch = build_batch(records, producer_id=producer_id, producer_epoch=producer_epoch,
                            base_sequence=sequence, transactional=True)
        reply = await self.replica.produce(batch, acks=-1, timeout_ms=timeout_ms,
                                           transactional_id=transactional_id)
        if not isinstance(reply, Appended):
            return reply
        for key, value, _timestamp, _headers in records:
            self.cache.stage(producer_id, key, value)
        return None

    def end_transaction(self, producer_id: int, committed: bool) -> None:
        """The producer's transaction marker is in the log: apply or drop its offsets."""
        self.cache.end_transaction(producer_id, committed)

    async def forget(self, group: str, timeout_ms: int = 5000) -> int | ErrorReply:
        """Remove every offset the group committed (Kafka's DeleteGroups): a tombstone each,
        which compaction then drops. How many there were."""
        committed = self.cache.get(group)
        refused = await self._write(group, dict.fromkeys(committed), timeout_ms)
        return len(committed) if refused is None else refused

    async def delete(self, group: str, partitions: list[list[Any]], timeout_ms: int = 5000
                     ) -> int | ErrorReply:
        """Remove the group's offsets of `partitions` `[[topic, partition], ...]` (Kafka's
        OffsetDelete): a tombstone each for those it committed. How many offsets the group had
        committed, of every partition, before: none means the group is unknown here."""
        if not self.serving:
            return self.replica.not_leader()
        committed = self.cache.get(group)
        deleted = dict.fromkeys(tp for tp in map(tuple, partitions) if tp in committed)
        refused = await self._write(group, deleted, timeout_ms)
        return len(committed) if refused is None else refused

    async def _write(self, group: str,
                     offsets: Mapping[tuple[str, int], OffsetAndMetadata | None],
                     timeout_ms: int) -> ErrorReply | None:
        if not self.serving:
            return self.replica.not_leader()
        if not offsets:
            return None
        records = self.cache.commit_records(group, offsets, wall_clock_ms())
        reply = await self.replica.produce(build_batch(records), acks=-1, timeout_ms=timeout_ms)
        if not isinstance(reply, Appended):
            return reply
        for key, value, _timestamp, _headers in records:
            self.cache.apply(key, value)
        return None

    def fetch(self, group: str, partitions: list[list[Any]] | None = None
              ) -> CommittedOffsets | ErrorReply:
        """A group's committed offsets, from the cache."""
        if not self.serving:
            return self.replica.not_leader()
        found = self.cache.get(group, partitions)
        return CommittedOffsets([
            CommittedOffset(topic, partition, committed.offset, committed.metadata,
                            committed.leader_epoch)
            for (topic, partition), committed in found.items()])

    def groups(self) -> list[str] | ErrorReply:
        if not self.serving:
            return self.replica.not_leader()
        return self.cache.groups()


def _stored(offsets: list[list[Any]], now_ms: int) -> dict[tuple[str, int], OffsetAndMetadata]:
    """`[[topic, partition, offset, metadata(, leader epoch)], ...]` as they are stored."""
    return {(topic, partition): OffsetAndMetadata(offset, metadata or "", now_ms, *epoch[:1])
            for topic, partition, offset, metadata, *epoch in offsets}


class OffsetManagers:
    """The offset managers of the `__consumer_offsets` partitions a host leads, one per
    partition, made and dropped as leadership comes and goes. On the host's event loop."""

    def __init__(self, broker_id: int) -> None:
        self.broker_id = broker_id
        self.by_partition: dict[int, OffsetManager] = {}

    def role_changed(self, replica: PartitionReplica) -> None:
        if replica.topic != OFFSETS_TOPIC:
            return
        if replica.role == LEADER:
            # Rebuilt from the whole log on every new leadership: it may have missed commits.
            self.by_partition[replica.partition] = OffsetManager(replica)
        else:
            self.by_partition.pop(replica.partition, None)

    def stopped(self, topic: str, partition: int) -> None:
        if topic == OFFSETS_TOPIC:
            self.by_partition.pop(partition, None)

    def get(self, partition: int) -> OffsetManager | ErrorReply:
        """The partition's manager, or the reply for a partition not led here."""
        manager = self.by_partition.get(partition)
        if manager is None:
            return unknown_partition(self.broker_id, OFFSETS_TOPIC, partition)
        return manager

    def marker_written(self, marker: TxnMarker, reply: ErrorReply | None) -> None:
        """A transaction's marker is in its partition: a `__consumer_offsets` partition's
        manager applies or drops the transaction's offsets."""
        manager = self.by_partition.get(marker.partition)
        if reply is None and marker.topic == OFFSETS_TOPIC and manager is not None:
            manager.end_transaction(marker.producer_id, marker.committed)
