"""Reading offset ranges of partitions into Arrow tables, where the records lie.

Each piece of a read is one call to the replica host that leads its partition
(`ReplicaHost.read_table`): the host decodes its batches straight into an Arrow table with the
columns of Spark's Kafka source and keeps it in Ray's object store; the caller (the driver for
a Ray Dataset, a Spark task's Python worker for a DataFrame: `pipelines.spark_reads`) learns
how far each call got and takes the tables by reference. No Ray task, no consumer, no Python
object per record.

`split_ranges` and `group_pieces` are the plan (pure); `read_tables` the I/O.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from itertools import pairwise
from typing import NamedTuple

import pyarrow as pa
import ray
from ray.exceptions import RayActorError

from rafka.actors.clients.metadata import ClientMetadata
from rafka.actors.errors import (
    BrokerUnavailableError,
    OffsetOutOfRangeError,
    RafkaError,
    error_for,
    is_retriable,
)
from rafka.actors.messages import TableRead
from rafka.pipelines.source_options import DataLossError

log = logging.getLogger(__name__)

# About this many bytes of batches per host call: a table of ~8 MB is a good Spark partition,
# and the host's loop is busy decoding for tens of milliseconds at most.
PIECE_MAX_BYTES = 8 * 1024 * 1024
# A read that makes no progress for this long fails (no leader, or the range is not there):
# Spark's kafkaConsumer.pollTimeoutMs default.
READ_TIMEOUT_S = 120.0


class Piece(NamedTuple):
    """Offsets `[start, until)` of one partition, read by one or more host calls."""

    topic: str
    partition: int
    start: int
    until: int


def split_ranges(ranges: Mapping[tuple[str, int], tuple[int, int]],
                 min_partitions: int | None = None) -> list[Piece]:
    """The pieces to read: one per non-empty range, and, with `min_partitions` (Spark's
    `minPartitions`) above that count, large ranges split so that there are about that many,
    each range into parts in proportion to its share of the records, as Spark's
    KafkaOffsetRangeCalculator does."""
    pieces = [Piece(topic, partition, start, until)
              for (topic, partition), (start, until) in sorted(ranges.items()) if until > start]
    if min_partitions is None or min_partitions <= len(pieces):
        return pieces
    total = sum(piece.until - piece.start for piece in pieces)
    split = []
    for piece in pieces:
        size = piece.until - piece.start
        parts = max(1, min(size, round(size / total * min_partitions)))
        bounds = [piece.start + size * part // parts for part in range(parts + 1)]
        split += [piece._replace(start=low, until=high)
                  for low, high in pairwise(bounds)]
    return split


class TableRef(NamedTuple):
    """An Arrow table a host made, in Ray's object store, and what the host said of it."""

    ref: ray.ObjectRef
    rows: int
    size_bytes: int


def read_tables(namespace: str, pieces: list[Piece], include_headers: bool, *,
                fail_on_data_loss: bool = True, timeout_s: float = READ_TIMEOUT_S,
                max_bytes: int = PIECE_MAX_BYTES) -> list[TableRef]:
    """The Arrow tables holding every record of `pieces`, in piece and offset order.

    A piece whose leader moved or died is asked again of the new leader; one larger than
    `max_bytes` takes several calls. Records gone before they were read raise `DataLossError`,
    or with `fail_on_data_loss=False` are skipped (logged), as Spark's Kafka source does.
    """
    metadata = ClientMetadata(namespace)
    tables: list[tuple[Piece, int, TableRef]] = []
    pending = list(pieces)
    last_progress = time.monotonic()
    while pending:
        progressed = False
        # Each piece with its leader's name and the refs of its table and TableRead, or None
        # while it has no leader.
        calls: list[tuple[Piece, tuple[str, ray.ObjectRef, ray.ObjectRef] | None]] = []
        for piece in pending:
            try:
                name, host = metadata.leader_host(piece.topic, piece.partition)
            except BrokerUnavailableError:
                calls.append((piece, None))
                continue
            table, read_ref = host.read_table.remote(piece.topic, piece.partition, piece.start,
                                                     piece.until, max_bytes, include_headers)
            calls.append((piece, (name, table, read_ref)))
        pending = []
        for piece, call in calls:
            if call is None:
                pending.append(piece)
                continue
            name, table, read_ref = call
            try:
                read: TableRead = ray.get(read_ref)
            except RayActorError as error:  # the host died: its partitions move
                metadata.forget_if_dead(name, error)
                metadata.invalidate(piece.topic)
                pending.append(piece)
                continue
            if read.error is not None:
                rest = _after_error(piece, read, metadata, fail_on_data_loss)
                if rest is not None:
                    pending.append(rest)
                continue
            if read.rows:
                tables.append((piece, read.next_offset,
                               TableRef(table, read.rows, read.size_bytes)))
            if read.next_offset > piece.start:
                progressed, last_progress = True, time.monotonic()
            if read.next_offset < piece.until:
                pending.append(piece._replace(start=read.next_offset))
        if pending:
            if time.monotonic() - last_progress > timeout_s:
                stuck = ", ".join(f"{p.topic}-{p.partition} at {p.start} (until {p.until})"
                                  for p in pending)
                raise RafkaError(f"reading made no progress for {timeout_s:.0f} s "
                                 f"(kafkaConsumer.pollTimeoutMs): {stuck}; are the "
                                 "partitions' leaders up?")
            if not progressed:  # a leader moving, or records not there yet
                time.sleep(0.05)
    tables.sort(key=lambda entry: (entry[0].topic, entry[0].partition, entry[1]))
    return [table for _piece, _end, table in tables]


