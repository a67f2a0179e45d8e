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

from collections.abc import Sequence

from rafka.actors.clients.partitioner import choose_partition
from rafka.actors.clients.sequenced_producer import derive_producer_id

# Rows in a row go to one partition: as the sticky partitioner fills a batch before moving on.
KEYLESS_RUN = 4096


def sink_producer_id(write_id: str, spark_partition: int) -> int:
    """The producer id every attempt at `spark_partition` of the write `write_id` uses."""
    return derive_producer_id(f"rafka-sink/{write_id}/{spark_partition}")


def target_partitions(
    topic: str,
    partitions: int,
    spark_partition: int,
    first_row: int,
    row_count: int,
    keys: Sequence[bytes | None] | None = None,
    explicit: Sequence[int | None] | None = None,
) -> list[int]:
    """The Kafka partition of each of `row_count` rows, the first being row `first_row` of
    Spark partition `spark_partition`: the explicit partition if given (not None), else the
    key's, else the keyless run's. Raises `ValueError` for a partition the topic lacks."""
    targets = []
    for index in range(row_count):
        chosen = explicit[index] if explicit is not None else None
        key = keys[index] if keys is not None else None
        if chosen is not None or key is not None:
            targets.append(choose_partition(topic, key, partitions, partition=chosen))
        else:
            targets.append(_keyless_partition(first_row + index, spark_partition, partitions))
    return targets


def keyless_runs(partitions: int, spark_partition: int, first_row: int,
                 row_count: int) -> list[tuple[int, int, int]]:
    """`target_partitions` for rows with neither key nor explicit partition, as runs:
    `(partition, start, stop)`, rows `[start, stop)` counted from `first_row`."""
    runs = []
    start = 0
    while start < row_count:
        row = first_row + start
        stop = min(row_count, start + KEYLESS_RUN - row % KEYLESS_RUN)
        runs.append((_keyless_partition(row, spark_partition, partitions), start, stop))
        start = stop
    return runs


def _keyless_partition(row: int, spark_partition: int, partitions: int) -> int:
    """Where row `row` of a Spark partition goes without key or explicit partition."""
    return (spark_partition + row // KEYLESS_RUN) % partitions


def rows_by_partition(targets: Sequence[int]) -> dict[int, list[int]]:
    """The indexes of the rows going to each partition, in row order."""
    rows: dict[int, list[int]] = {}
    for index, target in enumerate(targets):
        rows.setdefault(target, []).append(index)
    return rows
