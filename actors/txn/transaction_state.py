"""What the transaction coordinator knows of one transactional id, and how each request moves
it (the idea of Kafka's TransactionMetadata and its state transitions). Pure: the coordinator
(`actors/txn/coordinator.py`) writes each new state to `__transaction_state` before it acts on
it, and has the markers written.

States, as Kafka names them::

    Empty --AddPartitions--> Ongoing --EndTxn--> PrepareCommit --markers--> CompleteCommit
                                     \\--EndTxn/timeout--> PrepareAbort --markers--> CompleteAbort

A Complete state, or Empty, takes the next transaction. InitProducerId bumps the producer epoch,
which fences every older instance of the producer; called while a transaction is Ongoing, it
aborts that transaction first, with the bumped epoch (the markers then fence the old
instance in every partition it wrote to), and the client asks again once the abort is done.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from typing import NamedTuple

from rafka.actors.errors import ErrorCode
from rafka.actors.offsets_topic import offsets_partition
from rafka.common.sentinels import producer_epoch_exhausted

TRANSACTION_STATE_TOPIC = "__transaction_state"
# Kafka's default is 50; each partition replica costs rafka more (see `offsets_topic`).
DEFAULT_TRANSACTION_STATE_PARTITIONS = 3
TRANSACTION_STATE_TOPIC_CONFIG = {"cleanup.policy": "compact",
                                  "segment.bytes": str(16 * 1024 * 1024)}
# Kafka's transaction.max.timeout.ms: a producer may not ask for longer.
MAX_TRANSACTION_TIMEOUT_MS = 900_000

PartitionKey = tuple[str, int]


class TxnState(enum.Enum):
    EMPTY = "Empty"
    ONGOING = "Ongoing"
    PREPARE_COMMIT = "PrepareCommit"
    PREPARE_ABORT = "PrepareAbort"
    COMPLETE_COMMIT = "CompleteCommit"
    COMPLETE_ABORT = "CompleteAbort"

    @property
    def preparing(self) -> bool:
        return self in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT)

    @property
    def open_for_next(self) -> bool:
        """Whether a new transaction (or a new epoch) may start from this state."""
        return self in (TxnState.EMPTY, TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT)


@dataclass(frozen=True)
class TransactionMetadata:
    """One transactional id's producer and its current transaction."""

    transactional_id: str
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    state: TxnState = TxnState.EMPTY
    partitions: frozenset[PartitionKey] = field(default_factory=frozenset)
    # When the current transaction began (its first AddPartitions), -1 outside one.
    started_ms: int = -1
    updated_ms: int = -1

    def expired(self, now_ms: int) -> bool:
        """An Ongoing transaction its producer left for longer than its timeout."""
        return self.state is TxnState.ONGOING and now_ms - self.started_ms > self.timeout_ms

    @property
    def committing(self) -> bool:
        return self.state in (TxnState.PREPARE_COMMIT, TxnState.COMPLETE_COMMIT)


class Transition(NamedTuple):
    """A request's outcome: an error, or the state to write (None: nothing changes)."""

    error: ErrorCode
    new: TransactionMetadata | None = None

    @property
    def ok(self) -> bool:
        return self.error == ErrorCode.NONE


def check_producer(
    current: TransactionMetadata | None, producer_id: int, producer_epoch: int
) -> ErrorCode:
    """Whether a request of this producer instance may act on the transactional id."""
    if current is None or current.producer_id != producer_id:
        return ErrorCode.INVALID_PRODUCER_ID_MAPPING
    if current.producer_epoch != producer_epoch:
        return ErrorCode.PRODUCER_FENCED
    return ErrorCode.NONE


def init_producer_id(
    current: TransactionMetadata | None,
    transactional_id: str,
    timeout_ms: int,
    now_ms: int,
    new_producer_id: Callable[[], int],
    *,
    expected: tuple[int, int] | None = None,
) -> Transition:
    """InitProducerId with a transactional id: a producer id and a bumped epoch.

    ``expected``: the id and epoch the producer had (KIP-360, InitProducerId v3+), which must
    still be the current ones. Answered CONCURRENT_TRANSACTIONS while a transaction is being
    ended (an Ongoing one is aborted first: the write returned is that abort).
    """
    if not 0 < timeout_ms <= MAX_TRANSACTION_TIMEOUT_MS:
        return Transition(ErrorCode.INVALID_TRANSACTION_TIMEOUT)
    if current is None:
        return Transition(ErrorCode.NONE, TransactionMetadata(
            transactional_id, new_producer_id(), 0, timeout_ms, updated_ms=now_ms))
    if expected is not None and expected != (current.producer_id, current.producer_epoch):
        return Transition(ErrorCode.PRODUCER_FENCED)
    if current.state.preparing:
        return Transition(ErrorCode.CONCURRENT_TRANSACTIONS)
    if current.state is TxnState.ONGOING:
        # Fence the instance that left it open, then abort it; the client retries.
        return Transition(ErrorCode.CONCURRENT_TRANSACTIONS, prepare_end(
            _bumped(current, new_producer_id), commit=False, now_ms=now_ms))
    bumped = _bumped(current, new_producer_id)
    return Transition(ErrorCode.NONE, replace(
        bumped, timeout_ms=timeout_ms, state=TxnState.EMPTY, partitions=frozenset(),
        started_ms=-1, updated_ms=now_ms))


def _bumped(
    current: TransactionMetadata, new_producer_id: Callable[[], int]
) -> TransactionMetadata:
    if producer_epoch_exhausted(current.producer_epoch):
        return replace(current, producer_id=new_producer_id(), producer_epoch=0)
    return replace(current, producer_epoch=current.producer_epoch + 1)


