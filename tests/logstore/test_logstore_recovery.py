"""Crash recovery: torn and corrupt tails, lost checkpoints, missing or garbled indexes.

A crash is simulated by copying the log directory while the log is still open and appending
(the copy is what the disk holds at that moment), damaging the copy, and opening it.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from rafka.logstore import Log, iter_batches
from rafka.logstore.checkpoint import RECOVERY_POINT_FILE
from tests.support.logstore import MEDIUM, SMALL, T0, batch_of, files, read_all, small_config

CONFIG = small_config(segment_bytes=1200)


def _write_log(directory: Path, sizes: list[int], value_size: int) -> Log:
    log = Log.open(directory, CONFIG)
    for n in sizes:
        start = log.log_end_offset
        log.append_as_leader(batch_of(n, start=start, ts=T0 + start, value_size=value_size), 0)
    return log


# Batch sizes, in records, of a log written before a crash.
BATCH_SIZES = st.lists(st.integers(min_value=1, max_value=8), min_size=1, max_size=25)


def _crashed_copy(root: Path, sizes: list[int], value_size: int) -> Path:
    """A copy of a log written in batches of `sizes`, taken before it was closed (as a crash
    leaves it), under `root`."""
    log = _write_log(root / "live", sizes, value_size)
    crashed = root / "crashed"
    shutil.copytree(root / "live", crashed)
    log.close()
    return crashed


def _batches(content: bytes) -> list[tuple[int, int, int]]:
    """(position, size, base_offset) of each batch in a segment file's content."""
    out = []
    pos = 0
    for header, view in iter_batches(content):
        out.append((pos, len(view), header.base_offset))
        pos += len(view)
    return out


def _check_recovered(directory: Path, expected_end: int) -> None:
    log = Log.open(directory, CONFIG)
    assert log.log_end_offset == expected_end
    records = read_all(log, max_bytes=500)
    assert [r.offset for r in records] == list(range(expected_end))
    assert [r.key for r in records] == [b"key-%d" % i for i in range(expected_end)]
    if expected_end:
        middle = expected_end // 2
        assert log.offset_for_timestamp(T0 + middle) == middle
    # Appends continue at the right offset, and everything survives a clean reopen.
    info = log.append_as_leader(batch_of(2, start=expected_end, ts=T0 + expected_end), 0)
    assert info.first_offset == expected_end
    log.close()
    again = Log.open(directory, CONFIG)
    assert [r.offset for r in read_all(again)] == list(range(expected_end + 2))
    again.close()


@MEDIUM
@given(
    sizes=BATCH_SIZES,
    value_size=st.integers(min_value=1, max_value=60),
    lose_recovery_checkpoint=st.booleans(),
    data=st.data(),
)
def test_a_torn_tail_keeps_every_whole_batch_before_it(
    tmp_path_factory: pytest.TempPathFactory,
    sizes: list[int],
    value_size: int,
    lose_recovery_checkpoint: bool,
    data: st.DataObject,
) -> None:
    crashed = _crashed_copy(tmp_path_factory.mktemp("torn"), sizes, value_size)
    if lose_recovery_checkpoint:
        (crashed / RECOVERY_POINT_FILE).unlink()
    # A cut anywhere: a torn write at the end, or (framing is always walked) an earlier segment.
    segment = data.draw(st.sampled_from(sorted(crashed.glob("*.log"))))
    content = segment.read_bytes()
    assume(content)
    cut = data.draw(st.integers(min_value=0, max_value=len(content) - 1))
    segment.write_bytes(content[:cut])
    first_damaged = next(base for pos, size, base in _batches(content) if pos + size > cut)
    _check_recovered(crashed, first_damaged)


