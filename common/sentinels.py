"""Kafka's sentinel values, each defined once: what a field holds when there is no such thing."""

from __future__ import annotations

# ListOffsets' special timestamps.
LATEST_TIMESTAMP = -1
"""The high watermark: the offset after the last record a consumer can read."""
EARLIEST_TIMESTAMP = -2
"""The log start offset."""
MAX_TIMESTAMP = -3
"""The record with the largest timestamp (KIP-734), the first of them if several share it."""

UNDEFINED_EPOCH = -1
"""No leader epoch: a log that has none yet, or a request that does not say."""
UNDEFINED_OFFSET = -1
"""No offset: the answer to an epoch the leader does not know."""
NO_LEADER = -1
"""The leader of an offline partition."""

NO_PRODUCER_ID = -1
"""A batch written without idempotence."""
NO_PRODUCER_EPOCH = -1
NO_SEQUENCE = -1

MAX_PRODUCER_EPOCH = 0x7FFF
"""The largest producer epoch: the batch header holds it as an int16 (Kafka's Short.MaxValue)."""


def producer_epoch_exhausted(epoch: int) -> bool:
    """Whether the transaction coordinator must give the producer a new id (at epoch 0) instead of
    bumping this epoch: as Kafka's, it keeps the last epoch for the bump that fences the producer
    when its transaction is ended for it."""
    return epoch >= MAX_PRODUCER_EPOCH - 1
