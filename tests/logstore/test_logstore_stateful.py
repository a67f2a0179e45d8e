"""Every log operation interleaved with the others, checked against a simple model.

The model is the set of records a consumer should see. Truncation only goes to offsets at or
above the high watermark, as a follower's does, so it never meets a compacted batch.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from rafka.logstore import Log, Record, build_batch
from tests.support.logstore import T0, FakeClock, read_all, small_config

HOUR = 3600 * 1000
CONFIG = small_config(
    segment_bytes=700, cleanup_policy="compact,delete", retention_bytes=3000, retention_ms=-1,
    delete_retention_ms=HOUR,
)
KEYS = [b"a", b"b", b"c", None]


class LogMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.root = Path(tempfile.mkdtemp(prefix="logstore-stateful-"))
        self.generation = 0
        self.clock = FakeClock(T0)
        self.log = Log.open(self.root / "t-0", CONFIG, clock=self.clock)
        self.model: dict[int, Record] = {}
        self.counter = 0

    def teardown(self) -> None:
        self.log.close()
        shutil.rmtree(self.root, ignore_errors=True)

    @rule(
        records=st.lists(
            st.tuples(st.sampled_from(KEYS), st.booleans()), min_size=1, max_size=6
        ),
        epoch_bump=st.booleans(),
    )
    def append(self, records: list[tuple[bytes | None, bool]], epoch_bump: bool) -> None:
        epoch = (self.log.epoch_cache.latest_epoch or 0) + (1 if epoch_bump else 0)
        rows = []
        for key, tombstone in records:
            self.counter += 1
            value = None if tombstone and key is not None else b"v%d" % self.counter
            rows.append((key, value, self.clock.ms, None))
        info = self.log.append_as_leader(build_batch(rows), epoch)
        for i, (key, value, ts, _) in enumerate(rows):
            self.model[info.first_offset + i] = Record(info.first_offset + i, ts, key, value, ())
        self.clock.advance(60_000)

    @rule()
    def commit(self) -> None:
        # As the replica actor does: advance the high watermark and checkpoint it, so a crash
        # brings it back at a batch boundary.
        self.log.high_watermark = self.log.log_end_offset
        self.log.checkpoint_high_watermark()

    @rule(data=st.data())
    def truncate(self, data: st.DataObject) -> None:
        hw, end = self.log.high_watermark, self.log.log_end_offset
        offset = data.draw(st.integers(min_value=hw, max_value=end))
        self.log.truncate_to(offset)
        new_end = self.log.log_end_offset
        assert hw <= new_end <= offset or (offset >= end and new_end == end)
        # Only whole batches went: the records between the new end and the target belonged to
        # the batch that held the target.
        self.model = {o: r for o, r in self.model.items() if o < new_end}

    @rule()
    def roll(self) -> None:
        self.log.roll()

    @rule(data=st.data())
    def delete_records(self, data: st.DataObject) -> None:
        offset = data.draw(st.integers(min_value=0, max_value=self.log.high_watermark))
        start = self.log.delete_records_before(offset)
        assert start == max(offset, start)
        self._forget_below_start()

    @rule()
    def retention(self) -> None:
        self.log.delete_old_segments()
        self._forget_below_start()

    @rule(hours=st.integers(min_value=0, max_value=3))
    def compact(self, hours: int) -> None:
        self.clock.advance(hours * HOUR)
        segments = self.log.segments
        cleaned_below = segments[0].base_offset
        for following in segments[1:]:
            if following.base_offset > self.log.high_watermark:
                break
            cleaned_below = following.base_offset
        committed = self.log.high_watermark
        newest = {
            r.key: o for o, r in sorted(self.model.items()) if r.key is not None and o < committed
        }
        horizon = self.clock.ms - HOUR
        self.log.compact()
        self.model = {
            o: r
            for o, r in self.model.items()
            if o >= cleaned_below
            or r.key is None
            or (newest.get(r.key, o) <= o and not (r.value is None and r.timestamp < horizon))
        }

    @rule()
    def reopen(self) -> None:
        self.log.close()
        self.log = Log.open(self.root / "t-0", CONFIG, clock=self.clock)

    @precondition(lambda self: self.generation < 3)
    @rule()
    def crash(self) -> None:
        # What the disk holds right now, opened by a new process.
        self.generation += 1
        image = self.root / f"crash-{self.generation}"
        shutil.copytree(self.root / "t-0", image)
        self.log.close()
        shutil.rmtree(self.root / "t-0")
        image.rename(self.root / "t-0")
        self.log = Log.open(self.root / "t-0", CONFIG, clock=self.clock)

    def _forget_below_start(self) -> None:
        start = self.log.log_start_offset
        self.model = {o: r for o, r in self.model.items() if o >= start}

    @invariant()
    def matches_the_model(self) -> None:
        log = self.log
        assert log.log_start_offset <= log.high_watermark <= log.log_end_offset
        if self.model:
            assert max(self.model) < log.log_end_offset
        assert read_all(log, max_bytes=400) == [self.model[o] for o in sorted(self.model)]


LogMachine.TestCase.settings = settings(
    max_examples=15, stateful_step_count=25, database=None
)
test_log_against_a_model = LogMachine.TestCase
