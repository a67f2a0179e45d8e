"""Batches into Arrow tables with the Kafka source's columns (pure: no Ray)."""

from __future__ import annotations

import datetime

from rafka.actors.record_tables import RECORD_SCHEMA, RECORD_SCHEMA_WITH_HEADERS, records_table
from rafka.logstore import build_batch, stamp_batch
from rafka.logstore.batch import decode_columns

T0 = 1_700_000_000_000


def test_a_table_holds_each_record_with_its_offset_timestamp_and_type() -> None:
    create_time = stamp_batch(build_batch(
        [(b"k1", b"v1", T0, [("h", b"x")]), (None, b"v2", T0 + 5, None)]), 40, 0)
    appended = stamp_batch(build_batch([(b"k3", None, T0, None)]), 42, 0,
                           log_append_time_ms=T0 + 99)
    table = records_table(decode_columns(create_time + appended, 41), "clicks", 3, True)
    assert table.schema == RECORD_SCHEMA_WITH_HEADERS
    utc = datetime.timezone.utc
    assert table.to_pylist() == [
        {"key": None, "value": b"v2", "topic": "clicks", "partition": 3, "offset": 41,
         "timestamp": datetime.datetime.fromtimestamp((T0 + 5) / 1000, utc),
         "timestampType": 0, "headers": []},
        {"key": b"k3", "value": None, "topic": "clicks", "partition": 3, "offset": 42,
         "timestamp": datetime.datetime.fromtimestamp((T0 + 99) / 1000, utc),
         "timestampType": 1, "headers": []},
    ]
    first = records_table(decode_columns(create_time, 40, 41), "clicks", 3, True).to_pylist()
    assert first[0]["headers"] == [{"key": "h", "value": b"x"}]


def test_no_batches_make_an_empty_table_of_the_same_schema() -> None:
    assert records_table([], "t", 0, False).schema == RECORD_SCHEMA
    assert records_table([], "t", 0, False).num_rows == 0
    assert records_table([], "t", 0, True).schema == RECORD_SCHEMA_WITH_HEADERS
