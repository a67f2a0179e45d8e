"""Request frames a client should never send, against a live listener: every API rafka serves,
at random versions (served or not), each frame a well-formed request (some with edge content: no
batch in a produce) then, mostly, damaged (bytes flipped, counts and lengths made huge or
negative, cut short, garbage added), or plain noise.

What must hold after each one: the connection either answers it (and then, in order, an
ApiVersions request sent behind it) or is closed, never left hanging; a second connection gets
its Metadata answered throughout; the broker's memory stays bounded; no replica host call
raised (the listener counts them). One broker of its own, so
that fuzzed admin requests touch nothing of the other tests.

RAFKA_FUZZ_EXAMPLES sets how many frames (default 300). Each run draws new frames from a seed
it prints, so that CI explores new ones and a failure replays with RAFKA_FUZZ_SEED (or
RAFKA_SEED) set to it (3,000 random frames found nulls in fields that must not be null, empty and
non-znode group ids, and a negative ApiVersions version, each a handler that raised and dropped
the connection instead of answering).
"""

from __future__ import annotations

import os
import socket
import struct
import threading
import time
from collections.abc import Iterator

import psutil
import pytest
import ray
from hypothesis import HealthCheck, given, seed, settings
from hypothesis import strategies as st
from kafka.protocol.api_key import ApiKey
from kafka.protocol.consumer import JoinGroupRequest
from kafka.protocol.metadata import ApiVersionsRequest, MetadataRequest
from kafka.protocol.producer import ProduceRequest
from kafka.protocol.sasl import SaslAuthenticateRequest, SaslHandshakeRequest

from rafka import Cluster
from rafka.wire.protocol import (
    APIS,
    MalformedRequestError,
    UnsupportedRequestError,
    read_request,
)
from tests.support.cluster import cluster_of_its_own
from tests.support.kafka_batches import encoded_records, kafka_batch
from tests.support.kafka_wire import KafkaWire, first_address
from tests.support.seeds import run_seed

EXAMPLES = int(os.environ.get("RAFKA_FUZZ_EXAMPLES", "300"))
# How long an answer (or the connection's close) may take. A request that legitimately waits
# (a fetch's max_wait_ms, a join waiting for its group) may be given a long wait by the damage:
# those are let off with this wait, as long as the other connection is served meanwhile.
ANSWER_TIMEOUT_S = 5.0
MAY_WAIT = {ApiKey.Fetch, ApiKey.JoinGroup, ApiKey.SyncGroup, ApiKey.Produce}
# What the broker process may grow by over the whole run.
MEMORY_GROWTH_BOUND = 300 * 2**20
REQUEST_MAX_BYTES = 4 * 2**20
TOPIC = "fuzzed"
PASSWORD = "fuzz-secret"
SASL_KEYS = {ApiKey.SaslHandshake, ApiKey.SaslAuthenticate}


@pytest.fixture(scope="module")
def fuzzed(zookeeper, ray_session, tmp_path_factory) -> Iterator[Cluster]:
    for cluster in cluster_of_its_own(
            zookeeper, tmp_path_factory, "kafka-fuzz", brokers=1,
            kafka_listeners="PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0",
            broker_config={"socket.request.max.bytes": REQUEST_MAX_BYTES,
                           "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-512",
                           "plain.sasl.jaas.config": f'x required user_fuzz="{PASSWORD}";',
                           "connection.failed.authentication.delay.ms": 0,
                           "group.initial.rebalance.delay.ms": 0,
                           "group.min.session.timeout.ms": 1,
                           "auto.create.topics.enable": False}):
        cluster.create_topic(TOPIC, partitions=2, replication_factor=1)
        yield cluster


def _address(cluster: Cluster) -> tuple[str, int]:
    return first_address(cluster.bootstrap_servers())


def _encoded(request, version: int) -> bytes:
    """The frame's body (after the int32 length)."""
    request.with_header(correlation_id=7, client_id="fuzz")
    return bytes(request.encode(version=version, header=True, framed=False))


