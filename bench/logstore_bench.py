"""Log store throughput: append, and read + parse, beside plain file I/O of the same bytes.

    python bench/logstore_bench.py [--records N] [--record-size 100] [--batch 1000] [--plot out.png]

Prints one JSON object. Batches of ``--batch`` records of ``--record-size``-byte values are built
once (not timed in the append figures), then:

* ``append``: ``Log.append_as_leader`` of every batch (header read + stamp + write + index);
* ``plain_write``: the same bytes written with ``file.write``;
* ``read_parse``: ``Log.read`` from offset 0 to the end with 1 MiB fetches and
  ``decode_batches`` of each (CRC checked), i.e. what a consumer does;
* ``plain_read``: the file read back with 1 MiB ``file.read`` calls (no parsing);
* ``validate_framing`` and ``validate_full``: the header and CRC check of each batch alone
  (``check_batch``), and a leader's whole check of a producer's batch (``validate_batch``, every
  record decoded and checked), to put beside ``append``;
* ``validate_by_ends``: the same check of batches of the same values encoded from an Arrow
  column (``send_columns``' way), given where each record ends (``logstore/record_check.py``).

Neither side fsyncs inside the timed loops (the log's default leaves flushing to the OS).
Targets: append >= 50 % of the plain write rate; read + parse >= 2,000,000 records/s.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

# This file is named logstore.py: drop its own folder from the path so that ``import logstore``
# finds the package at the repository root, not this script.
_HERE = Path(__file__).resolve().parent
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != _HERE]
sys.path.insert(0, str(_HERE.parent))

import pyarrow as pa  # noqa: E402

from bench.common import pyplot  # noqa: E402
from rafka.logstore import Log, LogConfig, build_batch, decode_batches  # noqa: E402
from rafka.logstore.batch import check_batch, frame_batch, validate_batch  # noqa: E402
from rafka.logstore.record_columns import encode_binary_records  # noqa: E402

READ_SIZE = 1 << 20


def _rate(records: int, nbytes: int, seconds: float) -> dict[str, float]:
    return {
        "seconds": round(seconds, 4),
        "records_per_s": round(records / seconds),
        "mb_per_s": round(nbytes / seconds / 1e6, 1),
    }


def build_batches(records: int, record_size: int, batch: int) -> list[bytes]:
    value = os.urandom(record_size)
    now_ms = int(time.time() * 1000)
    batches = []
    for start in range(0, records, batch):
        count = min(batch, records - start)
        batches.append(
            build_batch([(None, value, now_ms + start + i, None) for i in range(count)])
        )
    return batches


def build_column_batches(records: int, record_size: int,
                         batch: int) -> list[tuple[bytes, bytes | None]]:
    """Batches of the same shape encoded from an Arrow column, with their records' ends."""
    values = pa.array([os.urandom(record_size)] * records, pa.binary())
    run_ends = [*range(batch, records, batch), records]
    payloads = encode_binary_records(values, None, int(time.time() * 1000), run_ends)
    return [(frame_batch(payload), payload.record_ends) for payload in payloads]


def bench_validate_by_ends(batches: list[tuple[bytes, bytes | None]]) -> float:
    started = time.perf_counter()
    for batch, record_ends in batches:
        validate_batch(batch, len(batch), record_ends=record_ends)
    return time.perf_counter() - started


def bench_append(directory: Path, batches: list[bytes]) -> tuple[float, Log]:
    log = Log.open(directory / "bench-0", LogConfig())
    started = time.perf_counter()
    for batch in batches:
        log.append_as_leader(batch, 0)
    elapsed = time.perf_counter() - started
    log.high_watermark = log.log_end_offset
    return elapsed, log


def bench_plain_write(path: Path, batches: list[bytes]) -> float:
    started = time.perf_counter()
    with open(path, "wb") as f:
        for batch in batches:
            f.write(batch)
        f.flush()
    return time.perf_counter() - started


def bench_read_parse(log: Log) -> tuple[float, int]:
    started = time.perf_counter()
    offset = log.log_start_offset
    end = log.log_end_offset
    count = 0
    while offset < end:
        fetch = log.read(offset, READ_SIZE, max_offset=log.high_watermark)
        records = decode_batches(fetch.records, offset)
        count += len(records)
        offset = fetch.next_offset
    return time.perf_counter() - started, count