def add_partitions(
    current: TransactionMetadata | None,
    producer_id: int,
    producer_epoch: int,
    partitions: Iterable[PartitionKey],
    now_ms: int,
) -> Transition:
    """AddPartitionsToTxn (and AddOffsetsToTxn, with the group's `__consumer_offsets`
    partition): the transaction is Ongoing and includes them."""
    error = check_producer(current, producer_id, producer_epoch)
    if error:
        return Transition(error)
    assert current is not None
    if current.state.preparing:
        return Transition(ErrorCode.CONCURRENT_TRANSACTIONS)
    wanted = current.partitions | frozenset(partitions)
    if current.state is TxnState.ONGOING and wanted == current.partitions:
        return Transition(ErrorCode.NONE)
    started = current.started_ms if current.state is TxnState.ONGOING else now_ms
    return Transition(ErrorCode.NONE, replace(
        current, state=TxnState.ONGOING, partitions=wanted, started_ms=started,
        updated_ms=now_ms))


def end_transaction(
    current: TransactionMetadata | None,
    producer_id: int,
    producer_epoch: int,
    commit: bool,
    now_ms: int,
) -> Transition:
    """EndTxn: an Ongoing transaction goes to PrepareCommit or PrepareAbort (the coordinator then
    has the markers written). A retry of an end already made is answered as it was."""
    error = check_producer(current, producer_id, producer_epoch)
    if error:
        return Transition(error)
    assert current is not None
    state = current.state
    if state is TxnState.ONGOING:
        return Transition(ErrorCode.NONE, prepare_end(current, commit=commit, now_ms=now_ms))
    same = (TxnState.PREPARE_COMMIT, TxnState.COMPLETE_COMMIT) if commit else (
        TxnState.PREPARE_ABORT, TxnState.COMPLETE_ABORT)
    if state in same:
        return Transition(ErrorCode.CONCURRENT_TRANSACTIONS if state.preparing
                          else ErrorCode.NONE)
    if state is TxnState.EMPTY and not commit:
        # Nothing was added: there is nothing to abort (Kafka's clients never ask).
        return Transition(ErrorCode.NONE)
    return Transition(ErrorCode.INVALID_TXN_STATE)


def prepare_end(current: TransactionMetadata, *, commit: bool, now_ms: int
                ) -> TransactionMetadata:
    return replace(current, state=TxnState.PREPARE_COMMIT if commit else TxnState.PREPARE_ABORT,
                   updated_ms=now_ms)


def expire(current: TransactionMetadata, now_ms: int,
           new_producer_id: Callable[[], int]) -> TransactionMetadata:
    """An expired transaction's abort, with the epoch bumped so that its producer, if it comes
    back, is fenced (transaction.timeout.ms)."""
    return prepare_end(_bumped(current, new_producer_id), commit=False, now_ms=now_ms)


def complete(current: TransactionMetadata, now_ms: int) -> TransactionMetadata:
    """Every marker of a prepared end is written."""
    assert current.state.preparing, current
    return replace(
        current,
        state=TxnState.COMPLETE_COMMIT if current.committing else TxnState.COMPLETE_ABORT,
        partitions=frozenset(), started_ms=-1, updated_ms=now_ms)



def verify_partitions(
    current: TransactionMetadata | None, producer_id: int, producer_epoch: int,
    partitions: Iterable[PartitionKey],
) -> ErrorCode | dict[PartitionKey, ErrorCode]:
    """KIP-890's verification, asked by a partition leader before it takes a transactional
    producer's first batch of a transaction (AddPartitionsToTxn v4+ with `verify_only`): an
    error for the whole request, or each partition's: NONE where the partition is in the
    producer's Ongoing transaction, TRANSACTION_ABORTABLE where it is not (a batch sent
    after its transaction ended, or before its partition was added). A transaction being
    ended is CONCURRENT_TRANSACTIONS: its markers are on their way, and the batch can only
    belong to the next one."""
    error = check_producer(current, producer_id, producer_epoch)
    if error:
        return error
    assert current is not None
    if current.state.preparing:
        return ErrorCode.CONCURRENT_TRANSACTIONS
    ongoing = current.state is TxnState.ONGOING
    return {partition: ErrorCode.NONE if ongoing and partition in current.partitions
            else ErrorCode.TRANSACTION_ABORTABLE for partition in partitions}

# --------------------------------------------------------------- in `__transaction_state`
# (its records' format: `actors/txn/transaction_log.py`)

# The state names Kafka's ListTransactions knows: rafka's, and two it never reaches (a Kafka
# coordinator's transient epoch fence, and an id expired and about to be removed).
KAFKA_STATE_NAMES = frozenset({state.value for state in TxnState} | {"Dead", "PrepareEpochFence"})


def select_listed(transactions: Iterable[TransactionMetadata], state_filters: Iterable[str],
                  producer_id_filters: Iterable[int], duration_filter_ms: int, now_ms: int,
                  ) -> tuple[list[str], list[TransactionMetadata]]:
    """Kafka's ListTransactions filters: `(the state filters it does not know, the
    transactions chosen)`. A transaction is chosen when it is in one of the states named (any,
    if none is named), of one of the producers named (any, if none), and, where the duration
    filter is not negative, has run longer than it."""
    states = set(state_filters)
    producers = set(producer_id_filters)
    unknown = sorted(states - KAFKA_STATE_NAMES)
    chosen = [t for t in transactions
              if (not states or t.state.value in states)
              and (not producers or t.producer_id in producers)
              and (duration_filter_ms < 0 or now_ms - t.started_ms > duration_filter_ms)]
    return unknown, chosen


def transaction_state_partition(transactional_id: str, num_partitions: int) -> int:
    """The `__transaction_state` partition whose leader coordinates ``transactional_id``
    (Kafka's formula, the one that places a group's offsets)."""
    return offsets_partition(transactional_id, num_partitions)