def _seeds() -> list[tuple[ApiKey, bytes]]:
    """A request of every served API at every served version: empty ones (all fields at their
    defaults) and a few with content (a produce batch, topics, a group's protocols)."""
    seeds = []
    for api in APIS.values():
        for version in range(api.min_version, api.max_version + 1):
            seeds.append((api.key, _encoded(api.request(), version)))
    # A batch, no records at all (null) and none (empty), to a partition that exists.
    for records in (kafka_batch(encoded_records(3, b"value"), 3), None, b""):
        for version in (3, 9):
            seeds.append((ApiKey.Produce, _encoded(ProduceRequest(
                transactional_id=None, acks=1, timeout_ms=1_000, topic_data=[
                    ProduceRequest.TopicProduceData(name=TOPIC, partition_data=[
                        ProduceRequest.TopicProduceData.PartitionProduceData(
                            index=0, records=records)])]), version)))
    for version in (1, 12):
        seeds.append((ApiKey.Metadata, _encoded(MetadataRequest(
            topics=[MetadataRequest.MetadataRequestTopic(name=TOPIC)]), version)))
    for version in (1, 5):
        seeds.append((ApiKey.JoinGroup, _encoded(JoinGroupRequest(
            group_id="fuzz-group", session_timeout_ms=1_000, rebalance_timeout_ms=1_000,
            member_id="", protocol_type="consumer",
            protocols=[JoinGroupRequest.JoinGroupRequestProtocol(name="range", metadata=b"")]),
            version)))
    return seeds


SEEDS = _seeds()
HUGE = [0x7FFFFFFF, 0x80000000, 0xFFFFFFFF, 0x00FFFFFF, 0x7FFF]


@st.composite
def frames(draw) -> tuple[ApiKey | None, bytes]:
    """(the API the frame started as, or None for noise; the frame's body)."""
    if draw(st.integers(0, 9)) == 0:
        return None, draw(st.binary(min_size=0, max_size=200))
    key, body = draw(st.sampled_from(SEEDS))
    frame = bytearray(body)
    # No damage at all, sometimes: a seed's edge content (a null batch) must be served too.
    for _ in range(draw(st.integers(0, 4))):
        damage = draw(st.sampled_from(["flip", "huge", "cut", "append", "version"]))
        if damage == "flip" and frame:
            at = draw(st.integers(0, len(frame) - 1))
            frame[at] ^= draw(st.integers(1, 255))
        elif damage == "huge" and len(frame) >= 4:
            # A count, length or varint made huge or negative.
            at = draw(st.integers(0, len(frame) - 4))
            frame[at:at + 4] = struct.pack(">I", draw(st.sampled_from(HUGE)))
        elif damage == "cut":
            del frame[draw(st.integers(0, len(frame))):]
        elif damage == "append":
            frame += draw(st.binary(min_size=1, max_size=64))
        elif damage == "version" and len(frame) >= 4:
            frame[2:4] = struct.pack(">h", draw(st.integers(-2, 20)))
    return key, bytes(frame)


class _Watcher:
    """A second connection asking for metadata, over and over, while the fuzzer runs."""

    def __init__(self, address: tuple[str, int]) -> None:
        self.wire = KafkaWire(address)
        self.latencies: list[float] = []
        self.failure: BaseException | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> _Watcher:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(30)
        self.wire.close()

    def _run(self) -> None:
        try:
            while not self._stop.wait(0.05):
                started = time.perf_counter()
                answer = self.wire.ask(MetadataRequest(
                    topics=[MetadataRequest.MetadataRequestTopic(name=TOPIC)]), 1)
                assert answer.topics[0].error_code == 0
                self.latencies.append(time.perf_counter() - started)
        except BaseException as error:  # reported by the test
            self.failure = error


