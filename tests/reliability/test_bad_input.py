"""Bad input everywhere: generated with hypothesis, sent through the public API, straight to a
partition leader's actor, and through the command line.

Each bad call must fail with a typed error (a `RafkaError`, or the `TypeError`/`ValueError` a
Python user expects, as documented), and leave the cluster as it was: every broker and replica
actor alive in the same process, every byte of every log unchanged, and a good produce and
consume still working. One cluster serves the whole module (starting one is the slow part).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import struct
import subprocess
import sys
import zlib
from collections.abc import Iterator
from typing import Any

import msgpack
import pytest
import ray
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from ray.util import list_named_actors

from rafka import Cluster
from rafka.actors.errors import (
    CorruptRecordError,
    InvalidRecordError,
    InvalidRequiredAcksError,
    InvalidTopicError,
    RafkaError,
    RecordTooLargeError,
    UnknownTopicError,
    raise_for,
)
from rafka.common.config import InvalidConfigError
from rafka.logstore.batch import build_batch, encode_batch, new_header
from rafka.logstore.checkpoint import (
    HIGH_WATERMARK_FILE,
    LOG_START_OFFSET_FILE,
    RECOVERY_POINT_FILE,
    TMP_SUFFIX,
)
from tests.support.cluster import module_cluster
from tests.support.replicas import ReplicaOnHost

pytestmark = pytest.mark.reliability

# Small: every example talks to real actors. No example database: it would write into the repo.
EXAMPLES = settings(
    max_examples=50,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)

MSGPACK_INTEGERS = st.integers(-(2**63), 2**64 - 1)

TOPIC = "good"
PARTITIONS = 2
SMALL_TOPIC = "small"  # max.message.bytes far below the producer's max.request.size
SMALL_MAX_BYTES = 1024
T0 = 1_700_000_000_000

# Offset checkpoints are rewritten on their own, through a .tmp file: the high watermark's on a
# timer (seen changing here with no request at all), the recovery point at each flush. They are
# bookkeeping, not data. Everything else under the data dir (segments, offset and time indexes,
# the leader-epoch checkpoint, which only a leader change touches) is compared byte for byte.
CHECKPOINTS = {RECOVERY_POINT_FILE, HIGH_WATERMARK_FILE, LOG_START_OFFSET_FILE}

LEGAL = re.compile(r"[A-Za-z0-9._-]+")


cluster = module_cluster("badinput")


@pytest.fixture(scope="module")
def topics(cluster: Cluster) -> dict[str, int]:
    """Two topics with a few records each: what must survive every bad call unchanged."""
    cluster.create_topic(TOPIC, partitions=PARTITIONS, replication_factor=3)
    cluster.create_topic(SMALL_TOPIC, partitions=1, replication_factor=3,
                         config={"max.message.bytes": SMALL_MAX_BYTES})
    producer = cluster.producer(acks="all")
    for i in range(10):
        producer.send(TOPIC, value=b"before-%d" % i, partition=i % PARTITIONS)
        producer.send(SMALL_TOPIC, value=b"small-%d" % i)
    producer.flush()
    producer.close()
    return {TOPIC: PARTITIONS, SMALL_TOPIC: 1}


# ------------------------------------------------------------------------------- the checks


def disk_digest(cluster: Cluster) -> dict[str, str]:
    """sha256 of every file under the data dir but the checkpoints, by relative path."""
    root = cluster.data_dir
    return {
        str(path.relative_to(root)): hashlib.sha256(path.read_bytes()).hexdigest()
        for path in sorted(root.rglob("*"))
        if path.is_file() and path.name not in CHECKPOINTS and path.suffix != TMP_SUFFIX
    }


def log_ends(cluster: Cluster) -> dict[tuple[str, int], tuple[Any, Any]]:
    return {(topic, p["partition"]): (p["log_end_offset"], p["high_watermark"])
            for topic in (TOPIC, SMALL_TOPIC)
            for p in cluster.describe_topic(topic)["partitions"]}


def actor_pids(cluster: Cluster) -> dict[str, int]:
    """Every broker and replica-host actor of the cluster, with the process it runs in: an
    actor that died (or died and was restarted) is missing or has another pid."""
    names = sorted(entry["name"] for entry in list_named_actors(all_namespaces=True)
                   if entry["namespace"] == cluster.namespace
                   and entry["name"].startswith(("broker-", "replica-")))
    handles = [ray.get_actor(name, namespace=cluster.namespace) for name in names]
    return dict(zip(names, ray.get([h.pid.remote() for h in handles], timeout=30), strict=True))


class Unharmed:
    """Snapshot before the bad calls; `check()` after: same actors, same bytes, still works."""

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster
        self.digest = disk_digest(cluster)
        self.ends = log_ends(cluster)
        self.pids = actor_pids(cluster)
        self.topics = sorted(cluster.list_topics())
        # Three brokers, and the host of every replica of both topics (RF 3).
        hosts = {ReplicaOnHost(cluster, topic, p["partition"], broker).host_name
                 for topic in (TOPIC, SMALL_TOPIC)
                 for p in cluster.describe_topic(topic)["partitions"]
                 for broker in p["replicas"]}
        assert set(self.pids) >= hosts | {"broker-0", "broker-1", "broker-2"}, self.pids

    def check(self) -> None:
        cluster = self.cluster
        assert actor_pids(cluster) == self.pids, "an actor died or was restarted"
        assert sorted(cluster.list_topics()) == self.topics
        assert log_ends(cluster) == self.ends
        assert disk_digest(cluster) == self.digest, "bytes on disk changed"
        # And it still works: a good record goes in and comes out.
        producer = cluster.producer(acks="all")
        value = os.urandom(8).hex().encode()
        meta = producer.send(TOPIC, value=value, partition=1).result(30)
        producer.close()
        consumer = cluster.consumer(auto_offset_reset="earliest")
        consumer.assign([(TOPIC, 1)])
        consumer.seek(TOPIC, 1, meta.offset)
        records = []
        for _ in range(50):
            records += consumer.poll(200)
            if records:
                break
        consumer.close()
        assert [(r.offset, r.value) for r in records[:1]] == [(meta.offset, value)]


@pytest.fixture
def unharmed(cluster: Cluster, topics: dict[str, int]) -> Iterator[Unharmed]:
    guard = Unharmed(cluster)
    yield guard
    guard.check()


# ---------------------------------------------------------------------------- strategies

_NAMED_BAD = ["", ".", "..", "../good", "../../etc/passwd", "a/b", "/good", "good/", "a\\b",
              "..\\good", "good ", "x" * 250, "gööd", "topic\x00", "t\n"]
bad_topic_names = st.one_of(
    st.sampled_from(_NAMED_BAD),
    # Any text with at least one character outside [A-Za-z0-9._-].
    st.text(min_size=1, max_size=30).filter(lambda s: not LEGAL.fullmatch(s)),
    # Legal characters, too many of them.
    st.text(alphabet="abc._-09", min_size=250, max_size=400),
    # Not a string at all.
    st.integers() | st.none() | st.binary(max_size=10) | st.lists(st.text(), max_size=2),
)
unknown_topic_names = st.from_regex(r"unknown-[A-Za-z0-9_-]{1,40}", fullmatch=True)
bad_partitions = st.integers(max_value=-1) | st.integers(min_value=PARTITIONS, max_value=2**80)


# --------------------------------------------------------------------------- the public API


def refused_by_clients(error: type[Exception], cluster: Cluster, producer: Any, consumer: Any,
                       name: Any) -> None:
    """Deleting topic `name`, sending to it and assigning its partition 0 all raise `error`."""
    with pytest.raises(error):
        cluster.delete_topic(name, wait=False)
    with pytest.raises(error):
        producer.send(name, value=b"v")
    with pytest.raises(error):
        consumer.assign([(name, 0)])


def test_invalid_topic_names_are_refused_everywhere(cluster: Cluster, unharmed) -> None:
    producer = cluster.producer()
    consumer = cluster.consumer()

    @EXAMPLES
    @given(name=bad_topic_names)
    def check(name: Any) -> None:
        # InvalidTopicError is a RafkaError-family error (CoordinationError) and a ValueError.
        with pytest.raises(InvalidTopicError, match="topic name"):
            cluster.create_topic(name, partitions=1, replication_factor=1)
        with pytest.raises(InvalidTopicError):
            cluster.describe_topic(name)
        refused_by_clients(InvalidTopicError, cluster, producer, consumer, name)

    try:
        check()
    finally:
        producer.close()
        consumer.close()


def test_unknown_topics_and_partitions(cluster: Cluster, unharmed) -> None:
    producer = cluster.producer()
    consumer = cluster.consumer()

    @EXAMPLES
    @given(name=unknown_topic_names, partition=bad_partitions)
    def check(name: str, partition: int) -> None:
        with pytest.raises(UnknownTopicError, match="does not exist"):
            cluster.describe_topic(name)
        refused_by_clients(UnknownTopicError, cluster, producer, consumer, name)
        # A partition the topic does not have (negative, or past its last).
        with pytest.raises(ValueError, match="partition"):
            producer.send(TOPIC, value=b"v", partition=partition)
        with pytest.raises(ValueError, match="partitions"):
            consumer.assign([(TOPIC, partition)])
        with pytest.raises(ValueError, match="not assigned"):
            consumer.seek(TOPIC, partition, 0)

    try:
        consumer.assign([(TOPIC, 0)])
        check()
        # Nothing half-done: the consumer still has its one partition, and seeks within it.
        assert {(tp.topic, tp.partition) for tp in consumer.assignment()} == {(TOPIC, 0)}
        for offset in (-1, -(2**70), "3", 2.5, None):
            with pytest.raises(ValueError, match="offset"):
                consumer.seek(TOPIC, 0, offset)
    finally:
        producer.close()
        consumer.close()


def test_oversized_records(cluster: Cluster, unharmed) -> None:
    @EXAMPLES
    @given(excess=st.integers(min_value=1, max_value=4 * SMALL_MAX_BYTES))
    def check(excess: int) -> None:
        # Above the topic's max.message.bytes: refused by the leader, the future says so.
        producer = cluster.producer(acks="all", enable_idempotence=False, retries=0)
        try:
            future = producer.send(SMALL_TOPIC, value=bytes(SMALL_MAX_BYTES + excess))
            with pytest.raises(RecordTooLargeError, match=r"max\.message\.bytes"):
                future.result(30)
        finally:
            producer.close()
        # Above the producer's own max.request.size: refused before anything is sent.
        limited = cluster.producer(max_request_size=SMALL_MAX_BYTES)
        try:
            with pytest.raises(RecordTooLargeError, match=r"max\.request\.size"):
                limited.send(TOPIC, value=bytes(SMALL_MAX_BYTES // 2),
                             key=bytes(SMALL_MAX_BYTES // 2 + excess))
        finally:
            limited.close()

    check()


not_bytes = st.one_of(st.text(min_size=1), st.integers(), st.floats(), st.lists(st.integers()),
                      st.dictionaries(st.text(), st.integers()))


def test_wrong_types_for_keys_values_headers_and_timestamps(cluster: Cluster, unharmed) -> None:
    producer = cluster.producer(acks="all", linger_ms=0)

    @EXAMPLES
    @given(
        field=st.sampled_from(["key", "value", "timestamp_ms", "headers"]),
        data=st.data(),
    )
    def check(field: str, data: st.DataObject) -> None:
        if field in ("key", "value"):
            bad = data.draw(not_bytes)
        elif field == "timestamp_ms":
            bad = data.draw(st.text() | st.floats() | st.binary() | st.lists(st.integers()))
        else:
            bad = data.draw(st.one_of(
                st.lists(st.tuples(st.text(), st.text()), min_size=1, max_size=3),
                st.lists(st.tuples(st.integers(), st.binary()), min_size=1, max_size=3),
                st.lists(st.integers(), min_size=1, max_size=3),
                st.lists(st.tuples(st.text(), st.binary(), st.binary()), min_size=1,
                         max_size=3),
            ))
        # A TypeError, raised by send() or (for what only the batch encoder checks) by the
        # record's future; a header that is not a pair may also be a ValueError (unpacking).
        # Never a record written.
        expected = (TypeError, ValueError) if field == "headers" else TypeError
        with pytest.raises(expected):
            producer.send(TOPIC, partition=0, **{"value": b"v", field: bad}).result(30)

    try:
        check()
    finally:
        producer.close()


def test_a_record_refused_for_its_type_does_not_poison_the_producer(
    cluster: Cluster, topics: dict[str, int]
) -> None:
    """A user who catches the error and goes on expects the producer to work on. (A record
    that only failed when its batch was built, on the sender thread, after the batch took its
    idempotence sequence numbers, would leave a gap the leader waits on: every later record of
    the partition would time out.)"""
    producer = cluster.producer(acks="all", linger_ms=0, delivery_timeout_ms=6_000,
                                request_timeout_ms=3_000)
    try:
        for bad in ({"timestamp_ms": "soon"}, {"timestamp_ms": 1.5}, {"timestamp_ms": True},
                    {"headers": [("a", b"1", b"2")]}, {"headers": [(b"name", b"v")]},
                    {"headers": "h"}, {"headers": 7}):
            with pytest.raises(TypeError):
                producer.send(TOPIC, value=b"v", partition=0, **bad)
        with pytest.raises(ValueError, match=">= 0"):
            producer.send(TOPIC, value=b"v", partition=0, timestamp_ms=-5)
        before, pids = log_ends(cluster), actor_pids(cluster)
        written = producer.send(TOPIC, value=b"after", partition=0).result(15)
    finally:
        with contextlib.suppress(RafkaError):
            producer.close(timeout=5)
    # Only the good record went in, where the partition ended, and no actor suffered.
    end, _ = before[(TOPIC, 0)]
    assert written.offset == end
    assert log_ends(cluster) == {**before, (TOPIC, 0): (end + 1, end + 1)}
    assert actor_pids(cluster) == pids


_PRODUCER_SETTINGS = {
    "acks": st.sampled_from(["two", "ALL!", 2, -2, None, 1.5, b"all", [1]]),
    "linger_ms": st.integers(max_value=-1) | st.integers(min_value=2**31),
    "batch_size": st.integers(max_value=0) | st.sampled_from(["big", 2.5, None]),
    "max_request_size": st.integers(max_value=0) | st.sampled_from(["1MB", 1.5]),
    "retries": st.integers(max_value=-1) | st.sampled_from(["x", 0.5]),
    "compression_type": st.sampled_from(["brotli", "zip", "", 4, None]),
    "enable_idempotence": st.sampled_from(["yes", 2, "maybe", 1.5]),
    "delivery_timeout_ms": st.integers(max_value=-1) | st.sampled_from(["soon"]),
    "no_such_setting": st.integers(),
}
_CONSUMER_SETTINGS = {
    "auto_offset_reset": st.sampled_from(["sometimes", "", 0, None]),
    "fetch_max_wait_ms": st.integers(max_value=-1),
    "max_poll_records": st.integers(max_value=0) | st.sampled_from(["ten", 2.5]),
    "fetch_min_bytes": st.integers(max_value=-1),
    "no_such_setting": st.integers(),
}


def test_bad_client_settings(cluster: Cluster, unharmed) -> None:
    @EXAMPLES
    @given(data=st.data())
    def check(data: st.DataObject) -> None:
        key = data.draw(st.sampled_from(sorted(_PRODUCER_SETTINGS)))
        value = data.draw(_PRODUCER_SETTINGS[key])
        with pytest.raises(InvalidConfigError, match=key.replace("_", ".")):
            cluster.producer(**{key: value}).close()
        key = data.draw(st.sampled_from(sorted(_CONSUMER_SETTINGS)))
        value = data.draw(_CONSUMER_SETTINGS[key])
        with pytest.raises(InvalidConfigError, match=key.replace("_", ".")):
            cluster.consumer(**{key: value}).close()

    check()
    # Topic settings: refused before anything is written to ZooKeeper.
    for config in ({"max.message.bytes": -1}, {"min.insync.replicas": "x"},
                   {"no.such.config": 1}, {"cleanup.policy": "trash"}):
        with pytest.raises(InvalidConfigError):
            cluster.create_topic("never-created", config=config)
    for partitions in (0, -1, "2", 1.5):
        with pytest.raises(ValueError, match="partitions"):
            cluster.create_topic("never-created", partitions=partitions)
    assert "never-created" not in cluster.list_topics()


# ----------------------------------------------------- malformed batches straight to a leader


def _leader(cluster: Cluster) -> Any:
    return ReplicaOnHost(cluster, TOPIC, 0)


def _with_crc(batch: bytearray) -> bytes:
    struct.pack_into(">I", batch, 17, zlib.crc32(batch[21:]))
    return bytes(batch)


def _good_batch(n: int) -> bytes:
    return build_batch([(None, b"x" * 10, T0 + i, None) for i in range(n)])


@st.composite
def malformed_batches(draw: st.DrawFn) -> tuple[str, bytes]:
    """(what is wrong, the bytes): every way a produce request's batch can be broken."""
    good = bytearray(_good_batch(draw(st.integers(1, 20))))
    kind = draw(st.sampled_from([
        "truncated", "wrong length", "wrong magic", "bad crc", "record count",
        "garbage records", "bad later record", "huge length", "trailing bytes", "empty",
    ]))
    if kind == "truncated":
        return kind, bytes(good[: draw(st.integers(0, len(good) - 1))])
    if kind == "wrong length":
        length = draw(st.integers(-(2**31), 2**31 - 1).filter(lambda n: n != len(good) - 12))
        struct.pack_into(">i", good, 8, length)
        return kind, bytes(good)
    if kind == "wrong magic":
        good[16] = draw(st.integers(0, 255).filter(lambda m: m != 2))
        return kind, bytes(good)
    if kind == "bad crc":
        pos = draw(st.integers(17, len(good) - 1))  # the crc itself or any byte it covers
        good[pos] ^= draw(st.integers(1, 255))
        return kind, bytes(good)
    if kind == "record count":
        count = struct.unpack_from(">i", good, 57)[0]
        wrong = draw(st.integers(-(2**31), 2**31 - 1).filter(lambda n: n != count))
        struct.pack_into(">i", good, 57, wrong)
        return kind, _with_crc(good)
    if kind == "garbage records":
        # CRC-valid, header consistent, but the records are not the msgpack array of
        # record_count records the header promises.
        count = struct.unpack_from(">i", good, 57)[0]
        garbage = draw(st.one_of(
            # Not an array: any msgpack scalar, map or string.
            # Integers within msgpack's range: beyond it packb itself raises OverflowError,
            # which failed this test now and then, before anything reached the leader.
            st.builds(lambda v: msgpack.packb(v) + bytes(8 * count),
                      MSGPACK_INTEGERS | st.text() | st.binary() | st.dictionaries(
                          st.text(max_size=3), MSGPACK_INTEGERS, min_size=1)),
            # An array of another length than record_count.
            st.builds(lambda n: msgpack.packb([[0, 0, None, b"x", []]] * n),
                      st.integers(0, 40).filter(lambda n: n != count)),
            # No bytes that could start an array.
            st.binary(min_size=1, max_size=200).filter(
                lambda b: not (0x90 <= b[0] <= 0x9F or b[0] in (0xDC, 0xDD))),
        ))
        batch = good[:61] + garbage
        struct.pack_into(">i", batch, 8, len(batch) - 12)
        return kind, _with_crc(batch)
    if kind == "bad later record":
        return kind, draw(batches_with_a_bad_later_record())
    if kind == "huge length":
        struct.pack_into(">i", good, 8, 2**31 - 1)
        return kind, bytes(good)
    if kind == "trailing bytes":
        return kind, bytes(good) + draw(st.binary(min_size=1, max_size=100))
    return kind, b""


