"""The control protocol's frames (`actors/controller/control_frames.py`), without I/O: what the
controller (or a replica host) writes, the broker reads back field for field; what is not the
protocol is refused; answers find their requests; reconnects wait longer each time, up to a
bound."""

from __future__ import annotations

import dataclasses

import msgpack
import pytest

from rafka.actors.controller import control_frames
from rafka.actors.controller.control_frames import (
    ControlFrameError,
    PendingRequests,
    ReconnectBackoff,
)
from rafka.actors.messages import (
    ErrorReply,
    IsrChange,
    IsrWritten,
    LeaderAndIsrRequest,
    PartitionErrors,
    PartitionMetadata,
    UpdateMetadataRequest,
)
from rafka.common.topic_partition import TopicPartition
from rafka.coordination.models import BrokerInfo


def _body(framed: bytes) -> bytes:
    length = control_frames.frame_length(framed[:4])
    assert len(framed) == 4 + length
    return framed[4:]


def test_a_leader_and_isr_reads_back_as_sent() -> None:
    sent = [LeaderAndIsrRequest("orders", 3, 2, 7, (2, 1), (1, 2, 3), 5, 41, "host-2-0",
                                {"min.insync.replicas": "2", "retention.ms": 1000}),
            LeaderAndIsrRequest("clicks", 0, -1, 0, (), (1,), 5)]
    request = control_frames.decode_request(_body(
        control_frames.encode_request(9, control_frames.LEADER_AND_ISR, 5, sent)))
    assert request == (9, "leader_and_isr", 5, (sent,))


def test_an_update_metadata_reads_back_with_the_brokers_registrations() -> None:
    brokers = {1: BrokerInfo(1, "broker-1", "10.0.0.1", rack="r1", replica_hosts=2,
                             endpoints=("PLAINTEXT://10.0.0.1:9092",),
                             control_endpoint="10.0.0.1:4100", timestamp=12, epoch=77),
               2: BrokerInfo(2, "broker-2", "10.0.0.2", timestamp=13, epoch=None)}
    sent = UpdateMetadataRequest(
        1, 6, brokers, {TopicPartition("orders", 0): PartitionMetadata(1, 3, (1, 2), (1, 2), 8)},
        ("gone",), full=True, topic_ids={"orders": "AAAAAAAAAAAAAAAAAAAAAQ"})
    request = control_frames.decode_request(_body(
        control_frames.encode_request(1, control_frames.UPDATE_METADATA, 6, sent)))
    read = request.arguments[0]
    assert read == sent
    # A controller of an earlier rafka sends no topic ids: its update still reads.
    older = control_frames._pack_update_metadata(sent)[:6]
    assert control_frames._read_update_metadata(older) == dataclasses.replace(sent, topic_ids={})
    assert {broker: info.epoch for broker, info in read.brokers.items()} == {1: 77, 2: None}
    assert read.brokers[1].control_endpoint == "10.0.0.1:4100"


def test_stop_replica_and_config_changes_read_back() -> None:
    stop = control_frames.decode_request(_body(control_frames.encode_request(
        2, control_frames.STOP_REPLICAS, 4, [("orders", 1), ("orders", 2)], True)))
    assert stop == (2, "stop_replicas", 4, ([("orders", 1), ("orders", 2)], True))
    config = control_frames.decode_request(_body(control_frames.encode_request(
        3, control_frames.UPDATE_TOPIC_CONFIG, 4, "orders", {"retention.ms": "60000"})))
    assert config == (3, "update_topic_config", 4, ("orders", {"retention.ms": "60000"}))


def test_a_hosts_isr_changes_read_back_as_sent() -> None:
    sent = [IsrChange("orders", 3, 2, 7, (1, 2), 5, 41), IsrChange("clicks", 0, 2, 0, (2,), 5, 0)]
    request = control_frames.decode_request(_body(
        control_frames.encode_request(4, control_frames.UPDATE_PARTITION_STATES, -1, sent)))
    assert request == (4, "update_partition_states", -1, (sent,))
    assert control_frames.UPDATE_PARTITION_STATES in control_frames.WITHOUT_EPOCH


def test_a_transactions_verification_reads_back_and_its_answer_per_partition() -> None:
    request = control_frames.decode_request(_body(control_frames.encode_request(
        5, control_frames.VERIFY_TRANSACTION, -1, "payments-1", 4000, 2,
        [("orders", 0), ("orders", 3)], False)))
    assert request == (5, "verify_transaction", -1,
                       ("payments-1", 4000, 2, [("orders", 0), ("orders", 3)], False))
    assert control_frames.VERIFY_TRANSACTION in control_frames.CONCURRENT
    refused = PartitionErrors({TopicPartition("orders", 3): ErrorReply(120, "not in it")})
    assert control_frames.verification_error(refused, "orders", 3) == 120
    assert control_frames.verification_error(refused, "orders", 0) == 0
    assert control_frames.verification_error(ErrorReply(90, "fenced"), "orders", 0) == 90
    assert control_frames.verification_error(None, "orders", 0) == 0