def _send_and_check(address: tuple[str, int], key: ApiKey | None, body: bytes) -> str:
    """Send one fuzzed frame and an ApiVersions behind it on a new connection: the broker
    answers both, or the ApiVersions only (a produce with acks=0), or closes the connection;
    any of it within the timeout. Returns which it was.

    Which of them is right is decided here too, by reading the frame as the broker does: one
    that reads as a request (of a served version or not) is answered, never dropped by a
    handler that raised; only one that does not read is closed."""
    silent = False  # a produce with acks=0 gets no answer
    try:
        api, _version, request = read_request(body)
        readable, silent = True, api.key == ApiKey.Produce and request.acks == 0
    except UnsupportedRequestError:
        readable = True
    except MalformedRequestError:
        readable = False
    with socket.create_connection(address, timeout=ANSWER_TIMEOUT_S) as connection:
        probe = ApiVersionsRequest()
        probe.with_header(correlation_id=424242, client_id="probe")
        connection.sendall(struct.pack(">i", len(body)) + body
                           + bytes(probe.encode(version=0, header=True, framed=True)))
        answers = 0
        try:
            while True:
                size_bytes = _read(connection, 4)
                if size_bytes is None:
                    assert not readable, (
                        f"the connection closed on a {key.name if key else 'noise'} frame "
                        f"that reads as a request: {body[:64].hex()}")
                    return "closed"
                size = struct.unpack(">i", size_bytes)[0]
                assert 4 <= size <= 16 * 2**20, f"an answer of {size} bytes"
                answer = _read(connection, size)
                assert answer is not None, "the connection closed in the middle of an answer"
                answers += 1
                assert answers <= 2, "more answers than requests"
                assert readable, f"an answer to a frame that does not read: {body[:64].hex()}"
                if struct.unpack_from(">i", answer)[0] == 424242:  # it comes last
                    assert answers == (1 if silent else 2), (
                        f"{answers - 1} answers to a {key.name if key else 'noise'} frame: "
                        f"{body[:64].hex()}")
                    return "answered" if answers == 2 else "acks=0"
        except TimeoutError:
            if key not in MAY_WAIT:
                raise AssertionError(
                    f"no answer and no close within {ANSWER_TIMEOUT_S} s to a damaged "
                    f"{key.name if key else 'noise'} frame {body[:64].hex()}") from None
            return "waiting"


def _read(connection: socket.socket, size: int) -> bytes | None:
    data = b""
    while len(data) < size:
        chunk = connection.recv(size - len(data))
        if not chunk:
            return None if not data else data if len(data) == size else None
        data += chunk
    return data


def test_damaged_request_frames_are_answered_or_refused_and_harm_no_one(
    fuzzed: Cluster,
) -> None:
    address = _address(fuzzed)
    broker = ray.get_actor("broker-0", namespace=fuzzed.namespace)
    process = psutil.Process(ray.get(broker.pid.remote(), timeout=30))
    memory_before = process.memory_info().rss

    @seed(run_seed("the frame fuzzer", variable="RAFKA_FUZZ_SEED"))
    @settings(max_examples=EXAMPLES, deadline=None, derandomize=False, database=None,
              suppress_health_check=list(HealthCheck))
    @given(frames())
    def one_frame(frame: tuple[ApiKey | None, bytes]) -> None:
        outcome = _send_and_check(address, *frame)
        outcomes[outcome] = outcomes.get(outcome, 0) + 1

    outcomes: dict[str, int] = {}
    with _Watcher(address) as watcher:
        one_frame()
    print(outcomes)
    # Not a fuzzer that only ever sends what is refused at once, or only what is answered.
    assert outcomes.get("answered", 0) > EXAMPLES // 10, outcomes
    assert outcomes.get("closed", 0) > EXAMPLES // 10, outcomes
    assert watcher.failure is None, f"the other connection failed: {watcher.failure!r}"
    assert watcher.latencies, "the other connection was never answered"
    assert max(watcher.latencies) < ANSWER_TIMEOUT_S
    # The broker is alive and serves a well-formed request on a new connection.
    with KafkaWire(address) as wire:
        assert wire.ask(ApiVersionsRequest(), 0).error_code == 0
    growth = process.memory_info().rss - memory_before
    assert growth < MEMORY_GROWTH_BOUND, f"the broker grew by {growth / 2**20:.0f} MiB"
    # No frame made a replica host raise: that is answered NOT_LEADER_OR_FOLLOWER, which the
    # answered-or-closed check above cannot tell from a right answer.
    assert ray.get(broker.kafka_listener_stats.remote(), timeout=30)["host_failures"] == 0


