"""Rows into a topic, each stored once however often a part of the write is attempted: the
writer that Spark's sink (`pipelines.spark_writes`) and Ray Data's (`pipelines.dataset_writes`)
run in their tasks.

A write is split into numbered parts (a Spark partition, a Ray Data write task). Each part is
written by a `SequencedProducer` under a producer id derived from the write's id and the part's
number (`pipelines.sink_plan`). Before sending, it asks the leaders how many records earlier
attempts of the same part wrote to each Kafka partition, skips that many, and sends the rest
with the sequence numbers that follow. So a part run again (its worker died, the write failed
midway), or a whole write run again under the same write id, adds only what is missing.

This holds if every attempt gives each part the same rows in the same order; a part whose rows
are fewer than an earlier attempt wrote fails with `NonDeterministicInputError`. The rows stay
Arrow columns until they are batches: each Kafka partition's share of an Arrow batch (a slice,
or a `take` of keyed rows) goes to `Producer.send_columns`.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from typing import Any, NamedTuple

import numpy as np
import pyarrow as pa

from rafka.actors.clients.column_partitions import check_record_columns, key_partitions
from rafka.actors.clients.producer import Producer, SentRecords
from rafka.actors.clients.sequenced_producer import SequencedProducer
from rafka.actors.errors import RafkaError
from rafka.pipelines.sink_plan import (
    keyless_runs,
    rows_by_partition,
    sink_producer_id,
    target_partitions,
)


class NonDeterministicInputError(RafkaError):
    """A retried write's part holds other rows than its earlier attempt had."""


class SinkColumns(NamedTuple):
    """Which columns hold each record's parts (None: it has none)."""

    key: str | None
    value: str
    partition: str | None
    headers: str | None

    def names(self) -> list[str]:
        return [name for name in self if name is not None]


def check_arrow_schema(schema: pa.Schema, columns: SinkColumns) -> None:
    """The sink's column types, refused before any row is written (`TypeError`; a missing
    column, `ValueError`)."""
    check_record_columns(schema, columns.value, columns.key, columns.partition, columns.headers)


def write_part(namespace: str, topic: str, write_id: str, part: int, part_name: str,
               columns: SinkColumns, batches: Iterable[pa.RecordBatch], *, acks: Any,
               timeout_s: float, nothing_before: bool = False) -> Counter[int]:
    """Write part `part` of the write `write_id` (its rows: `batches`), after what earlier
    attempts of it stored; how many of its rows belong to each Kafka partition.
    `nothing_before`: no earlier attempt can have written (the leaders need not be asked, 10-25
    ms a part). `part_name` says what a part is in errors ("Spark partition 3")."""
    producer = SequencedProducer(namespace, sink_producer_id(write_id, part), acks=acks)
    try:
        already = producer.start_fresh(topic) if nothing_before else producer.resume(
            topic, timeout_s)
        counts, sent, to_skip = send_rows(producer, topic, len(already), part, columns,
                                          batches, dict(already))
        short = ", ".join(f"{already[p]} records to {topic}-{p}, where this attempt has "
                          f"{counts[p]} rows" for p, left in sorted(to_skip.items()) if left)
        if short:
            raise NonDeterministicInputError(
                f"an earlier attempt at {part_name} of write {write_id!r} wrote {short}: the "
                "input gives other rows each time it is computed; make it deterministic "
                "(sort after a shuffle: sortWithinPartitions in Spark)")
        producer.flush(timeout_s)
        for outcome in sent:  # raises the first failure
            outcome.partition_counts(timeout_s)
    finally:
        producer.close(timeout_s)
    return counts


def send_rows(producer: Producer, topic: str, partitions: int, part: int,
              columns: SinkColumns, batches: Iterable[pa.RecordBatch],
              to_skip: dict[int, int]) -> tuple[Counter[int], list[SentRecords], dict[int, int]]:
    """Send the rows of `batches` (part `part` of a write) to their Kafka partitions
    (`sink_plan`), skipping the first `to_skip[p]` rows of each partition p. Returns how many
    rows each partition has, what was sent, and what was left to skip (rows an earlier
    attempt had that this one has not)."""
    to_skip = dict(to_skip)
    counts: Counter[int] = Counter()
    sent = []
    first_row = 0
    for batch in batches:
        values = batch.column(columns.value)
        keys = batch.column(columns.key) if columns.key else None
        headers = batch.column(columns.headers) if columns.headers else None
        if keys is None and columns.partition is None:  # slices, not a partition per row
            groups: list[tuple[int, range | np.ndarray]] = [
                (target, range(start, stop)) for target, start, stop
                in keyless_runs(partitions, part, first_row, batch.num_rows)]
        else:
            groups = list(rows_by_partition(
                batch_targets(batch, topic, partitions, part, first_row, columns)).items())
        for target, rows in groups:
            counts[target] += len(rows)
            skipped = min(to_skip[target], len(rows))
            to_skip[target] -= skipped
            rows = rows[skipped:]
            if not len(rows):
                continue
            sent.append(producer.send_columns(
                topic, _pick(values, rows), None if keys is None else _pick(keys, rows),
                partition=target, headers=None if headers is None else _pick(headers, rows)))
        first_row += batch.num_rows
    return counts, sent, to_skip


def batch_targets(batch: pa.RecordBatch, topic: str, partitions: int, part: int,
                  first_row: int, columns: SinkColumns) -> np.ndarray:
    """The Kafka partition of each row of `batch`, row `first_row` of part `part` onwards."""
    explicit, given = _explicit_partitions(batch, columns.partition)
    keys = batch.column(columns.key) if columns.key else None
    by_key = None if keys is None else key_partitions(keys, partitions)
    return target_partitions(topic, partitions, part, first_row, batch.num_rows, by_key,
                             explicit, given)


def _explicit_partitions(batch: pa.RecordBatch, name: str | None,
                         ) -> tuple[np.ndarray | None, np.ndarray | None]:
    """The partition column's values, and where they are given (None: every row)."""
    if name is None:
        return None, None
    column = batch.column(name)
    values = column.fill_null(0).to_numpy().astype(np.int64)
    return values, (column.is_valid().to_numpy(zero_copy_only=False) if column.null_count
                    else None)


def _pick(column: pa.Array, rows: range | np.ndarray) -> pa.Array:
    """`column` at `rows`: a slice (no copy) for a run of rows."""
    if isinstance(rows, range):
        return column.slice(rows.start, len(rows))
    return column.take(pa.array(rows, pa.int64()))