# What a record can be instead of [offset_delta, timestamp_delta, key, value, headers].
_BAD_RECORDS = st.sampled_from([
    b"not a record", 7, None, (0, 0, None, b"x"), (0, 0, None, b"x", (), b"sixth"),
    (0, 0, 7, b"x", ()), (0, 0, None, "text", ()), (0, 0.5, None, b"x", ()),
    (0, 0, None, b"x", "headers"), (0, 0, None, b"x", (("h", "text"),)),
    (0, 0, None, b"x", ((b"name", b"v"),)), (0, 0, None, b"x", (("h", b"v", b"w"),)),
])


@st.composite
def batches_with_a_bad_later_record(draw: st.DrawFn) -> bytes:
    """CRC-valid, header consistent, the first record good, a later one malformed, compressed
    or not: the leader must look at every record, not only the first."""
    count = draw(st.integers(2, 20))
    entries: list[Any] = [(i, 0, None, b"x" * 10, ()) for i in range(count)]
    at = draw(st.integers(1, count - 1))
    bad = draw(_BAD_RECORDS)
    # A record-shaped replacement keeps its place's offset delta: only the drawn flaw is wrong.
    entries[at] = (at, *bad[1:]) if isinstance(bad, tuple) else bad
    codec = draw(st.sampled_from([0, 1, 3, 4]))  # none, gzip, lz4, zstd
    return encode_batch(entries, new_header(attributes=codec, last_offset_delta=count - 1,
                                            first_timestamp=T0, max_timestamp=T0))


