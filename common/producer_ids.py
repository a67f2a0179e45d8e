"""Producer ids drawn at random, as rafka hands them out without Kafka's id blocks in ZooKeeper."""

from __future__ import annotations

import secrets

PRODUCER_ID_BITS = 62
"""Every producer id is under 2**62: positive as Kafka's int64 field needs, and far enough from
it that two producers practically never draw the same."""


def random_producer_id() -> int:
    """A new producer id, for an idempotent producer or a transactional id's first epoch."""
    return secrets.randbits(PRODUCER_ID_BITS)
