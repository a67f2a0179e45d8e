"""Idempotent producer state: the sequencing decision, and the log keeping state consistent."""

from __future__ import annotations

from pathlib import Path

from rafka.logstore import Log, SequenceOutcome, check_sequence, read_header
from rafka.logstore.batch import INT32_MAX
from rafka.logstore.producer_state import BatchMetadata, ProducerEntry
from tests.support.logstore import batch_of, small_config

OK = SequenceOutcome.OK
DUPLICATE = SequenceOutcome.DUPLICATE
OUT_OF_ORDER = SequenceOutcome.OUT_OF_ORDER_SEQUENCE
FENCED = SequenceOutcome.INVALID_PRODUCER_EPOCH
UNKNOWN = SequenceOutcome.UNKNOWN_PRODUCER_ID


def entry(epoch: int, *seqs: tuple[int, int]) -> ProducerEntry:
    batches = [
        BatchMetadata(first, last, 100 * i, 100 * i + (last - first), 0)
        for i, (first, last) in enumerate(seqs)
    ]
    return ProducerEntry(1, epoch, batches)


def test_check_sequence_outcomes() -> None:
    state = entry(3, (0, 4), (5, 9), (10, 14))
    assert check_sequence(state, 3, 15, 19).outcome is OK
    gap = check_sequence(state, 3, 20, 24)
    assert gap.outcome is OUT_OF_ORDER and gap.expected_sequence == 15
    assert check_sequence(state, 3, 12, 16).outcome is OUT_OF_ORDER  # overlaps, not a retry
    duplicate = check_sequence(state, 3, 5, 9)
    assert duplicate.outcome is DUPLICATE
    assert duplicate.duplicate_of == BatchMetadata(5, 9, 100, 104, 0)
    assert check_sequence(state, 2, 15, 19).outcome is FENCED
    assert check_sequence(state, 4, 0, 4).outcome is OK  # a new epoch restarts at 0
    assert check_sequence(state, 4, 15, 19).outcome is OUT_OF_ORDER
    assert check_sequence(None, 0, 0, 9).outcome is OK
    unknown = check_sequence(None, 0, 7, 9)
    assert unknown.outcome is UNKNOWN and unknown.expected_sequence == 0


def test_sequences_wrap_at_int32_max() -> None:
    state = entry(0, (INT32_MAX - 4, INT32_MAX))
    assert check_sequence(state, 0, 0, 4).outcome is OK
    assert check_sequence(state, 0, INT32_MAX - 4, INT32_MAX).outcome is DUPLICATE


def test_only_the_last_five_batches_are_remembered(tmp_path: Path) -> None:
    log = Log.open(tmp_path / "t-0", small_config())
    for i in range(7):
        log.append_as_leader(batch_of(2, producer_id=9, producer_epoch=0, base_sequence=2 * i), 0)
    state = log.producer_state(9)
    assert state is not None and len(state.batches) == 5
    assert [b.base_sequence for b in state.batches] == [4, 6, 8, 10, 12]
    assert log.last_sequence(9) == (0, 13)
    assert log.find_duplicate(9, 0, 12, 13).first_offset == 12  # type: ignore[union-attr]
    assert log.find_duplicate(9, 0, 0, 1) is None  # too old to be recognised
    assert log.find_duplicate(9, 1, 12, 13) is None  # another epoch
    assert log.last_sequence(10) is None and log.producer_state(10) is None
    log.close()


def test_leader_uses_check_sequence_before_appending(tmp_path: Path) -> None:
    log = Log.open(tmp_path / "t-0", small_config())
    first = batch_of(3, producer_id=4, producer_epoch=0, base_sequence=0)
    second = batch_of(3, producer_id=4, producer_epoch=0, base_sequence=3)
    assert log.check_sequence(read_header(second)).outcome is UNKNOWN
    assert log.check_sequence(read_header(first)).outcome is OK
    info = log.append_as_leader(first, 0)
    retry = log.check_sequence(read_header(first))
    assert retry.outcome is DUPLICATE and retry.duplicate_of.first_offset == info.first_offset
    assert log.check_sequence(read_header(second)).outcome is OK
    log.close()


def test_state_is_rebuilt_on_open_and_follows_truncation(tmp_path: Path) -> None:
    directory = tmp_path / "t-0"
    log = Log.open(directory, small_config(segment_bytes=600))
    for i in range(12):
        # Two producers interleaved; producer 2 bumps its epoch half way.
        log.append_as_leader(batch_of(2, producer_id=1, producer_epoch=0, base_sequence=2 * i), 0)
        epoch = 0 if i < 6 else 1
        seq = 2 * i if i < 6 else 2 * (i - 6)
        log.append_as_leader(batch_of(2, producer_id=2, producer_epoch=epoch, base_sequence=seq), 0)
    assert len(log.segments) > 3
    before = {pid: log.producer_state(pid) for pid in (1, 2)}
    log.close()

    reopened = Log.open(directory, small_config(segment_bytes=600))
    assert {pid: reopened.producer_state(pid) for pid in (1, 2)} == before

    # Truncate back into the middle: the state must be what it was at that offset.
    reopened.truncate_to(20)  # offsets 0-19 are the first five rounds of both producers
    assert reopened.last_sequence(1) == (0, 9)
    assert reopened.last_sequence(2) == (0, 9)
    reopened.truncate_to(2)
    assert reopened.last_sequence(1) == (0, 1)
    assert reopened.producer_state(2) is None
    reopened.close()


def test_producers_wholly_below_the_log_start_are_forgotten(tmp_path: Path) -> None:
    log = Log.open(tmp_path / "t-0", small_config())
    log.append_as_leader(batch_of(2, producer_id=1, producer_epoch=0, base_sequence=0), 0)
    log.append_as_leader(batch_of(2, producer_id=2, producer_epoch=0, base_sequence=0), 0)
    log.high_watermark = log.log_end_offset
    log.delete_records_before(2)
    assert log.producer_state(1) is None
    assert log.producer_state(2) is not None
    log.close()
