"""What the log store tests share: hypothesis budgets, a fake clock, tiny log configs, batches of
numbered records, and a log read back whole (plain functions, no fixtures)."""

from __future__ import annotations

from pathlib import Path

from hypothesis import HealthCheck, settings

from rafka.logstore import Log, LogConfig, Record, build_batch, decode_batches

# Hypothesis budget for the log store tests: enough examples to find framing bugs, small enough
# for the whole logstore run to stay well under a minute on two shared cores. No example
# database: it would write into the repository.
SMALL = settings(
    max_examples=25,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
MEDIUM = settings(SMALL, max_examples=40)

T0 = 1_700_000_000_000  # a plausible "now" in ms


class FakeClock:
    """A clock for ``Log.open(clock=...)``: returns seconds, like time.time; set in ms."""

    def __init__(self, ms: int = T0) -> None:
        self.ms = ms

    def __call__(self) -> float:
        return self.ms / 1000

    def advance(self, ms: int) -> None:
        self.ms += ms


def small_config(**overrides: object) -> LogConfig:
    """Tiny segments and a dense index, so a few KB exercise rolls and lookups."""
    values: dict[str, object] = {"segment.bytes": 4096, "index.interval.bytes": 256}
    values.update({k.replace("_", "."): v for k, v in overrides.items()})
    return LogConfig.from_dict(values)


def batch_of(
    n: int,
    *,
    start: int = 0,
    ts: int = T0,
    key_prefix: bytes = b"key",
    value_size: int = 20,
    **kwargs: object,
) -> bytes:
    """A batch of ``n`` records whose keys and values name their index ``start + i``."""
    return build_batch(
        [
            (
                key_prefix + b"-%d" % (start + i),
                (b"value-%d-" % (start + i)).ljust(value_size, b"x"),
                ts + i,
                None,
            )
            for i in range(n)
        ],
        **kwargs,  # type: ignore[arg-type]
    )


def read_all(log: Log, start: int | None = None, max_bytes: int = 1 << 20) -> list[Record]:
    """Every record from ``start`` (log start) to the log end, through fetches of max_bytes."""
    offset = log.log_start_offset if start is None else start
    records: list[Record] = []
    while offset < log.log_end_offset:
        fetch = log.read(offset, max_bytes)
        assert fetch.next_offset > offset, f"no progress reading at {offset}"
        records += decode_batches(fetch.records, offset)
        offset = fetch.next_offset
    return records


def files(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir())
