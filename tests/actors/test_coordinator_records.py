"""The internal topics' records in Kafka's formats: what rafka writes reads back with
kafka-python's own types as Kafka's OffsetCommitKey/Value and TransactionLogKey/Value, what
Kafka's other versions write reads in rafka, and the msgpack records rafka wrote before still
load (pure)."""

from __future__ import annotations

import msgpack
import pytest

from rafka.actors.offsets_topic import (
    OffsetAndMetadata,
    decode_commit,
    encode_commit,
    legacy_commit_key,
)
from rafka.actors.server.offset_manager import OffsetCache
from rafka.actors.txn.transaction_log import decode_state, encode_state
from rafka.actors.txn.transaction_state import TransactionMetadata, TxnState
from rafka.common.coordinator_records import RecordFormatError
from tests.support.kafka_coordinator_schemas import (
    GROUP_METADATA_KEY,
    OFFSET_COMMIT_KEY,
    OFFSET_COMMIT_VALUES,
    TRANSACTION_LOG_KEY,
    TRANSACTION_LOG_VALUE,
    decode_whole,
)

COMMITTED = OffsetAndMetadata(1234, "checkpoint-7", 1_700_000_000_000, 5)


def legacy_commit(group: str, topic: str, partition: int, offset: int) -> tuple[bytes, bytes]:
    """A commit record as rafka wrote it before Kafka's format."""
    return (legacy_commit_key(group, topic, partition),
            msgpack.packb([1, offset, "", 1_600_000_000_000, 2]))


def test_a_commit_is_kafkas_offset_commit_key_and_value() -> None:
    key, value = encode_commit("billing", "payments", 3, COMMITTED)
    assert decode_whole(OFFSET_COMMIT_KEY, key) == (1, "billing", "payments", 3)
    assert value is not None
    assert decode_whole(OFFSET_COMMIT_VALUES[3], value) == (
        3, 1234, 5, "checkpoint-7", 1_700_000_000_000)
    assert decode_commit(key, value) == ("billing", "payments", 3, COMMITTED)
    assert encode_commit("billing", "payments", 3, None) == (key, None)
    assert decode_commit(key, None) == ("billing", "payments", 3, None)


@pytest.mark.parametrize("version, fields, expected", [
    (0, (0, 10, "m", 77), OffsetAndMetadata(10, "m", 77, -1)),
    (1, (1, 10, "m", 77, 99), OffsetAndMetadata(10, "m", 77, -1)),
    (2, (2, 10, "m", 77), OffsetAndMetadata(10, "m", 77, -1)),
    (3, (3, 10, 4, "m", 77), OffsetAndMetadata(10, "m", 77, 4)),
    (4, (4, 10, 4, "m", 77, {}), OffsetAndMetadata(10, "m", 77, 4)),
])
def test_every_version_of_kafkas_offset_value_is_read(version, fields, expected) -> None:
    key = OFFSET_COMMIT_KEY.encode((0, "g", "t", 1))  # key version 0 is a commit's too
    value = OFFSET_COMMIT_VALUES[version].encode(fields)
    assert decode_commit(key, value) == ("g", "t", 1, expected)


def test_a_group_metadata_record_is_skipped_and_garbage_refused() -> None:
    assert decode_commit(GROUP_METADATA_KEY.encode((2, "g")), b"\x00\x03anything") is None
    key, value = encode_commit("g", "t", 0, COMMITTED)
    for bad_key, bad_value in [
        (b"\x00\x07" + key[2:], value),            # an unknown key version
        (key[:-1], value),                         # a key cut short
        (key + b"\x00", value),                    # a key with bytes after it
        (key, b"\x00\x09" + (value or b"")[2:]),   # an unknown value version
        (key, (value or b"")[:-3]),                # a value cut short
        (b"\x94\xc1", value),                      # msgpack that is not a commit
    ]:
        with pytest.raises(RecordFormatError):
            decode_commit(bad_key, bad_value)


def test_an_old_msgpack_commit_loads_and_its_next_commit_drops_its_record() -> None:
    cache = OffsetCache()
    cache.apply(*legacy_commit("billing", "payments", 0, 40))
    assert cache.get("billing") == {("payments", 0): OffsetAndMetadata(
        40, "", 1_600_000_000_000, 2)}
    # A commit in Kafka's format writes a tombstone under the old key first: else compaction
    # would keep the old record past a later tombstone, and bring the offset back.
    records = cache.commit_records("billing", {("payments", 0): COMMITTED}, 5)
    assert [(key, value) for key, value, _time, _headers in records] == [
        (legacy_commit_key("billing", "payments", 0), None),
        encode_commit("billing", "payments", 0, COMMITTED)]
    for key, value, _time, _headers in records:
        cache.apply(key, value)
    assert cache.get("billing") == {("payments", 0): COMMITTED}
    assert cache.commit_records("billing", {("payments", 0): None}, 6) == [
        (*encode_commit("billing", "payments", 0, None), 6, None)]
    # Replayed after compaction kept only the newest record per key: the old record's
    # tombstone and the new commit.
    replayed = OffsetCache()
    for key, value, _time, _headers in records:
        replayed.apply(key, value)
    assert replayed.get("billing") == {("payments", 0): COMMITTED}


def test_a_transaction_state_is_kafkas_transaction_log_key_and_value() -> None:
    state = TransactionMetadata("orders-tx", 77_000_000_001, 3, 60_000, TxnState.ONGOING,
                                frozenset({("a", 2), ("a", 0), ("b", 1)}), 1_000, 1_500)
    key, value = encode_state(state)
    assert decode_whole(TRANSACTION_LOG_KEY, key) == (0, "orders-tx")
    assert decode_whole(TRANSACTION_LOG_VALUE, value) == (
        0, 77_000_000_001, 3, 60_000, 1, [("a", [0, 2]), ("b", [1])], 1_500, 1_000)
    assert decode_state(key, value) == state
    # Kafka's ids for each state, as its TransactionLogMessageFormatter prints them.
    for state_id, name in enumerate(["Empty", "Ongoing", "PrepareCommit", "PrepareAbort",
                                     "CompleteCommit", "CompleteAbort"]):
        other = TransactionMetadata("t", 1, 0, 1, TxnState(name))
        assert decode_whole(TRANSACTION_LOG_VALUE, encode_state(other)[1])[4] == state_id
        assert decode_state(*encode_state(other)) == other


def test_an_old_msgpack_transaction_state_loads_and_garbage_is_refused() -> None:
    key = msgpack.packb([0, "orders-tx"])
    value = msgpack.packb([0, 5, 1, 60_000, "CompleteCommit", [], -1, 2_000])
    assert decode_state(key, value) == TransactionMetadata(
        "orders-tx", 5, 1, 60_000, TxnState.COMPLETE_COMMIT, frozenset(), -1, 2_000)
    new_key, new_value = encode_state(decode_state(key, value))
    for bad_key, bad_value in [
        (key, b"\xc1"),                                    # not msgpack
        (key, msgpack.packb([0, 5, 1, 60_000, "Ready", [], -1, 0])),  # no such state
        (new_key, new_value[:-3]),                         # cut short
        (new_key, b"\x00\x01" + new_value[2:]),            # v1, flexible: not read
        (new_key, new_value[:16] + b"\x07" + new_value[17:]),  # PrepareEpochFence
        (b"\x00\x01" + new_key[2:], new_value),            # a key of another type
    ]:
        with pytest.raises(RecordFormatError):
            decode_state(bad_key, bad_value)
