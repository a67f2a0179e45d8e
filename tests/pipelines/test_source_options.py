"""Spark's Kafka-source options and the ranges they resolve to (pure: no Ray, no Spark)."""

from __future__ import annotations

import json
from itertools import pairwise

import pytest

from rafka.pipelines.reads import Piece, group_pieces, split_ranges
from rafka.pipelines.source_options import (
    DataLossError,
    NoOffsetForTimestampError,
    SourceOptionError,
    parse_source_options,
    resolve_ranges,
)
from rafka.pipelines.topics import source_options

BOUNDS = {("a", 0): (10, 100), ("a", 1): (0, 50), ("b", 0): (0, 0)}


def batch(**options):
    return parse_source_options(options, streaming=False)


def test_exactly_one_way_to_name_topics() -> None:
    with pytest.raises(SourceOptionError, match="exactly one of"):
        batch()
    with pytest.raises(SourceOptionError, match="exactly one of"):
        batch(subscribe="a", subscribePattern="a.*")
    assert batch(subscribe="a, b").subscribe == ("a", "b")
    assert batch(SUBSCRIBE="a").subscribe == ("a",)  # Spark's names are case-insensitive
    assert batch(assign=json.dumps({"a": [1, 0]})).assign == (("a", 0), ("a", 1))
    with pytest.raises(SourceOptionError, match="assign="):
        batch(assign="[0, 1]")
    with pytest.raises(SourceOptionError, match="not a valid regular expression"):
        batch(subscribePattern="a(")


def test_a_pattern_matches_whole_names_and_leaves_out_internal_topics() -> None:
    options = batch(subscribePattern="orders.*")
    assert options.topics_of(["orders", "orders-eu", "old-orders", "__consumer_offsets"]) == [
        "orders", "orders-eu"]
    assert batch(subscribePattern=".*").topics_of(["x", "__consumer_offsets"]) == ["x"]


def test_unknown_refused_and_misplaced_options_are_named() -> None:
    with pytest.raises(SourceOptionError, match="unknown option 'startingOffset'"):
        batch(subscribe="a", startingOffset="earliest")
    with pytest.raises(SourceOptionError, match="'groupIdPrefix' is not supported"):
        batch(subscribe="a", groupIdPrefix="x")
    with pytest.raises(SourceOptionError, match=r"'kafka\.max\.poll\.records' is not supported"):
        batch(subscribe="a", **{"kafka.max.poll.records": "10"})
    with pytest.raises(SourceOptionError, match="streaming queries only"):
        batch(subscribe="a", maxOffsetsPerTrigger="10")
    with pytest.raises(SourceOptionError, match="batch queries only"):
        parse_source_options({"subscribe": "a", "endingOffsets": "latest"}, streaming=True)
    with pytest.raises(SourceOptionError, match="given twice"):
        batch(subscribe="a", minPartitions="2", minpartitions="3")
    with pytest.raises(SourceOptionError, match="positive whole number"):
        batch(subscribe="a", minPartitions="0")
    with pytest.raises(SourceOptionError, match="true or false"):
        batch(subscribe="a", failOnDataLoss="yes")
    # Spark requires it; the cluster argument says where rafka reads.
    assert batch(subscribe="a", **{"kafka.bootstrap.servers": "h:9092"}).subscribe == ("a",)


def test_spark_refuses_empty_batch_bounds() -> None:
    with pytest.raises(SourceOptionError, match="not allowed for batch"):
        batch(subscribe="a", startingOffsets="latest")
    with pytest.raises(SourceOptionError, match="'earliest' is not allowed"):
        batch(subscribe="a", endingOffsets="earliest")
    with pytest.raises(SourceOptionError, match="-1"):
        batch(subscribe="a", startingOffsets=json.dumps({"a": {"0": -1}}))
    with pytest.raises(SourceOptionError, match="-2"):
        batch(subscribe="a", endingOffsets=json.dumps({"a": {"0": -2}}))
    with pytest.raises(SourceOptionError, match="needs group="):
        batch(subscribe="a", startingOffsets="committed")


def test_defaults_follow_spark_and_the_group() -> None:
    assert batch(subscribe="a").starting.kind == "earliest"
    assert parse_source_options({"subscribe": "a"}, streaming=True).starting.kind == "latest"
    assert parse_source_options({"subscribe": "a"}, streaming=False,
                                group="g").starting.kind == "committed"