@MEDIUM
@given(
    sizes=BATCH_SIZES,
    lose_recovery_checkpoint=st.booleans(),
    data=st.data(),
)
def test_corrupt_bytes_after_the_recovery_point_are_cut(
    tmp_path_factory: pytest.TempPathFactory,
    sizes: list[int],
    lose_recovery_checkpoint: bool,
    data: st.DataObject,
) -> None:
    crashed = _crashed_copy(tmp_path_factory.mktemp("flip"), sizes, 20)
    segments = sorted(crashed.glob("*.log"))
    if lose_recovery_checkpoint:
        # No recovery point: every segment is re-validated, so damage anywhere is found.
        (crashed / RECOVERY_POINT_FILE).unlink()
        segment = data.draw(st.sampled_from(segments))
    else:
        segment = segments[-1]  # the recovery point is the active segment's base
    batches = _batches(segment.read_bytes())
    assume(batches)
    index = data.draw(st.integers(min_value=0, max_value=len(batches) - 1))
    position, size, base = batches[index]
    # Bytes the CRC or the framing protects: the length field, and magic onwards. (The base
    # offset and leader epoch sit outside the CRC by design, as in Kafka.)
    protected = [*range(8, 12), *range(16, size)]
    flips = data.draw(
        st.lists(
            st.tuples(st.sampled_from(protected), st.integers(min_value=1, max_value=255)),
            min_size=1,
            max_size=4,
            unique_by=lambda flip: flip[0],  # flipping a byte twice could undo the damage
        )
    )
    content = bytearray(segment.read_bytes())
    for offset_in_batch, mask in flips:
        content[position + offset_in_batch] ^= mask
    segment.write_bytes(bytes(content))
    _check_recovered(crashed, base)


def test_a_crash_before_any_flush_recovers_everything_written(tmp_path: Path) -> None:
    log = _write_log(tmp_path / "live", [3, 4, 5] * 10, 30)
    shutil.copytree(tmp_path / "live", tmp_path / "crashed")
    end = log.log_end_offset
    log.close()
    _check_recovered(tmp_path / "crashed", end)


@SMALL
@given(
    damage=st.sampled_from(
        ["delete index", "delete timeindex", "truncate", "garble", "append garbage", "empty"]
    ),
    data=st.data(),
)
def test_missing_or_garbled_indexes_are_rebuilt(
    tmp_path_factory: pytest.TempPathFactory, damage: str, data: st.DataObject
) -> None:
    root = tmp_path_factory.mktemp("index")
    directory = root / "t-0"
    log = Log.open(directory, small_config(segment_bytes=2000, index_interval_bytes=100))
    for i in range(40):
        # Batch i holds timestamps T0 + 10 i, T0 + 10 i + 1, ...
        log.append_as_leader(batch_of(1 + i % 4, start=log.log_end_offset, ts=T0 + 10 * i), 0)
    expected = read_all(log)
    log.close()
    originals = {p.name: p.read_bytes() for p in directory.iterdir() if "index" in p.suffix}
    name = data.draw(st.sampled_from(sorted(n for n, content in originals.items() if content)))
    path = directory / name
    content = bytearray(originals[name])
    if damage == "delete index":
        path.with_suffix(".index").unlink()
    elif damage == "delete timeindex":
        path.with_suffix(".timeindex").unlink()
    elif damage == "truncate":
        path.write_bytes(content[: data.draw(st.integers(0, len(content) - 1))])
    elif damage == "garble":
        at = data.draw(st.integers(0, len(content) - 1))
        content[at] ^= data.draw(st.integers(1, 255))
        path.write_bytes(bytes(content))
    elif damage == "append garbage":
        path.write_bytes(bytes(content) + b"\x7f" * data.draw(st.integers(1, 30)))
    else:
        path.write_bytes(b"")

    reopened = Log.open(directory, small_config(segment_bytes=2000, index_interval_bytes=100))
    assert read_all(reopened, max_bytes=200) == expected
    for i in (0, 7, 23, 39):
        first_offset = sum(1 + j % 4 for j in range(i))
        assert reopened.offset_for_timestamp(T0 + 10 * i) == first_offset
    reopened.close()
    # The index files were rewritten to what they were before the damage.
    assert {n: (directory / n).read_bytes() for n in originals} == originals


def test_stray_files_from_a_crash_are_cleaned_up(tmp_path: Path) -> None:
    directory = tmp_path / "t-0"
    log = _write_log(directory, [5] * 10, 20)
    log.close()
    (directory / "recovery-point-offset-checkpoint.tmp").write_text("garbage")
    (directory / f"{999:020d}.index").write_bytes(b"\0" * 8)  # an index without its log
    (directory / f"{0:020d}.log.cleaned").write_bytes(b"half a compaction")
    reopened = Log.open(directory, CONFIG)
    names = files(directory)
    assert not [n for n in names if n.endswith((".tmp", ".cleaned"))]
    assert f"{999:020d}.index" not in names
    assert reopened.log_end_offset == 50
    reopened.close()