def _after_error(piece: Piece, read: TableRead, metadata: ClientMetadata,
                 fail_on_data_loss: bool) -> Piece | None:
    """What is left to read of `piece` after its read failed with `read.error`."""
    failure = read.error
    assert failure is not None, "only a failed read has what is left after its error"
    error = error_for(failure)
    if isinstance(error, OffsetOutOfRangeError):
        log_start = failure.log_start_offset
        lost_until = min(log_start, piece.until) if log_start > piece.start else piece.until
        message = (f"{piece.topic}-{piece.partition}: offsets {piece.start}..{lost_until - 1} "
                   f"were deleted (log start offset {log_start}) before they were read")
        if fail_on_data_loss:
            raise DataLossError(message + "; pass failOnDataLoss=false to skip lost records")
        log.warning("%s: skipped (failOnDataLoss=false)", message)
        return piece._replace(start=lost_until) if lost_until < piece.until else None
    if error is not None and is_retriable(error):
        metadata.invalidate(piece.topic)
        return piece
    raise error if error is not None else RafkaError(f"read of {piece} failed: {read.error}")


def tables_dataset(tables: list[TableRef], schema: pa.Schema) -> ray.data.Dataset:
    """A Ray Dataset of `tables`, as `ray.data.from_arrow_refs` makes one, but from the
    metadata the hosts sent along: `from_arrow_refs` runs a Ray task per table to learn its
    row count and schema, and a task needs a free CPU, which a Ray cluster whose CPUs Spark's
    executors hold does not have (the read then waits forever). Ray Data's internal
    constructors, as of Ray 2.60 (`tests/pipelines/test_kafka_source.py` reads through this).
    """
    from ray.data._internal.logical.interfaces import LogicalPlan
    from ray.data._internal.logical.operators import FromArrow
    from ray.data._internal.stats import DatasetStats
    from ray.data.block import BlockMetadataWithSchema
    from ray.data.context import DataContext
    from ray.data.dataset import MaterializedDataset

    metadata = [BlockMetadataWithSchema(num_rows=table.rows, size_bytes=table.size_bytes,
                                        exec_stats=None, input_files=None, schema=schema)
                for table in tables]
    context = DataContext.get_current().copy()
    # Ray's internal constructors are annotated with other names for the same types: the
    # ObjectRef of ray.types, BlockStats where DatasetStats is in fact given the metadata.
    plan = LogicalPlan(FromArrow([table.ref for table in tables],  # type: ignore[misc]
                                 metadata), context)
    return MaterializedDataset(plan, context, DatasetStats(
        metadata={"FromArrow": metadata}, parent=None))  # type: ignore[dict-item]


def group_pieces(pieces: list[Piece], groups: int) -> list[list[Piece]]:
    """`pieces` shared among at most `groups` groups of about equal records (largest first,
    each to the group with the fewest so far), each group's in piece order."""
    count = max(1, min(groups, len(pieces)))
    shares: list[list[Piece]] = [[] for _ in range(count)]
    loads = [0] * count
    for piece in sorted(pieces, key=lambda p: p.until - p.start, reverse=True):
        lightest = loads.index(min(loads))
        shares[lightest].append(piece)
        loads[lightest] += piece.until - piece.start
    return [sorted(share) for share in shares if share]
