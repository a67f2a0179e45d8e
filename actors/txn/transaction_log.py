"""The records of `__transaction_state`, in Kafka's format: each transactional id's newest
state keyed by the id (TransactionLogKey, record type 0), its value a TransactionLogValue v0
(the producer id and epoch, the timeout, the state as Kafka numbers it, the partitions by
topic, when the state was written and when the transaction began). Tools that read the topic
directly (Kafka's TransactionLogMessageFormatter) understand them. Records rafka wrote before,
in msgpack, are read too; a state written again replaces one under the same id, and compaction
keeps the newest per key, so an id's old record is dropped once its state is written anew.
Pure.
"""

from __future__ import annotations

import msgpack

from rafka.actors.txn.transaction_state import TransactionMetadata, TxnState
from rafka.common.coordinator_records import RecordFormatError, RecordReader, RecordWriter

# The int16 that starts a TransactionLogKey (its record type) and the value version written:
# v0, the newest that is not flexible.
TRANSACTION_LOG_KEY_VERSION = 0
TRANSACTION_LOG_VALUE_VERSION = 0
# Kafka's numbers for the states (TransactionState's ids; 6 and 7, Dead and
# PrepareEpochFence, are states rafka never writes).
STATE_IDS = {TxnState.EMPTY: 0, TxnState.ONGOING: 1, TxnState.PREPARE_COMMIT: 2,
             TxnState.PREPARE_ABORT: 3, TxnState.COMPLETE_COMMIT: 4, TxnState.COMPLETE_ABORT: 5}
_STATES = {number: state for state, number in STATE_IDS.items()}
# The first byte of a key rafka wrote before it wrote Kafka's format: msgpack's two-element
# array.
_LEGACY_KEY_START = 0x92


def encode_state(metadata: TransactionMetadata) -> tuple[bytes, bytes]:
    """The key and value of the record that stores `metadata` (the newest per key wins, and
    compaction keeps it)."""
    key = RecordWriter().int16(TRANSACTION_LOG_KEY_VERSION).string(
        metadata.transactional_id).bytes()
    by_topic: dict[str, list[int]] = {}
    for topic, partition in sorted(metadata.partitions):
        by_topic.setdefault(topic, []).append(partition)
    value = (RecordWriter().int16(TRANSACTION_LOG_VALUE_VERSION).int64(metadata.producer_id)
             .int16(metadata.producer_epoch).int32(metadata.timeout_ms)
             .int8(STATE_IDS[metadata.state]).int32(len(by_topic)))
    for topic, partitions in by_topic.items():
        value.string(topic).int32(len(partitions))
        for partition in partitions:
            value.int32(partition)
    value.int64(metadata.updated_ms).int64(metadata.started_ms)
    return key, value.bytes()


def decode_state(key: bytes, value: bytes) -> TransactionMetadata:
    """A `__transaction_state` record, in Kafka's format or rafka's earlier msgpack one;
    `RecordFormatError` (a ValueError) for anything else."""
    if key[:1] == bytes([_LEGACY_KEY_START]):
        return _decode_legacy(key, value)
    reader = RecordReader(key)
    if (version := reader.int16()) != TRANSACTION_LOG_KEY_VERSION:
        raise RecordFormatError(f"__transaction_state key of unknown version {version}")
    transactional_id = reader.string()
    reader.end()
    reader = RecordReader(value)
    if (version := reader.int16()) != TRANSACTION_LOG_VALUE_VERSION:
        raise RecordFormatError(f"TransactionLogValue of version {version}: rafka reads v0")
    producer_id, producer_epoch, timeout_ms = reader.int64(), reader.int16(), reader.int32()
    state = _STATES.get(number := reader.int8())
    if state is None:
        raise RecordFormatError(f"transaction state {number} is not one rafka writes")
    partitions: set[tuple[str, int]] = set()
    for _ in range(max(reader.int32(), 0)):  # -1: null, as Kafka may write for no partitions
        topic = reader.string()
        partitions.update((topic, reader.int32()) for _ in range(reader.int32()))
    updated_ms, started_ms = reader.int64(), reader.int64()
    reader.end()
    return TransactionMetadata(transactional_id, producer_id, producer_epoch, timeout_ms, state,
                               frozenset(partitions), started_ms, updated_ms)


def _decode_legacy(key: bytes, value: bytes) -> TransactionMetadata:
    try:
        key_version, transactional_id = msgpack.unpackb(key)
        (value_version, producer_id, producer_epoch, timeout_ms, state, partitions, started,
         updated) = msgpack.unpackb(value)
        if key_version != 0 or value_version != 0:
            raise RecordFormatError(
                f"transaction state record of version {key_version}/{value_version}")
        return TransactionMetadata(
            transactional_id, producer_id, producer_epoch, timeout_ms, TxnState(state),
            frozenset((topic, partition) for topic, partition in partitions), started, updated)
    except (ValueError, TypeError, msgpack.UnpackException) as error:
        raise RecordFormatError(f"not a transaction state record: {error}") from None