def test_malformed_batches_sent_straight_to_a_leader(cluster: Cluster, unharmed) -> None:
    leader = _leader(cluster)

    @EXAMPLES
    @given(case=malformed_batches(), acks=st.sampled_from([0, 1, -1]))
    def check(case: tuple[str, bytes], acks: int) -> None:
        kind, data = case
        reply = leader.produce(data, acks, 5000)
        with pytest.raises((CorruptRecordError, RecordTooLargeError)) as refused:
            raise_for(reply)
        if kind == "huge length":
            # 2 GiB declared: larger than max.message.bytes before it is anything else.
            assert refused.type is RecordTooLargeError

    check()


def test_wrong_arguments_to_a_leaders_produce(cluster: Cluster, unharmed) -> None:
    leader = _leader(cluster)
    good = _good_batch(3)

    @EXAMPLES
    @given(records=not_bytes | st.none() | st.just([good]), acks=st.sampled_from([0, 1, -1]))
    def non_bytes(records: Any, acks: int) -> None:
        # A programming error of the caller: Ray raises it at the caller as the TypeError it is
        # (RayTaskError subclasses the original), and the actor carries on.
        with pytest.raises(TypeError):
            raise_for(leader.produce(records, acks, 5000))

    @EXAMPLES
    @given(acks=st.one_of(st.integers().filter(lambda a: a not in (0, 1, -1)),
                          st.sampled_from(["all", "1", None, b"1", [1], "-1"])))
    def bad_acks(acks: Any) -> None:
        reply = leader.produce(good, acks, 5000)
        with pytest.raises(InvalidRequiredAcksError, match="acks"):
            raise_for(reply)

    @EXAMPLES
    @given(timeout_ms=st.text() | st.none() | st.binary() | st.lists(st.integers()))
    def bad_timeout(timeout_ms: Any) -> None:
        # Refused before the append: acks=all would only trip on it while waiting, with the
        # batch already in the log.
        with pytest.raises(TypeError, match="timeout_ms"):
            raise_for(leader.produce(good, -1, timeout_ms))

    non_bytes()
    bad_acks()
    bad_timeout()


