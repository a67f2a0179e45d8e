"""KIP-890's verification at a partition leader: a transactional producer's batch that would
open a transaction in this partition (the producer has none open here) is appended only once
the transaction coordinator has said that the partition is in the producer's Ongoing
transaction.

Without it, a batch delayed past its transaction's end (the anomaly Jepsen found in Kafka's
protocol, analysing Bufstream) is appended after the transaction's marker: it opens a
transaction that no coordinator knows of, which holds the partition's last stable offset,
and every read_committed consumer with it, until an admin aborts it; or, if the producer's next
transaction writes here too, it joins that one.

The guard is Kafka's VerificationGuard: a verification takes the producer's guard before it
asks, and the transaction's marker drops it. The batch is appended only if the guard it took
is still the producer's at the moment of the append, or the producer has a transaction open
here by then (another batch of it went first), so an end that overtakes the coordinator's
answer cannot let the batch in.

The coordinator answers Kafka's codes (`txn.verify_partitions`); the producer is answered as
Kafka's leader answers it (`refusal`): INVALID_TXN_STATE where the partition is not in the
transaction, INVALID_PRODUCER_EPOCH where a newer producer fenced it, and NOT_ENOUGH_REPLICAS,
which every client retries, where the coordinator could not say (moving, loading, ending the
transaction, out of reach).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from rafka.actors.errors import ErrorCode, error_reply
from rafka.actors.messages import ErrorReply
from rafka.logstore.batch import BatchHeader
from rafka.logstore.log import Log

# Asks the transaction coordinator of `transactional_id` whether `(topic, partition)` is in
# the transaction of `(producer_id, producer_epoch)`: NONE, or the coordinator's error.
VerifyTransaction = Callable[[str, int, int, str, int], Awaitable[ErrorCode]]

# What the coordinator may answer that a retry can get past (Kafka's ReplicaManager turns
# these into NOT_ENOUGH_REPLICAS, which older clients retry without a metadata refresh).
_RETRIABLE = frozenset({
    ErrorCode.CONCURRENT_TRANSACTIONS, ErrorCode.NETWORK_EXCEPTION,
    ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.NOT_COORDINATOR,
})


def refusal(code: ErrorCode, transactional_id: str, producer_id: int, topic: str,
            partition: int) -> ErrorReply:
    """The produce answer for a verification the coordinator answered `code` (not NONE)."""
    where = f"{topic}-{partition}"
    if code in _RETRIABLE:
        return error_reply(
            ErrorCode.NOT_ENOUGH_REPLICAS,
            f"could not verify that {where} is in the transaction of {transactional_id!r} "
            f"({code.name} from its coordinator): send again")
    if code == ErrorCode.PRODUCER_FENCED:
        return error_reply(
            ErrorCode.INVALID_PRODUCER_EPOCH,
            f"producer {producer_id} of {transactional_id!r} is fenced by a newer one")
    if code == ErrorCode.TRANSACTION_ABORTABLE:
        return error_reply(
            ErrorCode.INVALID_TXN_STATE,
            f"{where} is not in an ongoing transaction of {transactional_id!r}: the batch "
            "came after its transaction ended, or before its partition was added")
    return error_reply(code, f"the transaction coordinator of {transactional_id!r} refused "
                             f"the batch for {where}: {code.name}")


class TransactionVerifier:
    """A leader replica's verifications and guards. `verify` is None where the replica has
    no coordinator to ask (a replica made outside a host): nothing is verified. Nor is a
    batch sent without its transactional id, as in Kafka: every transactional client sends
    it (Produce v3+), and so does the offset manager's write of a TxnOffsetCommit."""

    def __init__(self, verify: VerifyTransaction | None) -> None:
        self._verify = verify
        self._guards: dict[int, object] = {}
        # One question at a time per producer instance and guard: the batches it has in
        # flight to this partition wait for the same answer, but never for one asked before
        # the marker that dropped their guard's predecessor.
        self._asked: dict[tuple[str, int, int, object], asyncio.Future[ErrorCode]] = {}

    async def verify(self, transactional_id: str | None, producer_id: int,
                     producer_epoch: int, topic: str, partition: int
                     ) -> object | ErrorReply | None:
        """The producer's guard, once the coordinator said the partition is in its
        transaction; else the refusal. None where nothing is verified."""
        if self._verify is None or not transactional_id:
            return None
        guard = self._guards.setdefault(producer_id, object())
        key = (transactional_id, producer_id, producer_epoch, guard)
        asked = self._asked.get(key)
        if asked is None:
            asked = asyncio.ensure_future(self._verify(
                transactional_id, producer_id, producer_epoch, topic, partition))
            self._asked[key] = asked
            asked.add_done_callback(lambda done: self._forget(key, done))
        code = await asyncio.shield(asked)
        if code:
            return refusal(code, transactional_id, producer_id, topic, partition)
        return guard

    async def check(self, log: Log, header: BatchHeader, transactional_id: str | None,
                    topic: str, partition: int) -> object | ErrorReply | None:
        """None where the batch needs no verification (it is not transactional, or its
        transaction is open here already); else `verify`'s answer."""
        if not header.is_transactional or log.has_ongoing_transaction(
                header.producer_id, header.producer_epoch):
            return None
        return await self.verify(transactional_id, header.producer_id, header.producer_epoch,
                                 topic, partition)

    def refused_append(self, log: Log, header: BatchHeader, guard: object | None
                       ) -> ErrorReply | None:
        """Why a batch `check`ed under `guard` may not be appended now: a marker came since
        its verification began, and the producer has no transaction open here."""
        if guard is None or self.admits(header.producer_id, guard) or \
                log.has_ongoing_transaction(header.producer_id, header.producer_epoch):
            return None
        return error_reply(ErrorCode.INVALID_TXN_STATE, f"the transaction of producer "
                           f"{header.producer_id} ended while this batch was verified")

    def _forget(self, key: tuple[str, int, int, object], done: asyncio.Future[ErrorCode]) -> None:
        if self._asked.get(key) is done:
            del self._asked[key]

    def admits(self, producer_id: int, guard: object) -> bool:
        """Whether a batch verified under `guard` may still be appended: no marker came
        since the verification began."""
        return self._guards.get(producer_id) is guard

    def transaction_ended(self, producer_id: int) -> None:
        """A marker of the producer's was appended here: what was verified before it is
        not in the producer's next transaction."""
        self._guards.pop(producer_id, None)

    def clear(self) -> None:
        """A new leadership: guards of an earlier one mean nothing."""
        self._guards.clear()
