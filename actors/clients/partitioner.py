"""Which partition a produced record goes to: the producer's partitioning rules, sans-I/O.

The rules, in order (Kafka's producer does the same):

1. an explicit partition, checked against the topic's partition count;
2. a user partitioner, a callable ``partitioner(key, num_partitions) -> int``;
3. a key: Kafka's murmur2 of the key bytes, made positive, modulo the partition count, so a key
   lands on the partition a Java client would put it on;
4. no key: the sticky partitioner (Kafka KIP-480), which keeps sending to one partition until the
   batch for it is closed, so keyless records fill few large batches instead of many tiny ones.

murmur2 runs once per keyed record. It is the plain MurmurHash2 algorithm (Austin Appleby, public
domain) with Kafka's seed, over little-endian 32-bit words, about a microsecond a key in
CPython. `murmur2_many` hashes a whole
column of keys (a pipeline's) in numpy.
"""

from __future__ import annotations

import operator
import random
import struct
from collections.abc import Callable, Sequence
from typing import Protocol

import numpy as np

__all__ = [
    "Partitioner",
    "StickyPartitioner",
    "choose_partition",
    "default_partition",
    "default_partitions",
    "murmur2",
    "murmur2_many",
    "to_positive",
]

_SEED = 0x9747B28C  # Kafka's seed; any other seed would send keys to other partitions than Java's
_M = 0x5BD1E995
_MASK32 = 0xFFFFFFFF
_words = struct.Struct("<I").iter_unpack


def murmur2(data: bytes) -> int:
    """Kafka's ``Utils.murmur2`` of ``data``: a signed 32-bit int, exactly as the Java client."""
    length = len(data)
    tail = length & 3
    body = length - tail
    h = (_SEED ^ length) & _MASK32
    # Masking is deferred where it cannot change the low 32 bits (xor and multiply only carry
    # upwards), which saves two of the four masks per word on this hot path.
    for (k,) in _words(data[:body] if tail else data):
        k = (k * _M) & _MASK32
        h = ((h * _M) ^ ((k ^ (k >> 24)) * _M)) & _MASK32
    if tail:
        if tail == 3:
            h ^= data[body + 2] << 16
        if tail >= 2:
            h ^= data[body + 1] << 8
        h = ((h ^ data[body]) * _M) & _MASK32
    h ^= h >> 13
    h = (h * _M) & _MASK32
    h ^= h >> 15
    return h - 0x100000000 if h & 0x80000000 else h


def murmur2_many(offsets: np.ndarray, data: np.ndarray) -> np.ndarray:
    """`murmur2` of every byte string ``data[offsets[i]:offsets[i + 1]]`` at once, in numpy
    (int64s equal to `murmur2`'s): a column of keys hashed without a Python step per key, in
    as many steps as the longest key has 4-byte words."""
    starts = np.asarray(offsets[:-1], dtype=np.int64)
    lengths: np.ndarray = np.diff(np.asarray(offsets, dtype=np.int64))
    data = np.asarray(data, dtype=np.uint8)
    m = np.uint32(_M)
    h = (np.uint32(_SEED) ^ lengths.astype(np.uint32))
    words = lengths >> 2
    for word in range(int(words.max(initial=0))):
        active = np.flatnonzero(words > word)
        at = starts[active] + 4 * word
        k = (data[at].astype(np.uint32) | data[at + 1].astype(np.uint32) << 8
             | data[at + 2].astype(np.uint32) << 16 | data[at + 3].astype(np.uint32) << 24)
        k *= m
        k ^= k >> 24
        k *= m
        h[active] = (h[active] * m) ^ k
    tails = lengths & 3
    body = starts + (lengths - tails)
    for width, shift in ((3, 16), (2, 8)):
        rows = np.flatnonzero(tails >= width)
        h[rows] ^= data[body[rows] + width - 1].astype(np.uint32) << shift
    rows = np.flatnonzero(tails >= 1)
    h[rows] = (h[rows] ^ data[body[rows]].astype(np.uint32)) * m
    h ^= h >> 13
    h *= m
    h ^= h >> 15
    hashes: np.ndarray = h.view(np.int32).astype(np.int64)
    return hashes


def default_partitions(offsets: np.ndarray, data: np.ndarray, num_partitions: int) -> np.ndarray:
    """`default_partition` of every key ``data[offsets[i]:offsets[i + 1]]`` at once."""
    if num_partitions <= 0:
        raise ValueError(f"a topic has at least one partition, got num_partitions={num_partitions}")
    return (murmur2_many(offsets, data) & 0x7FFFFFFF) % num_partitions


def to_positive(n: int) -> int:
    """Clear the sign bit, as Kafka's ``Utils.toPositive`` (not ``abs``: it must map MIN to 0)."""
    return n & 0x7FFFFFFF


def default_partition(key: bytes, num_partitions: int) -> int:
    """The partition Kafka's default partitioner gives a keyed record."""
    if num_partitions <= 0:
        raise ValueError(f"a topic has at least one partition, got num_partitions={num_partitions}")
    return (murmur2(key) & 0x7FFFFFFF) % num_partitions