# ------------------------------------------------------------------ on the SASL listener


def _sasl_address(cluster: Cluster) -> tuple[str, int]:
    for broker in cluster.brokers():
        for endpoint in broker["endpoints"]:
            name, _, address = endpoint.partition("://")
            if name == "SASL_PLAINTEXT":
                return first_address(address)
    raise AssertionError("no SASL_PLAINTEXT listener registered")


def _sasl_seeds() -> list[tuple[ApiKey, bytes]]:
    """The SASL exchange's requests, with content: every mechanism named (and one that is
    not), PLAIN's message right and wrong, SCRAM's first message."""
    seeds = [(key, body) for key, body in SEEDS if key in SASL_KEYS]
    for version in (0, 1):
        for mechanism in ("PLAIN", "SCRAM-SHA-512", "GSSAPI", ""):
            seeds.append((ApiKey.SaslHandshake, _encoded(
                SaslHandshakeRequest(mechanism=mechanism), version)))
    for version in (0, 1, 2):
        for token in (f"\0fuzz\0{PASSWORD}".encode(), b"\0fuzz\0wrong", b"n,,n=fuzz,r=abc",
                      b""):
            seeds.append((ApiKey.SaslAuthenticate, _encoded(
                SaslAuthenticateRequest(auth_bytes=token), version)))
    return seeds


SASL_SEEDS = _sasl_seeds()


@st.composite
def sasl_frames(draw) -> tuple[ApiKey | None, bytes]:
    """Mostly the SASL exchange's frames (damaged or not), else any other frame."""
    if draw(st.integers(0, 2)) == 0:
        return draw(frames())
    key, body = draw(st.sampled_from(SASL_SEEDS))
    frame = bytearray(body)
    for _ in range(draw(st.integers(0, 2))):
        if frame and draw(st.booleans()):
            at = draw(st.integers(0, len(frame) - 1))
            frame[at] ^= draw(st.integers(1, 255))
        else:
            del frame[draw(st.integers(0, len(frame))):]
    return key, bytes(frame)


def _answers_until_closed(connection: socket.socket, what: str) -> list[bytes]:
    """Every answer the broker writes until it closes the connection (within the timeout:
    a hang fails)."""
    answers = []
    try:
        while (size_bytes := _read(connection, 4)) is not None:
            size = struct.unpack(">i", size_bytes)[0]
            assert 0 <= size <= 16 * 2**20, f"an answer of {size} bytes"
            answer = _read(connection, size)
            assert answer is not None, "the connection closed in the middle of an answer"
            answers.append(answer)
    except TimeoutError:
        raise AssertionError(f"no close within {ANSWER_TIMEOUT_S} s after {what}") from None
    except ConnectionResetError:
        pass
    return answers


