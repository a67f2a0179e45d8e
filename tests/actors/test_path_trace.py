"""rafka.actors.path_trace: a record's latency laid along its hops, from made-up events (the
real ones are checked end to end in tests/actors/test_path_trace_cluster.py)."""

from __future__ import annotations

import numpy as np
import pytest

from rafka.actors.path_trace import (
    CONSUMER,
    HOPS,
    MAX_EVENTS,
    PathTrace,
    SentRequest,
    TracedRecord,
    TraceIncompleteError,
    hop_breakdown,
)

MS = 1_000_000


def events(**kinds: list) -> dict:
    found = {"appends": [], "reads": [], "positions": [], "high_watermarks": [],
             "fetched_appends": [], "overflowed": False}
    found.update(kinds)
    return found


def two_batches() -> tuple[list[TracedRecord], list[SentRequest], dict, dict[int, dict]]:
    """Offsets 0-1 in a first batch, 2 in a second, on a leader with followers 2 and 3;
    follower 3 is the slow one, so the high watermark waits for it."""
    records = [TracedRecord(0, 0, 1 * MS, 40 * MS), TracedRecord(1, 1 * MS, 2 * MS, 41 * MS),
               TracedRecord(2, 10 * MS, 10 * MS, 60 * MS)]
    requests = [SentRequest(2, 1, 12 * MS), SentRequest(0, 2, 4 * MS)]  # any order
    leader = events(
        appends=[(5 * MS, 6 * MS, 0, 1), (13 * MS, 14 * MS, 2, 2)],
        reads=[(2, 2, 7 * MS), (3, 2, 9 * MS), (CONSUMER, 2, 30 * MS),
               (2, 3, 15 * MS), (3, 3, 16 * MS), (CONSUMER, 3, 50 * MS)],
        positions=[(2, 2, 11 * MS), (3, 2, 20 * MS), (2, 3, 17 * MS), (3, 3, 25 * MS)],
        high_watermarks=[(2, 20 * MS), (3, 25 * MS)],
    )
    followers = {2: events(fetched_appends=[(2, 8 * MS), (3, 16 * MS)]),
                 3: events(fetched_appends=[(2, 12 * MS), (3, 18 * MS)])}
    return records, requests, leader, followers


def test_each_hop_of_each_record_and_the_follower_waited_for() -> None:
    hops = hop_breakdown(*two_batches())
    assert list(hops) == list(HOPS)
    # Offset 0: due 0, started 1, sent 4, at the leader 5, appended 6; follower 3 (the slow
    # one) answered 9, appended 12, its next fetch 20; high watermark 20; consumer 30; poll 40.
    first = [float(hops[hop][0]) for hop in HOPS]
    assert first == [1, 3, 1, 1, 3, 3, 8, 0, 10, 10]
    # Offset 2: due 10, started 10, sent 12, leader 13/14, follower 3: 16, 18, 25; hw 25; 50; 60.
    last = [float(hops[hop][2]) for hop in HOPS]
    assert last == [0, 2, 1, 1, 2, 2, 7, 0, 25, 10]


def test_the_hops_add_up_to_each_records_latency() -> None:
    records, *rest = two_batches()
    hops = hop_breakdown(records, *rest)
    total = sum(hops[hop] for hop in HOPS)
    assert np.allclose(total, [(r.polled_ns - r.due_ns) / MS for r in records])


def test_records_the_trace_does_not_show_are_left_out() -> None:
    records, requests, leader, followers = two_batches()
    # The producer's first request was sent before tracing began.
    hops = hop_breakdown(records, requests[:1], leader, followers)
    assert [len(hops[hop]) for hop in HOPS] == [1] * len(HOPS)
    assert float(hops["consumer_fetch_answered"][0]) == 25
    # The leader's first append was before tracing began: offsets 0 and 1 are not taken for
    # the next batch's.
    leader = {**leader, "appends": leader["appends"][1:]}
    hops = hop_breakdown(records, requests, leader, followers)
    assert [len(hops[hop]) for hop in HOPS] == [1] * len(HOPS)


def test_a_trace_that_dropped_events_is_refused() -> None:
    trace = PathTrace()
    for offset in range(MAX_EVENTS + 1):
        trace.high_watermark_moved(offset)
    assert trace.overflowed and len(trace.high_watermarks) == MAX_EVENTS
    records, requests, leader, followers = two_batches()
    with pytest.raises(TraceIncompleteError, match="shorter run"):
        hop_breakdown(records, requests, {**leader, "overflowed": True}, followers)


def test_the_recorder_keeps_events_in_order_with_their_times() -> None:
    trace = PathTrace()
    trace.appended(5, first_offset=7, last_offset=9)
    trace.answered_read(2, next_offset=10)
    trace.follower_at(2, offset=10)
    trace.high_watermark_moved(10)
    trace.appended_fetched(10)
    found = trace.events()
    (received, appended, first, last), = found["appends"]
    assert (received, first, last) == (5, 7, 9) and appended > received
    assert [event[:2] for event in found["reads"]] == [(2, 10)]
    assert [event[:2] for event in found["positions"]] == [(2, 10)]
    times = [found["reads"][0][2], found["positions"][0][2], found["high_watermarks"][0][1],
             found["fetched_appends"][0][1]]
    assert times == sorted(times)