def test_specific_offsets_must_name_every_partition() -> None:
    options = batch(subscribe="a,b", startingOffsets=json.dumps({"a": {"0": 20, "1": -2}}))
    with pytest.raises(SourceOptionError, match="missing b-0"):
        resolve_ranges(options, BOUNDS)
    options = batch(subscribe="a,b", startingOffsets=json.dumps(
        {"a": {"0": 20, "1": -2}, "b": {"0": -2}}),
        endingOffsets=json.dumps({"a": {"0": 30, "1": -1}, "b": {"0": -1}}))
    assert resolve_ranges(options, BOUNDS) == {("a", 0): (20, 30), ("a", 1): (0, 50),
                                               ("b", 0): (0, 0)}


def test_a_start_below_the_log_start_is_data_loss_unless_told_otherwise() -> None:
    starting = json.dumps({"a": {"0": 3, "1": 70}, "b": {"0": 0}})
    with pytest.raises(DataLossError, match=r"a-0: offsets 3\.\.9 are gone"):
        resolve_ranges(batch(subscribe="a,b", startingOffsets=starting), BOUNDS)
    options = batch(subscribe="a,b", startingOffsets=starting, failOnDataLoss="false")
    # Clamped to what the log holds: from its start, and never past the high watermark.
    assert resolve_ranges(options, BOUNDS) == {("a", 0): (10, 100), ("a", 1): (50, 50),
                                               ("b", 0): (0, 0)}
    grouped = parse_source_options({"subscribe": "a"}, streaming=False, group="g")
    with pytest.raises(DataLossError, match="a-0"):  # removed between two batches
        resolve_ranges(grouped, {("a", 0): (10, 100)}, committed={("a", 0): 4})


def test_timestamps_take_precedence_and_missing_ones_follow_the_strategy() -> None:
    options = batch(subscribe="a", startingTimestamp="1000",
                    startingOffsets="earliest", endingTimestamp="5000")
    assert options.starting.kind == "timestamp" and options.ending.kind == "timestamp"
    bounds = {("a", 0): (10, 100), ("a", 1): (0, 50)}
    found = {("a", 0): 40, ("a", 1): None}
    with pytest.raises(NoOffsetForTimestampError, match="a-1 has no record at or after"):
        resolve_ranges(options, bounds, starting_found=found, ending_found=found)
    latest = batch(subscribe="a", startingTimestamp="1000", endingTimestamp="5000",
                   startingOffsetsByTimestampStrategy="latest")
    # No record at the ending timestamp: up to the latest, as Spark reads.
    assert resolve_ranges(latest, bounds, starting_found=found, ending_found={
        ("a", 0): 60, ("a", 1): None}) == {("a", 0): (40, 60), ("a", 1): (50, 50)}
    by_partition = batch(subscribe="a", startingOffsetsByTimestamp=json.dumps(
        {"a": {"0": 1000, "1": 2000}}))
    assert by_partition.starting.timestamp_of(("a", 1)) == 2000


def test_ending_offsets_by_timestamp_per_partition_and_its_precedence() -> None:
    ends = json.dumps({"a": {"0": 5000, "1": 6000}})
    options = batch(subscribe="a", endingOffsetsByTimestamp=ends, endingOffsets="latest")
    # Spark's precedence: ...ByTimestamp over endingOffsets, endingTimestamp over both.
    assert options.ending.kind == "timestamps"
    assert options.ending.timestamp_of(("a", 1)) == 6000
    assert batch(subscribe="a", endingOffsetsByTimestamp=ends,
                 endingTimestamp="7000").ending.timestamp_of(("a", 1)) == 7000
    bounds = {("a", 0): (10, 100), ("a", 1): (0, 50)}
    # Each partition ends at the first offset at or after its time; none found: the latest.
    assert resolve_ranges(options, bounds, ending_found={("a", 0): 70, ("a", 1): None}) == {
        ("a", 0): (10, 70), ("a", 1): (0, 50)}
    with pytest.raises(SourceOptionError, match=r"endingOffsetsByTimestamp must name every "
                                                r"partition read.*missing a-1"):
        resolve_ranges(batch(subscribe="a", endingOffsetsByTimestamp=json.dumps(
            {"a": {"0": 5000}})), bounds, ending_found={("a", 0): 70})
    with pytest.raises(SourceOptionError, match="batch queries only"):
        parse_source_options({"subscribe": "a", "endingOffsetsByTimestamp": ends},
                             streaming=True)
    with pytest.raises(SourceOptionError, match=r"endingOffsetsByTimestamp=.*JSON"):
        batch(subscribe="a", endingOffsetsByTimestamp="5000")


