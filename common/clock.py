"""The two clocks, under two names so that no one mixes them up.

``wall_clock_ms`` is the time of day: record timestamps, commit times, retention by age, what a
user reads. ``monotonic_ms`` never goes back and means nothing across processes: timeouts,
deadlines, sessions, how long something took.
"""

from __future__ import annotations

import time


def wall_clock_ms() -> int:
    """Milliseconds since the Unix epoch (Kafka's timestamps)."""
    return time.time_ns() // 1_000_000


def monotonic_ms() -> int:
    """Milliseconds on this process's monotonic clock: for durations only."""
    return time.monotonic_ns() // 1_000_000
