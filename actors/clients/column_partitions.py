"""Which partition each key of an Arrow column goes to, all at once: the default partitioner
(`partitioner.default_partitions`, Kafka's murmur2) over the column's buffers, for a pipeline's
writer that keeps its rows as columns (`pipelines.spark_writes`)."""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from rafka.actors.clients.partitioner import default_partitions
from rafka.logstore.record_columns import binary_buffers


def key_partitions(keys: pa.Array, partitions: int) -> np.ndarray:
    """The partition Java's producer gives each key of an Arrow binary or string column; -1
    for a null key."""
    offsets, data, valid = binary_buffers(keys)
    placed = default_partitions(offsets, data, partitions)
    return placed if valid is None else np.where(valid, placed, -1)
