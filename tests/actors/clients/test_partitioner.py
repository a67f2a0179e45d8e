"""The producer's partitioning: Kafka-compatible murmur2, explicit and custom partitions, sticky."""

from __future__ import annotations

import random
from collections import Counter

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from rafka.actors.clients.partitioner import (
    StickyPartitioner,
    choose_partition,
    default_partition,
    default_partitions,
    murmur2,
    murmur2_many,
    to_positive,
)

# The exact vectors of Kafka's own test: apache/kafka,
# clients/src/test/java/org/apache/kafka/common/utils/UtilsTest.java, testMurmur2().
KAFKA_UTILS_TEST_MURMUR2 = [
    (b"21", -973932308),
    (b"foobar", -790332482),
    (b"a-little-bit-long-string", -985981536),
    (b"a-little-bit-longer-string", -1486304829),
    (b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8", -58897971),
    (bytes([ord("a"), ord("b"), ord("c")]), 479470107),
]

# Kafka's vectors have no key of length 1 mod 4 and no empty key; librdkafka checks its
# Java-compatible murmur2 against these (confluentinc/librdkafka, src/rdmurmur2.c,
# unittest_murmur2, "java_murmur2_results"), given there as unsigned 32-bit hex.
LIBRDKAFKA_JAVA_MURMUR2 = [
    (b"kafka", 0xD067CF64),
    (b"giberish123456789", 0x8F552B0C),
    (b"1234", 0x9FC97B14),
    (b"234", 0xE7C009CA),
    (b"34", 0x873930DA),
    (b"4", 0x5A4B5CA1),
    (b"PreAmbleWillBeRemoved,ThePrePartThatIs", 0x78424F1C),
    (b"reAmbleWillBeRemoved,ThePrePartThatIs", 0x4A62B377),
    (b"eAmbleWillBeRemoved,ThePrePartThatIs", 0xE0E4E09E),
    (b"AmbleWillBeRemoved,ThePrePartThatIs", 0x62B8B43F),
    (b"", 0x106E08D9),
]


def _java_int(n: int) -> int:
    """Wrap to a Java int, as every Java arithmetic step does."""
    n &= 0xFFFFFFFF
    return n - (1 << 32) if n >= 1 << 31 else n


def _murmur2_java_style(data: bytes) -> int:
    """An independent, deliberately naive oracle: signed ints, a byte at a time, the Java way."""
    m, r = 0x5BD1E995, 24
    h = _java_int(0x9747B28C ^ len(data))
    for i in range(len(data) // 4):
        k = 0
        for shift in range(4):
            k += (data[4 * i + shift] & 0xFF) << (8 * shift)
        k = _java_int(k * m)
        k ^= (k & 0xFFFFFFFF) >> r  # >>> in Java
        k = _java_int(k * m)
        h = _java_int(h * m)
        h = _java_int(h ^ k)
    rest = len(data) % 4
    base = len(data) - rest
    if rest >= 3:
        h = _java_int(h ^ (data[base + 2] << 16))
    if rest >= 2:
        h = _java_int(h ^ (data[base + 1] << 8))
    if rest >= 1:
        h = _java_int(h ^ data[base])
        h = _java_int(h * m)
    h = _java_int(h ^ ((h & 0xFFFFFFFF) >> 13))
    h = _java_int(h * m)
    h = _java_int(h ^ ((h & 0xFFFFFFFF) >> 15))
    return h


@pytest.mark.parametrize(("key", "expected"), KAFKA_UTILS_TEST_MURMUR2)
def test_murmur2_matches_kafkas_own_test_vectors(key: bytes, expected: int) -> None:
    assert murmur2(key) == expected


@pytest.mark.parametrize(("key", "expected_unsigned"), LIBRDKAFKA_JAVA_MURMUR2)
def test_murmur2_matches_librdkafkas_java_vectors(key: bytes, expected_unsigned: int) -> None:
    assert murmur2(key) == _java_int(expected_unsigned)


@given(st.binary(max_size=70))
def test_murmur2_equals_a_java_style_oracle_for_any_bytes(data: bytes) -> None:
    result = murmur2(data)
    assert result == _murmur2_java_style(data)
    assert -(2**31) <= result < 2**31


def column_of(keys: list[bytes]) -> tuple[np.ndarray, np.ndarray]:
    offsets = np.zeros(len(keys) + 1, dtype=np.int64)
    np.cumsum([len(key) for key in keys], out=offsets[1:])
    return offsets, np.frombuffer(b"".join(keys), dtype=np.uint8)


def test_murmur2_of_a_column_matches_kafkas_vectors() -> None:
    keys = [key for key, _ in KAFKA_UTILS_TEST_MURMUR2]
    assert murmur2_many(*column_of(keys)).tolist() == [
        expected for _, expected in KAFKA_UTILS_TEST_MURMUR2]


@given(st.lists(st.binary(max_size=40), max_size=60), st.integers(1, 50))
def test_a_column_of_keys_hashes_and_partitions_as_each_key_alone(keys, partitions) -> None:
    offsets, data = column_of(keys)
    assert murmur2_many(offsets, data).tolist() == [murmur2(key) for key in keys]
    assert default_partitions(offsets, data, partitions).tolist() == [
        default_partition(key, partitions) for key in keys]


def test_murmur2_accepts_bytearray_and_memoryview_like_bytes() -> None:
    assert murmur2(bytearray(b"foobar")) == murmur2(memoryview(b"foobar")) == -790332482


def test_to_positive_clears_the_sign_bit_like_kafka_not_abs() -> None:
    assert to_positive(-(2**31)) == 0  # abs() would overflow to a negative number in Java
    assert to_positive(-1) == 2**31 - 1
    assert to_positive(-973932308) == 1173551340
    assert to_positive(12345) == 12345


def test_default_partition_is_where_a_java_client_puts_the_key() -> None:
    # to_positive(murmur2(b"21")) = 1173551340 = 3 * 391183780 = 7 * 167650191 + 3
    assert default_partition(b"21", 3) == 0
    assert default_partition(b"21", 7) == 3
    # "foobar": murmur2 -790332482 -> 1357151166
    assert default_partition(b"foobar", 4) == 1357151166 % 4 == 2


@given(st.binary(max_size=40), st.integers(min_value=1, max_value=1000))
def test_default_partition_is_in_range_and_stable(key: bytes, n: int) -> None:
    p = default_partition(key, n)
    assert 0 <= p < n
    assert default_partition(key, n) == p


def test_default_partition_refuses_a_topic_without_partitions() -> None:
    with pytest.raises(ValueError, match="at least one partition"):
        default_partition(b"k", 0)


# -- choose_partition -------------------------------------------------------------------------


def test_an_explicit_partition_wins_over_key_and_partitioner() -> None:
    assert choose_partition("t", b"21", 8, partition=5, partitioner=lambda k, n: 1) == 5


@pytest.mark.parametrize("bad", [-1, 8, 100, True, 2.0])
def test_an_explicit_partition_outside_the_topic_is_refused(bad: object) -> None:
    with pytest.raises(ValueError, match=r"partition .* does not exist in topic 'orders'.*0\.\.7"):
        choose_partition("orders", None, 8, partition=bad)  # type: ignore[arg-type]


def test_a_custom_partitioner_decides_and_sees_the_key_even_when_none() -> None:
    seen = []

    def by_length(key: bytes | None, n: int) -> int:
        seen.append((key, n))
        return (len(key) if key else 0) % n

    assert choose_partition("t", b"abcde", 3, partitioner=by_length) == 2
    assert choose_partition("t", None, 3, partitioner=by_length) == 0
    assert seen == [(b"abcde", 3), (None, 3)]


@pytest.mark.parametrize("answer", [3, -1, None, "1"])
def test_a_custom_partitioners_bad_answer_is_refused(answer: object) -> None:
    def broken(key: bytes | None, n: int) -> object:
        return answer

    with pytest.raises(ValueError, match="partitioner 'broken' returned"):
        choose_partition("t", b"k", 3, partitioner=broken)  # type: ignore[arg-type]


@given(st.binary(max_size=32), st.integers(min_value=1, max_value=64))
def test_keyed_records_use_murmur2(key: bytes, n: int) -> None:
    sticky = StickyPartitioner(random.Random(0))
    assert choose_partition("t", key, n, sticky=sticky) == default_partition(key, n)


def test_an_empty_key_is_a_key_not_a_missing_one() -> None:
    # b"" hashes like any key (Java's client does too); only None means keyless.
    assert choose_partition("t", b"", 7) == to_positive(_java_int(0x106E08D9)) % 7


def test_keyless_records_stick_to_one_partition() -> None:
    sticky = StickyPartitioner(random.Random(7))
    chosen = {choose_partition("t", None, 6, sticky=sticky) for _ in range(100)}
    assert len(chosen) == 1
    assert chosen == {sticky.current("t")}


def test_keyless_records_without_a_sticky_partitioner_still_land_in_range() -> None:
    assert {choose_partition("t", None, 3) for _ in range(200)} == {0, 1, 2}
    assert {choose_partition("t", None, 3, available=[2]) for _ in range(20)} == {2}


def test_a_topic_without_partitions_is_refused() -> None:
    with pytest.raises(ValueError, match="has no partitions"):
        choose_partition("t", b"k", 0)


# -- StickyPartitioner ------------------------------------------------------------------------


@given(st.integers(min_value=2, max_value=50), st.integers())
def test_a_new_batch_moves_to_a_different_partition(n: int, seed: int) -> None:
    sticky = StickyPartitioner(random.Random(seed))
    first = sticky.partition("t", n)
    second = sticky.on_new_batch("t", n, first)
    assert second != first
    assert 0 <= second < n
    assert sticky.partition("t", n) == second


def test_a_single_partition_topic_stays_on_it() -> None:
    sticky = StickyPartitioner(random.Random(1))
    assert sticky.partition("t", 1) == 0
    assert sticky.on_new_batch("t", 1, 0) == 0


def test_a_stale_new_batch_notice_does_not_move_the_choice_again() -> None:
    sticky = StickyPartitioner(random.Random(3))
    first = sticky.partition("t", 10)
    second = sticky.on_new_batch("t", 10, first)
    # Another notice for the batch of `first` (two threads saw it close) changes nothing.
    assert sticky.on_new_batch("t", 10, first) == second


def test_only_available_partitions_are_chosen() -> None:
    sticky = StickyPartitioner(random.Random(5))
    current = sticky.partition("t", 6, available=[1, 4])
    assert current in (1, 4)
    for _ in range(20):
        nxt = sticky.on_new_batch("t", 6, current, available=[1, 4])
        assert {current, nxt} == {1, 4}  # two available: always the other one
        current = nxt


def test_no_available_partition_falls_back_to_all() -> None:
    sticky = StickyPartitioner(random.Random(5))
    assert 0 <= sticky.partition("t", 4, available=[]) < 4


def test_switches_spread_keyless_batches_over_all_partitions() -> None:
    sticky = StickyPartitioner(random.Random(11))
    current = sticky.partition("t", 4)
    picks = Counter()
    for _ in range(400):
        current = sticky.on_new_batch("t", 4, current)
        picks[current] += 1
    assert set(picks) == {0, 1, 2, 3}
    assert min(picks.values()) > 60  # about 100 each


def test_the_same_seed_gives_the_same_sequence() -> None:
    def walk(seed: int) -> list[int]:
        sticky = StickyPartitioner(random.Random(seed))
        out = [sticky.partition("t", 9)]
        for _ in range(30):
            out.append(sticky.on_new_batch("t", 9, out[-1]))
        return out

    assert walk(42) == walk(42)
    assert walk(42) != walk(43)


def test_topics_stick_independently() -> None:
    sticky = StickyPartitioner(random.Random(2))
    a = sticky.partition("a", 50)
    b = sticky.partition("b", 50)
    sticky.on_new_batch("b", 50, b)
    assert sticky.partition("a", 50) == a


def test_a_topic_that_shrank_gets_a_new_choice_in_range() -> None:
    sticky = StickyPartitioner(random.Random(0))
    current = sticky.partition("t", 100, available=[99])
    assert current == 99
    assert 0 <= sticky.partition("t", 3) < 3


def test_a_sticky_partition_that_lost_its_leader_is_left_at_once() -> None:
    sticky = StickyPartitioner(random.Random(4))
    current = sticky.partition("t", 3)
    still_up = [p for p in range(3) if p != current]
    moved = sticky.partition("t", 3, available=still_up)
    assert moved in still_up
    assert sticky.partition("t", 3, available=still_up) == moved  # and sticks there


def test_an_integral_partition_from_a_user_partitioner_is_accepted() -> None:
    class Int64:  # what a numpy-based partitioner returns: integral, but not an int
        def __init__(self, value: int) -> None:
            self.value = value

        def __index__(self) -> int:
            return self.value

    result = choose_partition("t", b"k", 4, partitioner=lambda key, n: Int64(3))
    assert result == 3 and type(result) is int
