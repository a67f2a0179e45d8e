"""Which segments retention deletes: pure decisions over segment summaries.

The log hands in a summary per segment, oldest first, the last one active. Deletable segments
are always a prefix (oldest first, as in Kafka), and never include the active segment or a
segment holding offsets at or above the high watermark (that data may not be replicated yet).

Two decisions, for two intents: :func:`decide_retention` applies a delete policy's limits
(retention.ms, retention.bytes) together with the log start offset; :func:`segments_below_log_start`
only finds what the log start offset already hides from consumers (DeleteRecords, a retention a
crash interrupted, or a compact-only log), whatever the policy.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple


class SegmentSummary(NamedTuple):
    base_offset: int
    # Offset after the segment's last batch (== base_offset when empty).
    next_offset: int
    size: int
    # Largest record timestamp in the segment, -1 when it has none.
    max_timestamp: int


class RetentionDecision(NamedTuple):
    # How many of the oldest segments to delete.
    delete: int
    # Whether the next segment would go too, but for offsets at or above the high watermark
    # (a follower learns the high watermark a fetch after its log end: worth a retry soon).
    awaits_high_watermark: bool


def decide_retention(
    segments: Sequence[SegmentSummary],
    *,
    now_ms: int,
    retention_ms: int,
    retention_bytes: int,
    log_start_offset: int,
    high_watermark: int,
) -> RetentionDecision:
    """Which of the oldest ``segments`` to delete.

    A segment goes when all of these hold for it and for every older one:

    * it is not the last (active) segment;
    * everything in it is below the high watermark (its end is the next segment's base);
    * and at least one of: it lies wholly below ``log_start_offset`` (DeleteRecords moved it);
      ``retention_ms`` >= 0 and its newest timestamp is more than ``retention_ms`` old;
      ``retention_bytes`` >= 0 and the log stays at or above ``retention_bytes`` without it.
    """
    total = sum(s.size for s in segments)
    count = 0
    for i, segment in enumerate(segments[:-1]):
        end = segments[i + 1].base_offset
        below_start = end <= log_start_offset
        expired = retention_ms >= 0 and now_ms - segment.max_timestamp > retention_ms
        oversized = retention_bytes >= 0 and total - segment.size >= retention_bytes
        if not (below_start or expired or oversized):
            break
        if end > high_watermark:
            return RetentionDecision(count, awaits_high_watermark=True)
        total -= segment.size
        count += 1
    return RetentionDecision(count, awaits_high_watermark=False)


def segments_below_log_start(segments: Sequence[SegmentSummary], *, log_start_offset: int) -> int:
    """How many of the oldest ``segments`` lie wholly below ``log_start_offset``.

    The active (last) segment never counts. The log start offset is never above the high
    watermark, so these segments are always committed.
    """
    count = 0
    for following in segments[1:]:
        if following.base_offset > log_start_offset:
            break
        count += 1
    return count