class Partitioner(Protocol):
    """A user partitioner: any callable mapping (key, partition count) to a partition.

    It is called for keyless records too, with ``key=None``, as Kafka calls its partitioners.
    """

    def __call__(self, key: bytes | None, num_partitions: int) -> int: ...


class StickyPartitioner:
    """Chooses a partition for keyless records and sticks to it until its batch is closed (KIP-480).

    The producer calls ``partition`` for each keyless record and ``on_new_batch`` when the batch
    of the sticky partition is full (``AppendResult.batch_is_full``) or has been sent (lingered
    out); only then does the choice move, at random, to another available partition (a different
    one when there is more than one), so load still spreads over all partitions but each batch
    fills before the next starts. Give it a seeded ``random.Random`` for a deterministic sequence.
    """

    def __init__(self, rng: random.Random | None = None) -> None:
        self._rng = rng if rng is not None else random.Random()
        self._sticky: dict[str, int] = {}

    def partition(
        self, topic: str, num_partitions: int, available: Sequence[int] | None = None
    ) -> int:
        """The current sticky partition of ``topic``, choosing one when there is none yet.

        ``available`` lists the partitions that have a leader now; when given and not empty the
        choice is made among them only (Kafka does the same), otherwise among all partitions.
        """
        current = self._sticky.get(topic)
        if current is not None and current < num_partitions:
            if not available or current in available:
                return current
            # Its leader is gone: records would wait there, so move on as after a full batch.
            return self._choose(topic, num_partitions, available, previous=current)
        # No choice yet, or the topic shrank under it (metadata changed): choose again.
        return self._choose(topic, num_partitions, available, previous=None)

    def on_new_batch(
        self,
        topic: str,
        num_partitions: int,
        previous_partition: int,
        available: Sequence[int] | None = None,
    ) -> int:
        """The batch of ``previous_partition`` closed: move on, and return the new sticky partition.

        A stale notice (the sticky partition already moved away from ``previous_partition``)
        changes nothing, so several notices for the same batch move the choice only once.
        """
        current = self._sticky.get(topic)
        if current is not None and current != previous_partition and current < num_partitions:
            return current
        return self._choose(topic, num_partitions, available, previous=previous_partition)

    def current(self, topic: str) -> int | None:
        """The sticky partition of ``topic``, or None before the first keyless record."""
        return self._sticky.get(topic)

    def _choose(
        self,
        topic: str,
        num_partitions: int,
        available: Sequence[int] | None,
        previous: int | None,
    ) -> int:
        if num_partitions <= 0:
            raise ValueError(
                f"a topic has at least one partition, got num_partitions={num_partitions}"
            )
        candidates: Sequence[int] = (
            [p for p in available if 0 <= p < num_partitions] if available else ()
        )
        if not candidates:
            candidates = range(num_partitions)
        if previous is not None and len(candidates) > 1:
            candidates = [p for p in candidates if p != previous] or candidates
        choice = candidates[self._rng.randrange(len(candidates))]
        self._sticky[topic] = choice
        return choice


def choose_partition(
    topic: str,
    key: bytes | None,
    num_partitions: int,
    *,
    partition: int | None = None,
    partitioner: Partitioner | Callable[[bytes | None, int], int] | None = None,
    sticky: StickyPartitioner | None = None,
    available: Sequence[int] | None = None,
) -> int:
    """The partition a record of ``topic`` goes to (rules in the module docstring).

    Raises ``ValueError`` for an explicit partition or a user partitioner's answer outside
    ``0 <= p < num_partitions``. A keyless record without ``sticky`` gets a random partition.
    """
    if num_partitions <= 0:
        raise ValueError(
            f"topic {topic!r} has no partitions (num_partitions={num_partitions}): "
            "refresh the metadata or create the topic first"
        )
    if partition is not None:
        index = _as_partition(partition, num_partitions)
        if index is None:
            raise ValueError(
                f"partition {partition!r} does not exist in topic {topic!r}: "
                f"it has partitions 0..{num_partitions - 1}"
            )
        return index
    if partitioner is not None:
        chosen = partitioner(key, num_partitions)
        index = _as_partition(chosen, num_partitions)
        if index is None:
            raise ValueError(
                f"partitioner {getattr(partitioner, '__name__', partitioner)!r} returned "
                f"{chosen!r} for topic {topic!r}, which has partitions 0..{num_partitions - 1}"
            )
        return index
    if key is not None:
        return (murmur2(key) & 0x7FFFFFFF) % num_partitions
    if sticky is not None:
        return sticky.partition(topic, num_partitions, available)
    pool = [p for p in available if 0 <= p < num_partitions] if available else None
    return random.choice(pool) if pool else random.randrange(num_partitions)


def _as_partition(value: object, num_partitions: int) -> int | None:
    """``value`` as a partition index of the topic, or None if it is not one.

    Anything integral counts (a numpy integer from a user's partitioner, say); bools and floats
    do not, since ``True`` or ``2.0`` as a partition is a bug worth hearing about.
    """
    if isinstance(value, bool):
        return None
    try:
        index = operator.index(value)  # type: ignore[arg-type]
    except TypeError:
        return None
    return index if 0 <= index < num_partitions else None
