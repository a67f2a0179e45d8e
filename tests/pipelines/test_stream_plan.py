"""A stream's batch planning and its checkpoint (pure: no Ray, no Spark)."""

from __future__ import annotations

import json

import pytest

from rafka.pipelines.checkpoint import RETAINED_BATCHES, CheckpointError, StreamCheckpoint
from rafka.pipelines.source_options import DataLossError
from rafka.pipelines.stream_plan import next_ranges, record_count, should_run

BOUNDS = {("t", 0): (0, 100), ("t", 1): (0, 10), ("t", 2): (5, 5)}


def test_a_batch_reads_from_where_the_last_ended_to_the_high_watermark() -> None:
    positions = {("t", 0): 40, ("t", 1): 10}
    # t-2 is new since the last batch: it starts at its earliest offset.
    assert next_ranges(BOUNDS, positions) == {("t", 0): (40, 100), ("t", 1): (10, 10),
                                              ("t", 2): (5, 5)}


def test_max_offsets_is_shared_in_proportion_and_never_stalls_a_partition() -> None:
    ranges = next_ranges(BOUNDS, {}, max_offsets=55)
    assert ranges == {("t", 0): (0, 50), ("t", 1): (0, 5), ("t", 2): (5, 5)}
    # A share below one record rounds up, as Spark's does: a small cap still moves each.
    small = next_ranges({("t", 0): (0, 100), ("t", 1): (0, 1)}, {}, max_offsets=10)
    assert small == {("t", 0): (0, 9), ("t", 1): (0, 1)}
    assert record_count(next_ranges(BOUNDS, {}, max_offsets=1000)) == 110


def test_available_now_stops_at_the_end_it_fixed() -> None:
    assert next_ranges(BOUNDS, {("t", 0): 90}, until={("t", 0): 95, ("t", 1): 3}) == {
        ("t", 0): (90, 95), ("t", 1): (0, 3), ("t", 2): (5, 5)}


def test_records_removed_between_two_batches() -> None:
    bounds = {("t", 0): (30, 100)}
    with pytest.raises(DataLossError, match=r"t-0: offsets 20\.\.29 are gone"):
        next_ranges(bounds, {("t", 0): 20})
    assert next_ranges(bounds, {("t", 0): 20}, fail_on_data_loss=False) == {("t", 0): (30, 100)}


def test_min_offsets_waits_until_the_delay_passed() -> None:
    assert not should_run(0, min_offsets=None, since_last_batch_ms=10**9,
                          max_trigger_delay_ms=0)
    assert should_run(5, min_offsets=None, since_last_batch_ms=0, max_trigger_delay_ms=1000)
    assert not should_run(5, min_offsets=10, since_last_batch_ms=999, max_trigger_delay_ms=1000)
    assert should_run(5, min_offsets=10, since_last_batch_ms=1000, max_trigger_delay_ms=1000)
    assert should_run(10, min_offsets=10, since_last_batch_ms=0, max_trigger_delay_ms=1000)


SOURCE = {"subscribe": ["t"]}


def test_a_checkpoint_holds_planned_and_finished_batches(tmp_path) -> None:
    checkpoint = StreamCheckpoint(tmp_path, SOURCE)
    assert checkpoint.last_batch() is None
    checkpoint.plan(0, {("t", 0): (0, 10), ("t", 1): (5, 7)}, read_tasks=3)
    reopened = StreamCheckpoint(tmp_path, SOURCE)  # another driver
    assert reopened.stream_id == checkpoint.stream_id
    last = reopened.last_batch()
    assert (last.batch_id, last.ranges, last.committed, last.read_tasks) == (
        0, {("t", 0): (0, 10), ("t", 1): (5, 7)}, False, 3)
    reopened.commit(0)
    assert StreamCheckpoint(tmp_path, SOURCE).last_batch().committed
    assert json.loads((tmp_path / "offsets" / "0").read_text()) == {
        "ranges": {"t": {"0": [0, 10], "1": [5, 7]}}, "readTasks": 3}
    assert (tmp_path / "commits" / "0").exists()  # Spark's layout: offsets/, commits/
    assert not [p for p in tmp_path.rglob("*") if p.name.endswith(".tmp")]


def test_a_checkpoint_of_another_stream_is_refused(tmp_path) -> None:
    StreamCheckpoint(tmp_path, SOURCE)
    with pytest.raises(CheckpointError, match="belongs to a stream of"):
        StreamCheckpoint(tmp_path, {"subscribe": ["other"]})


def test_old_batches_are_forgotten_and_damage_is_named(tmp_path) -> None:
    checkpoint = StreamCheckpoint(tmp_path, SOURCE)
    for batch_id in range(RETAINED_BATCHES + 5):
        checkpoint.plan(batch_id, {("t", 0): (batch_id, batch_id + 1)}, read_tasks=2)
        checkpoint.commit(batch_id)
    kept = sorted(int(p.name) for p in (tmp_path / "offsets").iterdir())
    assert kept == list(range(5, RETAINED_BATCHES + 5))
    (tmp_path / "offsets" / str(RETAINED_BATCHES + 5)).write_text("{not json")
    with pytest.raises(CheckpointError, match="damaged"):
        checkpoint.last_batch()
