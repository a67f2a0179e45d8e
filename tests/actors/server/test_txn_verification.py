"""A leader's side of KIP-890 (`actors/server/txn_verification.py`), without Ray: the guard
that a marker drops, one question per producer for its batches in flight, and the answers a
producer gets, as Kafka's leader gives them. The coordinator is a function here; the wire test
(`tests/kafka_clients/test_transaction_verification.py`) asks a real one."""

from __future__ import annotations

import asyncio

import pytest

from rafka.actors.errors import ErrorCode
from rafka.actors.messages import ErrorReply
from rafka.actors.server.txn_verification import TransactionVerifier

ID, PRODUCER, EPOCH = "payments-1", 4000, 3


class Coordinator:
    """Answers `answer`, once `released` is set; counts the questions."""

    def __init__(self, answer: ErrorCode = ErrorCode.NONE) -> None:
        self.answer = answer
        self.asked = 0
        self.released = asyncio.Event()

    async def __call__(self, transactional_id: str, producer_id: int, producer_epoch: int,
                       topic: str, partition: int) -> ErrorCode:
        assert (transactional_id, producer_id, producer_epoch, topic, partition) == (
            ID, PRODUCER, EPOCH, "orders", 0)
        self.asked += 1
        await self.released.wait()
        return self.answer


def verify(verifier: TransactionVerifier) -> asyncio.Future:
    return asyncio.ensure_future(verifier.verify(ID, PRODUCER, EPOCH, "orders", 0))


async def settle() -> None:
    """Let every task started run until it waits."""
    for _ in range(5):
        await asyncio.sleep(0)


def test_batches_in_flight_share_one_question_and_a_marker_voids_their_guard() -> None:
    async def scenario() -> None:
        coordinator = Coordinator()
        verifier = TransactionVerifier(coordinator)
        first, second = verify(verifier), verify(verifier)
        await settle()
        assert coordinator.asked == 1
        coordinator.released.set()
        guard = await first
        assert await second is guard and verifier.admits(PRODUCER, guard)
        # The transaction ends while a batch verified under its guard waits to be appended.
        verifier.transaction_ended(PRODUCER)
        assert not verifier.admits(PRODUCER, guard)

    asyncio.run(scenario())


def test_a_batch_arriving_after_a_marker_waits_for_a_question_of_its_own() -> None:
    async def scenario() -> None:
        coordinator = Coordinator()
        verifier = TransactionVerifier(coordinator)
        before = verify(verifier)
        await settle()
        verifier.transaction_ended(PRODUCER)  # the marker overtakes the answer
        after = verify(verifier)
        await settle()
        assert coordinator.asked == 2  # the answer to the first says nothing of the second
        coordinator.released.set()
        old_guard, new_guard = await before, await after
        assert not verifier.admits(PRODUCER, old_guard)
        assert verifier.admits(PRODUCER, new_guard)

    asyncio.run(scenario())


@pytest.mark.parametrize(("answer", "told"), [
    (ErrorCode.TRANSACTION_ABORTABLE, ErrorCode.INVALID_TXN_STATE),
    (ErrorCode.PRODUCER_FENCED, ErrorCode.INVALID_PRODUCER_EPOCH),
    (ErrorCode.INVALID_PRODUCER_ID_MAPPING, ErrorCode.INVALID_PRODUCER_ID_MAPPING),
    # What a retry gets past: every client retries NOT_ENOUGH_REPLICAS.
    (ErrorCode.CONCURRENT_TRANSACTIONS, ErrorCode.NOT_ENOUGH_REPLICAS),
    (ErrorCode.NOT_COORDINATOR, ErrorCode.NOT_ENOUGH_REPLICAS),
    (ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, ErrorCode.NOT_ENOUGH_REPLICAS),
    (ErrorCode.NETWORK_EXCEPTION, ErrorCode.NOT_ENOUGH_REPLICAS),
])
def test_the_producer_is_answered_as_kafkas_leader_answers(answer: ErrorCode,
                                                           told: ErrorCode) -> None:
    async def scenario() -> object:
        coordinator = Coordinator(answer)
        coordinator.released.set()
        return await verify(TransactionVerifier(coordinator))

    refused = asyncio.run(scenario())
    assert isinstance(refused, ErrorReply) and refused.code == told
    assert "orders-0" in refused.message or "fenced" in refused.message


def test_without_a_transactional_id_or_a_coordinator_nothing_is_asked() -> None:
    async def scenario() -> None:
        coordinator = Coordinator()
        verifier = TransactionVerifier(coordinator)
        assert await verifier.verify(None, PRODUCER, EPOCH, "orders", 0) is None
        assert coordinator.asked == 0
        alone = TransactionVerifier(None)
        assert await alone.verify(ID, PRODUCER, EPOCH, "orders", 0) is None

    asyncio.run(scenario())
