"""What a stream's next batch reads, and whether a trigger runs one (pure).

Spark's rules: a batch reads from where the last one ended up to the high watermark;
`maxOffsetsPerTrigger` shares its cap among the partitions in proportion to their backlog
(a partition with any backlog gets at least one record, so a small cap never stalls); a
trigger with fewer than `minOffsetsPerTrigger` records waits, unless `maxTriggerDelay` passed
since the last batch; a partition new since the last batch starts at its earliest offset.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from rafka.pipelines.source_options import OffsetRanges, TopicPartitionKey, check_data_loss


def next_ranges(
    bounds: Mapping[TopicPartitionKey, tuple[int, int]],
    positions: Mapping[TopicPartitionKey, int],
    *,
    max_offsets: int | None = None,
    fail_on_data_loss: bool = True,
    until: Mapping[TopicPartitionKey, int] | None = None,
) -> OffsetRanges:
    """Each partition's `[start, until)` for the next batch, from `bounds` (log start offset,
    high watermark) and `positions` (where each partition's next batch starts). `until` caps
    each partition (Trigger.AvailableNow's end, fixed when the stream started)."""
    ranges = {}
    for tp, (log_start, high_watermark) in sorted(bounds.items()):
        start = positions.get(tp, log_start)
        if start < log_start:
            check_data_loss(tp, start, log_start, fail_on_data_loss)
            start = log_start
        end = high_watermark if until is None else min(high_watermark, until.get(tp, start))
        ranges[tp] = (start, max(start, end))
    if max_offsets is None:
        return ranges
    total = sum(end - start for start, end in ranges.values())
    if total <= max_offsets:
        return ranges
    limited = {}
    for tp, (start, end) in ranges.items():
        share = max_offsets * (end - start) / total
        take = math.ceil(share) if share < 1 else math.floor(share)
        limited[tp] = (start, min(end, start + take))
    return limited


def record_count(ranges: Mapping[TopicPartitionKey, tuple[int, int]]) -> int:
    return sum(end - start for start, end in ranges.values())


def should_run(available: int, *, min_offsets: int | None, since_last_batch_ms: float,
               max_trigger_delay_ms: int) -> bool:
    """Whether a trigger with `available` records runs a batch."""
    if available == 0:
        return False
    if min_offsets is None or available >= min_offsets:
        return True
    return since_last_batch_ms >= max_trigger_delay_ms