@pytest.mark.parametrize("name, reason", [
    ("groupIdPrefix", "no Kafka consumer group; pass group="),
    ("kafka.group.id", "no Kafka consumer group; pass group="),
    ("fetchOffset.numRetries", "retries on leader changes until kafkaConsumer.pollTimeoutMs"),
    ("fetchOffset.retryIntervalMs", "retries on leader changes until kafkaConsumer.pollTimeoutMs"),
])
def test_options_rafka_does_not_do_are_refused_by_name_with_the_reason(
        name: str, reason: str) -> None:
    for streaming in (False, True):
        with pytest.raises(SourceOptionError, match=rf"'{name}' is not supported: .*{reason}"):
            parse_source_options({"subscribe": "a", name: "x"}, streaming=streaming)


def test_committed_offsets_start_where_the_group_stopped() -> None:
    options = parse_source_options({"subscribe": "a"}, streaming=False, group="g")
    assert resolve_ranges(options, {("a", 0): (10, 100), ("a", 1): (0, 50)}, committed={
        ("a", 0): 42, ("a", 1): None}) == {("a", 0): (42, 100), ("a", 1): (0, 50)}


def test_durations_as_spark_writes_them() -> None:
    def delay(text: str) -> int:
        return parse_source_options({"subscribe": "a", "maxTriggerDelay": text},
                                    streaming=True).max_trigger_delay_ms

    assert (delay("15m"), delay("30s"), delay("500ms"), delay("2")) == (
        900_000, 30_000, 500, 2000)
    with pytest.raises(SourceOptionError, match="duration"):
        delay("soon")


def test_min_partitions_splits_large_ranges_in_proportion() -> None:
    ranges = {("a", 0): (0, 900), ("a", 1): (0, 100), ("a", 2): (5, 5)}
    assert split_ranges(ranges) == [Piece("a", 0, 0, 900), Piece("a", 1, 0, 100)]
    pieces = split_ranges(ranges, min_partitions=10)
    assert len(pieces) == 10
    assert [p for p in pieces if p.partition == 1] == [Piece("a", 1, 0, 100)]
    zero = [p for p in pieces if p.partition == 0]
    assert len(zero) == 9 and zero[0].start == 0 and zero[-1].until == 900
    assert all(a.until == b.start for a, b in pairwise(zero))
    assert split_ranges(ranges, min_partitions=2) == split_ranges(ranges)
    # Never more pieces than records.
    assert len(split_ranges({("a", 0): (0, 3)}, min_partitions=10)) == 3


def test_pieces_are_grouped_into_tasks_of_about_equal_records() -> None:
    pieces = [Piece("a", 0, 0, 900), Piece("a", 1, 0, 100), Piece("a", 2, 0, 500),
              Piece("a", 3, 0, 450)]
    groups = group_pieces(pieces, 2)
    assert groups == [[Piece("a", 0, 0, 900), Piece("a", 1, 0, 100)],
                      [Piece("a", 2, 0, 500), Piece("a", 3, 0, 450)]]  # 1,000 and 950
    assert group_pieces(pieces, 10) == [[piece] for piece in
                                        sorted(pieces, key=lambda p: p.start - p.until)]
    assert group_pieces(pieces, 1) == [sorted(pieces)]


def test_headers_and_the_poll_timeout() -> None:
    options = batch(subscribe="a", includeHeaders="true", **{"kafkaConsumer.pollTimeoutMs": "500"})
    assert (options.include_headers, options.poll_timeout_ms) == (True, 500)
    assert (batch(subscribe="a").include_headers, batch(subscribe="a").poll_timeout_ms) == (
        False, 120_000)  # Spark's defaults


def test_the_python_keywords_stand_for_sparks_options_and_may_not_repeat_them() -> None:
    parsed = source_options("t", None, streaming=True, max_records_per_batch=7,
                            starting_offsets="earliest")
    assert (parsed.subscribe, parsed.max_offsets_per_trigger, parsed.starting.kind) == (
        ("t",), 7, "earliest")
    with pytest.raises(SourceOptionError, match="max_records_per_batch= and option "
                                                "'maxOffsetsPerTrigger' say the same thing"):
        source_options("t", {"maxoffsetspertrigger": 5}, streaming=True,
                       max_records_per_batch=3)
