"""Records as Arrow tables, with the columns of Spark's Kafka source.

A replica host builds these straight from the batches it reads (`ReplicaHost.read_table`), so
a pipeline's records become Arrow columns where they lie: msgpack and ``zip`` transpose each
batch in C (`logstore.batch.decode_columns`), numpy adds the batch's base offset and timestamp,
and the constant columns are made from buffers. No Python code runs per record.
"""

from __future__ import annotations

from itertools import chain

import numpy as np
import pyarrow as pa

from rafka.logstore.batch import LOG_APPEND_TIME, BatchColumns

HEADERS_TYPE = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))
RECORD_SCHEMA = pa.schema([
    ("key", pa.binary()),
    ("value", pa.binary()),
    ("topic", pa.string()),
    ("partition", pa.int32()),
    ("offset", pa.int64()),
    ("timestamp", pa.timestamp("ms", tz="UTC")),
    ("timestampType", pa.int32()),
])
RECORD_SCHEMA_WITH_HEADERS = RECORD_SCHEMA.append(pa.field("headers", HEADERS_TYPE))


def schema(include_headers: bool) -> pa.Schema:
    return RECORD_SCHEMA_WITH_HEADERS if include_headers else RECORD_SCHEMA


def records_table(batches: list[BatchColumns], topic: str, partition: int,
                  include_headers: bool) -> pa.Table:
    """One table of every record in `batches` (one partition's, in offset order)."""
    if not batches:
        return schema(include_headers).empty_table()
    offsets = np.concatenate([
        np.asarray(batch.offset_deltas, dtype=np.int64) + batch.base_offset
        for batch in batches])
    timestamps = np.concatenate([
        np.full(len(batch.offset_deltas), batch.max_timestamp, dtype=np.int64)
        if batch.timestamp_type == LOG_APPEND_TIME
        else np.asarray(batch.timestamp_deltas, dtype=np.int64) + batch.first_timestamp
        for batch in batches])
    timestamp_types = np.concatenate([
        np.full(len(batch.offset_deltas), batch.timestamp_type, dtype=np.int32)
        for batch in batches])
    count = len(offsets)
    columns = [
        pa.array(list(chain.from_iterable(batch.keys for batch in batches)), pa.binary()),
        pa.array(list(chain.from_iterable(batch.values for batch in batches)), pa.binary()),
        _repeated_string(topic, count),
        pa.array(np.full(count, partition, dtype=np.int32)),
        pa.array(offsets),
        pa.array(timestamps).cast(pa.timestamp("ms", tz="UTC")),
        pa.array(timestamp_types),
    ]
    if include_headers:
        columns.append(pa.array(list(chain.from_iterable(batch.headers for batch in batches)),
                                HEADERS_TYPE))
    return pa.Table.from_arrays(columns, schema=schema(include_headers))


def _repeated_string(text: str, count: int) -> pa.Array:
    """`count` copies of `text` as a string array, built from its buffers."""
    data = text.encode()
    offsets = np.arange(count + 1, dtype=np.int32) * len(data)
    return pa.Array.from_buffers(pa.string(), count,
                                 [None, pa.py_buffer(offsets), pa.py_buffer(data * count)])