def bench_validate(batches: list[bytes], records: bool) -> float:
    """The leader's check of each batch: with `records`, `validate_batch` (every record
    decoded); without, only what a CRC check costs (`check_batch`), for comparison."""
    started = time.perf_counter()
    for batch in batches:
        if records:
            validate_batch(batch, len(batch))
        else:
            check_batch(memoryview(batch), 0, verify_crc=True, strict=True)
    return time.perf_counter() - started


def bench_plain_read(path: Path) -> float:
    started = time.perf_counter()
    with open(path, "rb", buffering=0) as f:
        while f.read(READ_SIZE):
            pass
    return time.perf_counter() - started


def run(records: int, record_size: int, batch: int) -> dict[str, object]:
    batches = build_batches(records, record_size, batch)
    column_batches = build_column_batches(records, record_size, batch)
    total_bytes = sum(map(len, batches))
    with tempfile.TemporaryDirectory(prefix="rafka-bench-") as tmp:
        directory = Path(tmp)
        plain = directory / "plain.bin"
        # Alternate and keep the median of three, so a noisy neighbour hurts both sides alike.
        runs: dict[str, list[float]] = {name: [] for name in (
            "append", "write", "read", "plain_read", "framing", "full", "by_ends")}
        parsed = 0
        for _ in range(3):
            if (directory / "bench-0").exists():
                _remove_tree(directory / "bench-0")
            elapsed, log = bench_append(directory, batches)
            runs["append"].append(elapsed)
            runs["write"].append(bench_plain_write(plain, batches))
            elapsed, parsed = bench_read_parse(log)
            runs["read"].append(elapsed)
            runs["plain_read"].append(bench_plain_read(plain))
            runs["framing"].append(bench_validate(batches, records=False))
            runs["full"].append(bench_validate(batches, records=True))
            runs["by_ends"].append(bench_validate_by_ends(column_batches))
            log.close()
            plain.unlink()
    append_s, write_s, read_s, plain_read_s, framing_s, full_s, by_ends_s = (
        statistics.median(times) for times in runs.values())
    append = _rate(records, total_bytes, append_s)
    plain_write = _rate(records, total_bytes, write_s)
    read_parse = _rate(parsed, total_bytes, read_s)
    plain_read = _rate(records, total_bytes, plain_read_s)
    return {
        "records": records,
        "record_size": record_size,
        "batch_records": batch,
        "bytes": total_bytes,
        "append": append,
        "plain_write": plain_write,
        "append_vs_plain_write": round(write_s / append_s, 3),
        "read_parse": read_parse,
        "plain_read": plain_read,
        "records_parsed": parsed,
        "validate_framing": _rate(records, total_bytes, framing_s),
        "validate_full": _rate(records, total_bytes, full_s),
        "validate_by_ends": _rate(records, total_bytes, by_ends_s),
        # What full validation adds to a leader's append, per record.
        "validate_full_vs_append": round(full_s / append_s, 3),
        "targets": {
            "append_at_least_half_plain_write": write_s / append_s >= 0.5,
            "read_parse_at_least_2M_records_per_s": read_parse["records_per_s"] >= 2_000_000,
        },
    }


def _remove_tree(path: Path) -> None:
    for child in path.iterdir():
        child.unlink()
    path.rmdir()


def plot(result: dict[str, object], out: str) -> None:
    plt = pyplot()
    if plt is None:
        print("matplotlib is not installed: no plot", file=sys.stderr)
        return
    names = ["append", "plain_write", "read_parse", "plain_read"]
    values = [result[n]["mb_per_s"] for n in names]  # type: ignore[index]
    fig, ax = plt.subplots(figsize=(6, 3.5))
    ax.bar(names, values, color=["tab:blue", "tab:gray", "tab:green", "tab:gray"])
    ax.set_ylabel("MB/s")
    ax.set_title(f"logstore, {result['records']:,} records of {result['record_size']} B")
    fig.tight_layout()
    fig.savefig(out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--record-size", type=int, default=100)
    parser.add_argument("--batch", type=int, default=1000)
    parser.add_argument("--plot", metavar="PNG", help="write a bar chart (needs matplotlib)")
    args = parser.parse_args(argv)
    result = run(args.records, args.record_size, args.batch)
    print(json.dumps(result, indent=2))
    if args.plot:
        plot(result, args.plot)
    return 0


if __name__ == "__main__":
    sys.exit(main())
