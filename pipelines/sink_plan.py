"""Where each row of a Spark partition goes, the same way on every attempt (pure).

The exactly-once sink (`pipelines.spark_writes`) writes each Spark partition under a producer
id derived from the write and the partition (`sink_producer_id`), and resumes a retried
partition by counting records: the first n records for Kafka partition p are those an earlier
attempt wrote. That holds only if every attempt sends each row to the same Kafka partition, in
row order. Keys do so already (murmur2, as Java's producer); an explicit partition too; rows
without either would go where Kafka's sticky partitioner happens to be, so here they go in
runs of `KEYLESS_RUN` rows, partition after partition, from one that depends on the Spark
partition (so small Spark partitions do not all start on the same one).
"""

from __future__ import annotations

from typing import overload

import numpy as np

from rafka.actors.clients.sequenced_producer import derive_producer_id

# Rows in a row go to one partition: as the sticky partitioner fills a batch before moving on.
KEYLESS_RUN = 4096


def sink_producer_id(write_id: str, spark_partition: int) -> int:
    """The producer id every attempt at `spark_partition` of the write `write_id` uses."""
    return derive_producer_id(f"rafka-sink/{write_id}/{spark_partition}")


def target_partitions(topic: str, partitions: int, spark_partition: int, first_row: int,
                      row_count: int, key_partitions: np.ndarray | None = None,
                      explicit: np.ndarray | None = None,
                      explicit_given: np.ndarray | None = None) -> np.ndarray:
    """The Kafka partition of each of `row_count` rows, the first being row `first_row` of
    Spark partition `spark_partition`: the explicit partition if given, else the key's, else
    the keyless run's.

    `key_partitions`: each row's key's partition (`partitioner.default_partitions`), -1 for a
    row without a key. `explicit`: each row's explicit partition, where `explicit_given` says
    (None: every row). Raises `ValueError` for a partition the topic lacks."""
    if partitions <= 0:
        raise ValueError(f"topic {topic!r} has no partitions: create it first")
    rows = first_row + np.arange(row_count, dtype=np.int64)
    targets = _keyless_partition(rows, spark_partition, partitions)
    if key_partitions is not None:
        targets = np.where(key_partitions >= 0, key_partitions, targets)
    if explicit is not None:
        given = np.ones(row_count, dtype=bool) if explicit_given is None else explicit_given
        wrong = given & ((explicit < 0) | (explicit >= partitions))
        if wrong.any():
            raise ValueError(f"partition {int(explicit[wrong][0])} does not exist in topic "
                             f"{topic!r}: it has partitions 0..{partitions - 1}")
        targets = np.where(given, explicit, targets)
    return targets


def keyless_runs(partitions: int, spark_partition: int, first_row: int,
                 row_count: int) -> list[tuple[int, int, int]]:
    """`target_partitions` for rows with neither key nor explicit partition, as runs:
    `(partition, start, stop)`, rows `[start, stop)` counted from `first_row`."""
    runs: list[tuple[int, int, int]] = []
    start = 0
    while start < row_count:
        row = first_row + start
        stop = min(row_count, start + KEYLESS_RUN - row % KEYLESS_RUN)
        runs.append((_keyless_partition(row, spark_partition, partitions), start, stop))
        start = stop
    return runs


@overload
def _keyless_partition(row: int, spark_partition: int, partitions: int) -> int: ...
@overload
def _keyless_partition(row: np.ndarray, spark_partition: int, partitions: int) -> np.ndarray: ...
def _keyless_partition(row: int | np.ndarray, spark_partition: int,
                       partitions: int) -> int | np.ndarray:
    """Where row `row` of a Spark partition goes without key or explicit partition (each row's,
    for an array of rows)."""
    return (spark_partition + row // KEYLESS_RUN) % partitions


def rows_by_partition(targets: np.ndarray) -> dict[int, np.ndarray]:
    """The indexes of the rows going to each partition, in row order."""
    order = np.argsort(targets, kind="stable")
    ordered = targets[order]
    bounds = np.flatnonzero(np.diff(ordered)) + 1
    return {int(ordered[group[0]]): order[group]
            for group in np.split(np.arange(len(order)), bounds) if len(group)}