@pytest.mark.parametrize("answer", [
    None,
    [IsrWritten(42), ErrorReply(6, "a stale znode version"), IsrWritten(0)],
    [],
    ErrorReply(11, "controller epoch 3 < 4"),
    PartitionErrors({TopicPartition("orders", 1): ErrorReply(56, "storage", leader=2),
                     TopicPartition("orders", 2): ErrorReply(6, "not leader", 1, 0, 5, 5, 9)}),
    PartitionErrors({}),
])
def test_answers_read_back_with_their_correlation_id(answer: object) -> None:
    assert control_frames.decode_answer(
        _body(control_frames.encode_answer(42, answer))) == (42, answer)  # type: ignore[arg-type]


@pytest.mark.parametrize("payload", [
    "not a list",
    [1, "produce", 3, []],                       # not a control method
    [1, "leader_and_isr", "3", [[]]],            # the epoch a string
    [1, "leader_and_isr", 3, [[["orders", 0]]]],  # a partition short of fields
    [1, "stop_replicas", 3, [[["orders", "0"]], True]],
    [1, "update_topic_config", 3, ["orders", {1: "x"}]],
    [1, "update_metadata", 3, [[1, 3, [[{"node_id": 1}, None]], [], [], True]]],  # no actor
    [1, "update_partition_states", -1, [[["orders", 0, 2, 7, [1, 2], 5]]]],  # no zk version
    [1, "update_partition_states", -1, [[["orders", 0, 2, 7, ["1"], 5, 41]]]],
    [1, "verify_transaction", -1, ["payments-1", 4000, 2, [["orders", 0]]]],  # no forwarded
    [1, "verify_transaction", -1, [None, 4000, 2, [["orders", 0]], False]],
    [1, "verify_transaction", -1, ["payments-1", 4000, 2, [["orders"]], False]],
])
def test_what_is_not_a_request_is_refused(payload: object) -> None:
    with pytest.raises(ControlFrameError):
        control_frames.decode_request(msgpack.packb(payload, strict_types=False))
    with pytest.raises(ControlFrameError):
        control_frames.decode_request(b"\xc1")  # not msgpack at all


@pytest.mark.parametrize("payload", [
    [1, 3, [[0, "41"]]],        # a znode version that is not a number
    [1, 3, [[2, 41]]],          # neither written nor refused
    [1, 3, [[1, ["short"]]]],   # an error short of fields
])
def test_what_is_not_an_isr_writes_answer_is_refused(payload: object) -> None:
    with pytest.raises(ControlFrameError):
        control_frames.decode_answer(msgpack.packb(payload))


def test_a_frame_longer_than_allowed_is_refused_by_its_header() -> None:
    with pytest.raises(ControlFrameError, match="more than"):
        control_frames.frame_length(control_frames.LENGTH.pack(100), limit=99)


def test_the_hello_carries_the_token_and_the_version() -> None:
    assert control_frames.read_hello(_body(control_frames.hello(b"secret"))) == b"secret"
    with pytest.raises(ControlFrameError):
        control_frames.read_hello(msgpack.packb([control_frames.VERSION + 1, b"secret"]))


def test_the_token_is_derived_from_the_cluster_secret() -> None:
    token = control_frames.control_token("rafka:s3cret")
    assert token == control_frames.control_token("rafka:s3cret")
    assert token != control_frames.control_token("rafka:other")
    assert b"s3cret" not in token and len(token) == 32
    assert control_frames.control_token(None) == b""


def test_answers_find_their_requests_and_late_ones_nobody() -> None:
    pending: PendingRequests[str] = PendingRequests()
    first, second = pending.add("first"), pending.add("second")
    assert first != second and len(pending) == 2
    assert pending.answered(second) == "second"
    assert pending.answered(second) is None  # answered twice, or after it was given up
    assert pending.answered(999) is None
    assert pending.take_all() == ["first"] and len(pending) == 0


def test_reconnects_wait_longer_each_time_up_to_the_bound() -> None:
    backoff = ReconnectBackoff(initial_s=0.05, max_s=1.0, jitter=0.0)
    assert [backoff.delay_s(n) for n in range(8)] == [0.0, 0.05, 0.1, 0.2, 0.4, 0.8, 1.0, 1.0]
    assert backoff.delay_s(10_000) == 1.0


def test_the_jitter_stays_within_its_share() -> None:
    low = ReconnectBackoff(initial_s=0.1, max_s=1.0, jitter=0.2, uniform=lambda a, _b: a)
    high = ReconnectBackoff(initial_s=0.1, max_s=1.0, jitter=0.2, uniform=lambda _a, b: b)
    assert low.delay_s(1) == pytest.approx(0.08) and high.delay_s(1) == pytest.approx(0.12)
    assert high.delay_s(20) == pytest.approx(1.2)
