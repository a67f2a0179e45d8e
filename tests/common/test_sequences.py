"""Producer sequence numbers wrap from int32's largest value to 0, in both directions."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from rafka.common.sequences import (
    MAX_SEQUENCE,
    decrement_sequence,
    increment_sequence,
    sequence_before,
)

sequences = st.integers(0, MAX_SEQUENCE)
steps = st.integers(0, 2**20)


def test_a_sequence_wraps_past_the_largest_int32_to_zero() -> None:
    assert increment_sequence(MAX_SEQUENCE, 1) == 0
    assert increment_sequence(MAX_SEQUENCE - 3, 5) == 1
    assert decrement_sequence(1, 5) == MAX_SEQUENCE - 3
    assert increment_sequence(7, 5) == 12


@given(sequences, steps)
def test_going_back_undoes_going_forward(sequence: int, step: int) -> None:
    moved = increment_sequence(sequence, step)
    assert 0 <= moved <= MAX_SEQUENCE
    assert decrement_sequence(moved, step) == sequence


@given(sequences, st.integers(1, 2**30 - 1))
def test_before_reads_across_the_wrap(sequence: int, step: int) -> None:
    later = increment_sequence(sequence, step)
    assert sequence_before(sequence, later)
    assert not sequence_before(later, sequence)
    assert not sequence_before(sequence, sequence)
