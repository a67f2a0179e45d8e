"""Kafka's coordinator records in kafka-python's own types (`kafka.protocol.old.types`): the
independent reading the tests hold rafka's `__consumer_offsets` and `__transaction_state`
records to. Each schema starts with its int16 version, as the records do."""

from __future__ import annotations

import io
from typing import Any

from kafka.protocol.old.types import (
    Array,
    CompactString,
    Int8,
    Int16,
    Int32,
    Int64,
    Schema,
    String,
    TaggedFields,
)

OFFSET_COMMIT_KEY = Schema(("version", Int16), ("group", String("utf-8")),
                           ("topic", String("utf-8")), ("partition", Int32))
GROUP_METADATA_KEY = Schema(("version", Int16), ("group", String("utf-8")))
OFFSET_COMMIT_VALUES = {
    0: Schema(("version", Int16), ("offset", Int64), ("metadata", String("utf-8")),
              ("commit_timestamp", Int64)),
    1: Schema(("version", Int16), ("offset", Int64), ("metadata", String("utf-8")),
              ("commit_timestamp", Int64), ("expire_timestamp", Int64)),
    2: Schema(("version", Int16), ("offset", Int64), ("metadata", String("utf-8")),
              ("commit_timestamp", Int64)),
    3: Schema(("version", Int16), ("offset", Int64), ("leader_epoch", Int32),
              ("metadata", String("utf-8")), ("commit_timestamp", Int64)),
    4: Schema(("version", Int16), ("offset", Int64), ("leader_epoch", Int32),
              ("metadata", CompactString("utf-8")), ("commit_timestamp", Int64),
              ("tags", TaggedFields)),
}
TRANSACTION_LOG_KEY = Schema(("version", Int16), ("transactional_id", String("utf-8")))
TRANSACTION_LOG_VALUE = Schema(
    ("version", Int16), ("producer_id", Int64), ("producer_epoch", Int16),
    ("timeout_ms", Int32), ("status", Int8),
    ("partitions", Array(("topic", String("utf-8")), ("partition_ids", Array(Int32)))),
    ("last_update_ms", Int64), ("start_ms", Int64))


def decode_whole(schema: Schema, data: bytes) -> tuple[Any, ...]:
    """`data` read with `schema`, which must take every byte of it."""
    buffer = io.BytesIO(data)
    fields = schema.decode(buffer)
    assert buffer.read() == b"", "bytes follow the record"
    return fields