def test_a_compacted_topic_refuses_records_without_a_key(cluster: Cluster, topics) -> None:
    """Compaction keeps the last record of each key: a record without one has nowhere to go.
    Kafka refuses it with INVALID_RECORD, and stores nothing of the request."""
    cluster.create_topic("compacted", partitions=1, replication_factor=3,
                         config={"cleanup.policy": "compact"})
    producer = cluster.producer(acks="all", linger_ms=0)
    kept = producer.send("compacted", key=b"k", value=b"kept").result(60)
    with pytest.raises(InvalidRecordError, match="key"):
        producer.send("compacted", value=b"no key").result(60)
    # A batch straight to the leader, keyed records around a keyless one: all refused.
    batch = build_batch([(b"a", b"1", T0, None), (None, b"2", T0, None), (b"c", b"3", T0, None)])
    with pytest.raises(InvalidRecordError):
        raise_for(ReplicaOnHost(cluster, "compacted", 0).produce(batch, -1, 5000))
    after = producer.send("compacted", key=b"k", value=b"after").result(60)
    producer.close()
    assert after.offset == kept.offset + 1, "nothing of the refused records was stored"


# ---------------------------------------------------------------------------- command line


def _cli(cluster: Cluster, *args: str, input: str | None = None) -> subprocess.CompletedProcess:
    """`rafka ARGS --zk ... --name ... --address ...` against this module's cluster."""
    env = {key: value for key, value in os.environ.items()
           if key not in ("RAY_ADDRESS", "RAFKA_CLUSTER", "RAFKA_ZK", "RAFKA_HOME")}
    # The in-process Ray uses token auth, its token in ~/.ray/auth_token (HOME is kept).
    env.update(RAY_AUTH_MODE="token", RAFKA_HOME=str(cluster.data_dir.parent / "rafka-home"),
               PYTHONUNBUFFERED="1")
    address = ray.get_runtime_context().gcs_address
    return subprocess.run(
        [sys.executable, "-m", "rafka", *args, "--zk", str(cluster.stack.zk_address),
         "--name", cluster.name, "--address", address],
        input=input, capture_output=True, text=True, timeout=120, env=env, check=False,
    )


