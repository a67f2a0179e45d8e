"""Leader epoch cache (KIP-101/279) on its own and as the log keeps it."""

from __future__ import annotations

from pathlib import Path

from rafka.common.sentinels import UNDEFINED_EPOCH, UNDEFINED_OFFSET
from rafka.logstore import LeaderEpochCache, Log
from rafka.logstore.checkpoint import LEADER_EPOCH_FILE
from tests.support.logstore import batch_of, small_config

UNDEFINED = (UNDEFINED_EPOCH, UNDEFINED_OFFSET)


def cache(*entries: tuple[int, int]) -> LeaderEpochCache:
    return LeaderEpochCache(entries)


def test_end_offset_for_epoch_follows_kip_101_and_279() -> None:
    c = cache((1, 0), (2, 10), (4, 25))
    leo = 40
    assert c.end_offset_for_epoch(4, leo) == (4, 40)  # the latest epoch ends at the log end
    assert c.end_offset_for_epoch(2, leo) == (2, 25)  # ends where the next epoch starts
    assert c.end_offset_for_epoch(1, leo) == (1, 10)
    # An epoch this leader never had: the largest epoch below it, ending where 4 starts.
    assert c.end_offset_for_epoch(3, leo) == (2, 25)
    # Below every known epoch: the requested epoch ends where the first known one starts.
    assert c.end_offset_for_epoch(0, leo) == (0, 0)
    # Above every known epoch, or nothing known: undefined.
    assert c.end_offset_for_epoch(5, leo) == UNDEFINED
    assert cache().end_offset_for_epoch(1, leo) == UNDEFINED
    assert c.end_offset_for_epoch(UNDEFINED_EPOCH, leo) == UNDEFINED


def test_assign_ignores_known_epochs_and_replaces_contradicted_ones() -> None:
    c = cache()
    assert c.assign(1, 0)
    assert not c.assign(1, 5)  # every batch of epoch 1 calls assign
    assert c.assign(2, 10)
    assert not c.assign(1, 7)  # an old batch below epoch 2's start: known already
    assert c.latest_epoch == 2
    assert c.assign(2, 8)  # the same epoch starting earlier moves its start back
    assert [tuple(e) for e in c.entries] == [(1, 0), (2, 8)]
    assert c.assign(3, 5)  # a start below epoch 2's: epoch 2 is contradicted, newest wins
    assert [tuple(e) for e in c.entries] == [(1, 0), (3, 5)]
    assert not c.assign(-1, 50)  # batches without a leader epoch are ignored
    assert c.epoch_for_offset(4) == 1 and c.epoch_for_offset(6) == 3


def test_truncation_from_end_and_start() -> None:
    c = cache((1, 0), (2, 10), (4, 25))
    assert c.truncate_from_end(25)
    assert c.latest_epoch == 2
    assert not c.truncate_from_end(100)
    assert c.truncate_from_start(12)
    # Epoch 2 holds offset 12, so it stays and now starts there; epoch 1 is gone.
    assert [tuple(e) for e in c.entries] == [(2, 12)]
    assert c.clear() and c.latest_epoch is None


def test_the_log_records_epochs_and_persists_them(tmp_path: Path) -> None:
    log = Log.open(tmp_path / "t-0", small_config())
    log.append_as_leader(batch_of(3), 0)
    log.append_as_leader(batch_of(3), 0)
    log.append_as_leader(batch_of(3), 2)
    log.epoch_cache.assign(5, log.log_end_offset)  # a new leader assigns before appending
    assert [tuple(e) for e in log.epoch_cache.entries] == [(0, 0), (2, 6), (5, 9)]
    assert log.end_offset_for_epoch(0) == (0, 6)
    assert log.end_offset_for_epoch(5) == (5, 9)
    text = (tmp_path / "t-0" / LEADER_EPOCH_FILE).read_text()
    assert text.split("\n") == ["0", "3", "0 0", "2 6", "5 9", ""]
    log.close()

    reopened = Log.open(tmp_path / "t-0", small_config())
    assert [tuple(e) for e in reopened.epoch_cache.entries] == [(0, 0), (2, 6), (5, 9)]
    reopened.truncate_to(4)
    assert [tuple(e) for e in reopened.epoch_cache.entries] == [(0, 0)]
    assert reopened.end_offset_for_epoch(0) == (0, 3)
    reopened.close()


def test_the_epoch_cache_is_rebuilt_from_batches_if_its_file_is_lost(tmp_path: Path) -> None:
    log = Log.open(tmp_path / "t-0", small_config())
    for epoch in (1, 1, 3, 3, 7):
        log.append_as_leader(batch_of(2), epoch)
    log.close()
    (tmp_path / "t-0" / LEADER_EPOCH_FILE).write_text("garbage\n")
    reopened = Log.open(tmp_path / "t-0", small_config())
    assert [tuple(e) for e in reopened.epoch_cache.entries] == [(1, 0), (3, 4), (7, 8)]
    reopened.close()


def test_a_diverged_follower_truncates_to_the_new_leaders_epoch_end(tmp_path: Path) -> None:
    """KIP-101: replica B led epoch 1 and wrote records nobody else got; A then led epoch 2.

    B asks A for the end of B's latest epoch, truncates there and fetches: the logs converge
    (truncating by high watermark alone could keep B's divergent records).
    """
    a = Log.open(tmp_path / "a" / "t-0", small_config())
    b = Log.open(tmp_path / "b" / "t-0", small_config())
    # Epoch 0: A leads, B follows; both hold offsets 0-5.
    a.append_as_leader(batch_of(3), 0)
    b.append_as_follower(a.read(0, 10_000).records)
    a.append_as_leader(batch_of(3, start=3), 0)
    b.append_as_follower(a.read(3, 10_000).records)
    # B becomes leader for epoch 1 and writes 6-9, which A never fetches; then B fails.
    b.append_as_leader(batch_of(4, start=6, key_prefix=b"lost"), 1)
    # A becomes leader for epoch 2 and writes 6-7.
    a.epoch_cache.assign(2, a.log_end_offset)
    a.append_as_leader(batch_of(2, start=6, key_prefix=b"kept"), 2)

    epoch, end = a.end_offset_for_epoch(b.epoch_cache.latest_epoch)  # type: ignore[arg-type]
    assert (epoch, end) == (0, 6)  # A never had epoch 1: epoch 0 ended at 6
    b.truncate_to(end)
    b.append_as_follower(a.read(b.log_end_offset, 10_000).records)
    assert b.read(0, 10_000).records == a.read(0, 10_000).records
    assert b.epoch_cache.entries == a.epoch_cache.entries
    a.close()
    b.close()
