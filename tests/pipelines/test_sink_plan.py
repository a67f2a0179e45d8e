"""Where the exactly-once sink sends each row: the same on every attempt, however the rows
arrive in Arrow batches; and which columns it takes (pure, no cluster)."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from rafka.actors.clients.column_partitions import check_record_columns
from rafka.actors.clients.partitioner import default_partition
from rafka.pipelines.sink_plan import (
    KEYLESS_RUN,
    keyless_runs,
    rows_by_partition,
    sink_producer_id,
    target_partitions,
)


def test_each_spark_partition_of_each_write_has_a_producer_id_of_its_own() -> None:
    ids = {sink_producer_id(write, partition) for write in ("w1", "w2") for partition in range(50)}
    assert len(ids) == 100
    assert sink_producer_id("w1", 7) == sink_producer_id("w1", 7)


def test_keyless_rows_go_in_runs_from_a_partition_chosen_by_the_spark_partition() -> None:
    rows = 3 * KEYLESS_RUN + 5
    targets = target_partitions("t", 4, spark_partition=2, first_row=0, row_count=rows).tolist()
    assert targets[:KEYLESS_RUN] == [2] * KEYLESS_RUN
    assert targets[KEYLESS_RUN:2 * KEYLESS_RUN] == [3] * KEYLESS_RUN
    assert targets[2 * KEYLESS_RUN:3 * KEYLESS_RUN] == [0] * KEYLESS_RUN
    assert targets[3 * KEYLESS_RUN:] == [1] * 5


def key_partitions(keys: list[bytes | None], partitions: int) -> np.ndarray:
    return np.array([-1 if key is None else default_partition(key, partitions) for key in keys])


@pytest.mark.parametrize("chunk", [1, 999, KEYLESS_RUN, 10_000])
def test_targets_do_not_depend_on_how_the_rows_are_batched(chunk: int) -> None:
    rows = 20_000
    keys = key_partitions([None if i % 3 == 0 else f"k{i}".encode() for i in range(rows)], 6)
    explicit = np.arange(rows) % 5
    given = np.arange(rows) % 7 == 0
    whole = target_partitions("t", 6, 1, 0, rows, keys, explicit, given).tolist()
    pieces = []
    for first in range(0, rows, chunk):
        count = min(chunk, rows - first)
        part = slice(first, first + count)
        pieces += target_partitions("t", 6, 1, first, count, keys[part], explicit[part],
                                    given[part]).tolist()
    assert pieces == whole


def test_an_explicit_partition_wins_then_the_key_as_java_would_place_it() -> None:
    keys = key_partitions([b"alpha", b"beta", None, None], 8)
    assert target_partitions("t", 8, 0, 0, 4, keys, np.array([5, 0, 6, 0]),
                             np.array([True, False, True, False])).tolist() == [
        5, default_partition(b"beta", 8), 6, 0]
    assert target_partitions("t", 8, 0, 0, 2, keys[:2]).tolist() == [
        default_partition(b"alpha", 8), default_partition(b"beta", 8)]
    for wrong in (8, -1):
        with pytest.raises(ValueError, match=f"partition {wrong} does not exist in topic 't'"):
            target_partitions("t", 8, 0, 0, 2, None, np.array([1, wrong]))
    # A wrong value where no partition is given is not looked at.
    assert target_partitions("t", 8, 0, 0, 1, None, np.array([99]), np.array([False])).tolist(
    ) == [0]


def test_rows_are_grouped_by_partition_in_row_order() -> None:
    groups = rows_by_partition(np.array([2, 0, 2, 1, 0]))
    assert {partition: rows.tolist() for partition, rows in groups.items()} == {
        2: [0, 2], 0: [1, 4], 1: [3]}


@pytest.mark.parametrize("first_row,count", [(0, 1), (0, 3 * KEYLESS_RUN + 5), (4000, 10_000),
                                             (KEYLESS_RUN, KEYLESS_RUN)])
def test_keyless_runs_are_the_keyless_targets_in_runs(first_row: int, count: int) -> None:
    runs = keyless_runs(5, 3, first_row, count)
    expanded = [partition for partition, start, stop in runs for _ in range(start, stop)]
    assert expanded == target_partitions("t", 5, 3, first_row, count).tolist()
    assert [start for _p, start, _stop in runs] == [0] + [stop for _p, _s, stop in runs[:-1]]


HEADERS = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))


@pytest.mark.parametrize("value_type", [pa.binary(), pa.large_binary(), pa.string(),
                                        pa.large_string()])
def test_columns_the_sink_takes(value_type: pa.DataType) -> None:
    schema = pa.schema([("k", value_type), ("v", value_type), ("p", pa.int16()),
                        ("h", HEADERS)])
    check_record_columns(schema, "v", "k", "p", "h")  # refuses nothing


@pytest.mark.parametrize(("field", "named", "error", "says"), [
    (("v", pa.int64()), {}, TypeError, "keys and values must be binary or string"),
    (("k", pa.float32()), {"key": "k"}, TypeError, "keys and values must be binary or string"),
    (("p", pa.string()), {"partition": "p"}, TypeError, "a partition is an integer"),
    (("h", pa.list_(pa.binary())), {"headers": "h"}, TypeError, "headers are a list of structs"),
    (("x", pa.binary()), {"key": "k"}, ValueError, r"no column \['k'\]"),
])
def test_columns_the_sink_refuses_before_sending(field: tuple, named: dict, error: type,
                                                 says: str) -> None:
    columns = {"v": pa.binary(), **dict([field])}
    with pytest.raises(error, match=says):
        check_record_columns(pa.schema(list(columns.items())), "v", **named)