def _one_line_error(result: subprocess.CompletedProcess, *needles: str) -> None:
    assert result.returncode != 0, (result.stdout, result.stderr)
    assert "Traceback" not in result.stderr, result.stderr
    errors = [line for line in result.stderr.splitlines() if line.startswith("rafka: error:")]
    assert len(errors) == 1, result.stderr
    for needle in needles:
        assert needle in errors[0], (needle, result.stderr)


def test_the_command_line_against_a_cluster(cluster: Cluster, unharmed) -> None:
    """What only a running cluster can refuse (a partition the topic lacks, a topic that
    does not exist); the names and numbers refused before connecting are in
    tests/cli/test_cli_errors.py."""
    _one_line_error(_cli(cluster, "produce", TOPIC, "--partition", "7", input="a\nb\n"),
                    "partition 7", "0..1")
    _one_line_error(_cli(cluster, "consume", TOPIC, "--partition", "7", "--from-beginning",
                         "--max-messages", "1", "--timeout-ms", "2000"), "not 7")
    _one_line_error(_cli(cluster, "produce", "unknown-topic", input="a\n"),
                    "'unknown-topic' does not exist", "create")
    _one_line_error(_cli(cluster, "topics", "create", "huge", "--replication-factor", "9"),
                    "replication factor 9", "brokers")
