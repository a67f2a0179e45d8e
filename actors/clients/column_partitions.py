"""Records kept as Arrow columns, for a pipeline's writer (`pipelines.sequenced_sink`): which
partition each key goes to, all at once (the default partitioner, Kafka's murmur2, over the
column's buffers), and whether a schema's columns are what `Producer.send_columns` takes."""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from rafka.actors.clients.partitioner import default_partitions
from rafka.logstore.record_columns import binary_buffers, is_binary_type, is_headers_type


def key_partitions(keys: pa.Array, partitions: int) -> np.ndarray:
    """The partition Java's producer gives each key of an Arrow binary or string column; -1
    for a null key."""
    offsets, data, valid = binary_buffers(keys)
    placed = default_partitions(offsets, data, partitions)
    return placed if valid is None else np.where(valid, placed, -1)


def check_record_columns(schema: pa.Schema, value: str, key: str | None = None,
                         partition: str | None = None, headers: str | None = None) -> None:
    """Refuse, before any row is sent, a schema whose named columns are not records' parts:
    keys and values binary or string, the partition an integer, headers a list of structs of
    a string key and a binary or string value. A `ValueError` names a missing column."""
    names = [name for name in (key, value, partition, headers) if name is not None]
    missing = [name for name in names if name not in schema.names]
    if missing:
        raise ValueError(f"no column {missing} among the rows' columns {schema.names}")
    for name in (key, value):
        if name is not None and not is_binary_type(schema.field(name).type):
            raise TypeError(f"column {name!r} is {schema.field(name).type}: keys and values "
                            "must be binary or string; serialise it first (e.g. to JSON)")
    if partition is not None and not pa.types.is_integer(schema.field(partition).type):
        raise TypeError(f"column {partition!r} is {schema.field(partition).type}: a "
                        "partition is an integer")
    if headers is not None and not is_headers_type(schema.field(headers).type):
        raise TypeError(f"column {headers!r} is {schema.field(headers).type}: headers are a "
                        "list of structs of a string key and a binary or string value")
