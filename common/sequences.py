"""Idempotent producers' sequence numbers: they count records and wrap from int32's largest
value to 0, as Kafka's do, so every comparison and step reads across the wrap."""

from __future__ import annotations

MAX_SEQUENCE = 2**31 - 1
_SPACE = MAX_SEQUENCE + 1


def increment_sequence(sequence: int, increment: int) -> int:
    """``sequence + increment``, wrapping past the largest sequence to 0."""
    return (sequence + increment) % _SPACE


def decrement_sequence(sequence: int, decrement: int) -> int:
    """``sequence - decrement``, wrapping below 0 to the top, as it wrapped going up."""
    return (sequence - decrement) % _SPACE


def sequence_before(first: int, second: int) -> bool:
    """Whether ``first`` comes before ``second``: less than half the sequence space ahead."""
    return 0 < (second - first) % _SPACE <= _SPACE // 2