def _before_authentication(address: tuple[str, int], key: ApiKey | None, body: bytes) -> str:
    """A frame as a new connection's first: only ApiVersions and SaslHandshake may be
    answered; every other request closes the connection unanswered. Then a Metadata request
    behind it must never be answered (it is not authenticated)."""
    try:
        api, _version, _request = read_request(body)
        first: int | None = api.key
    except UnsupportedRequestError as error:
        first = error.api_key  # ApiVersions of a newer version is answered, at v0
    except MalformedRequestError:
        first = None
    metadata = MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name=TOPIC)])
    metadata.with_header(correlation_id=515151, client_id="fuzz")
    with socket.create_connection(address, timeout=ANSWER_TIMEOUT_S) as connection:
        connection.sendall(struct.pack(">i", len(body)) + body
                           + bytes(metadata.encode(version=1, header=True, framed=True)))
        # A handshake accepted waits for the mechanism's message: the Metadata behind it is
        # read as one (or as a request out of place), which closes the connection.
        answers = _answers_until_closed(connection, f"{key} before authenticating")
    for answer in answers:
        assert struct.unpack_from(">i", answer)[0] != 515151, \
            f"a request was served before authentication, after {body[:64].hex()}"
    if answers:
        assert first in (ApiKey.ApiVersions, ApiKey.SaslHandshake), (
            f"{len(answers)} answers before authentication to {body[:64].hex()}")
    return "answered" if answers else "closed"


def _after_authentication(address: tuple[str, int], key: ApiKey | None, body: bytes) -> str:
    """A frame on an authenticated connection, and an ApiVersions behind it: answered as on
    any listener, or closed (a failed re-authentication is answered, then closed)."""
    with KafkaWire(address, timeout_s=ANSWER_TIMEOUT_S) as wire:
        assert wire.ask(SaslHandshakeRequest(mechanism="PLAIN"), 1).error_code == 0
        assert wire.ask(SaslAuthenticateRequest(
            auth_bytes=f"\0fuzz\0{PASSWORD}".encode()), 2).error_code == 0
        probe = ApiVersionsRequest()
        probe.with_header(correlation_id=424242, client_id="probe")
        wire.socket.sendall(struct.pack(">i", len(body)) + body
                            + bytes(probe.encode(version=0, header=True, framed=True)))
        answers = 0
        try:
            while (size_bytes := _read(wire.socket, 4)) is not None:
                size = struct.unpack(">i", size_bytes)[0]
                assert 4 <= size <= 16 * 2**20, f"an answer of {size} bytes"
                answer = _read(wire.socket, size)
                assert answer is not None, "the connection closed in the middle of an answer"
                answers += 1
                assert answers <= 2, "more answers than requests"
                if struct.unpack_from(">i", answer)[0] == 424242:  # it comes last
                    return "answered"
        except TimeoutError:
            if key not in MAY_WAIT:
                raise AssertionError(
                    f"no answer and no close within {ANSWER_TIMEOUT_S} s to a "
                    f"{key.name if key else 'noise'} frame after authenticating: "
                    f"{body[:64].hex()}") from None
            return "waiting"
        except ConnectionResetError:
            pass
    # Closed: a frame that does not read, or a failed re-authentication (answered first).
    return "closed"


def test_sasl_frames_before_and_after_authentication_serve_nothing_unauthenticated(
    fuzzed: Cluster,
) -> None:
    address = _sasl_address(fuzzed)
    outcomes: dict[str, int] = {}

    @seed(run_seed("the SASL frame fuzzer", variable="RAFKA_FUZZ_SEED"))
    @settings(max_examples=max(EXAMPLES // 3, 30), deadline=None, derandomize=False,
              database=None, suppress_health_check=list(HealthCheck))
    @given(sasl_frames(), st.booleans())
    def one_frame(frame: tuple[ApiKey | None, bytes], authenticated: bool) -> None:
        check = _after_authentication if authenticated else _before_authentication
        outcome = f"{'after' if authenticated else 'before'}: {check(address, *frame)}"
        outcomes[outcome] = outcomes.get(outcome, 0) + 1

    one_frame()
    print(outcomes)
    assert outcomes.get("before: closed", 0) and outcomes.get("after: answered", 0), outcomes
    assert outcomes.get("after: closed", 0), outcomes
    # The broker serves on, on both listeners.
    with KafkaWire(address) as wire:
        assert wire.ask(ApiVersionsRequest(), 0).error_code == 0
    with KafkaWire(_address(fuzzed)) as wire:
        assert wire.ask(ApiVersionsRequest(), 0).error_code == 0
