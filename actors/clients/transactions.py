"""A transactional producer's side of Kafka's transaction protocol (the idea of Kafka's
TransactionManager): its transactional id, the producer id and epoch its coordinator gave it,
the partitions of the current transaction, and the state it is in.

The coordinator is the broker that leads the id's `__transaction_state` partition; the
requests go to that broker's actor (`find_transaction_coordinator`, then `init_transactions`,
`add_partitions_to_transaction`, `end_transaction`), and each one that meets a retriable
error (the coordinator moving or loading, the previous transaction still ending) is asked
again, finding the coordinator anew where it moved, until max.block.ms.

States, as Kafka's producer names them: UNINITIALIZED until `init`, READY between
transactions, IN_TRANSACTION after `begin`, ABORTABLE_ERROR once a send of the transaction
failed (only an abort may follow), FATAL_ERROR once fenced (only closing may follow).
"""

from __future__ import annotations

import enum
import time
from collections.abc import Callable, Iterable
from typing import Any

import ray

from rafka.actors.errors import (
    CoordinatorNotAvailableError,
    InvalidProducerEpochError,
    InvalidTxnStateError,
    NotCoordinatorError,
    ProducerFencedError,
    RequestTimedOutError,
    error_for,
    is_retriable,
)
from rafka.actors.messages import ProducerIdAndEpoch
from rafka.actors.naming import broker_name

# Between two tries of a retriable request (Kafka's retry.backoff.ms for transactions).
RETRY_BACKOFF_S = 0.05


class TransactionState(enum.Enum):
    UNINITIALIZED = "UNINITIALIZED"
    READY = "READY"
    IN_TRANSACTION = "IN_TRANSACTION"
    ABORTABLE_ERROR = "ABORTABLE_ERROR"
    FATAL_ERROR = "FATAL_ERROR"


class TransactionManager:
    """One transactional id's producer id, epoch and current transaction."""

    def __init__(self, namespace: str, brokers: Callable[[], list[int]], transactional_id: str,
                 timeout_ms: int, max_block_ms: int) -> None:
        if not transactional_id:
            raise ValueError("transactional_id must be a non-empty string")
        self.namespace = namespace
        self._brokers = brokers
        self.transactional_id = transactional_id
        self.timeout_ms = timeout_ms
        self.max_block_ms = max_block_ms
        self.state = TransactionState.UNINITIALIZED
        self.producer_id = -1
        self.producer_epoch = -1
        # What the current transaction added: its partitions, and the groups it commits for.
        self.partitions: set[tuple[str, int]] = set()
        self.groups: set[str] = set()
        self.last_error: BaseException | None = None
        self._coordinator: Any = None

    # -------------------------------------------------------------------- requests

    def _ask(self, method: str, *args: Any) -> Any:
        """`method(*args)` on the coordinator's broker, until it answers without a retriable
        error or max.block.ms has passed; the typed error of a final refusal is raised."""
        deadline = time.monotonic() + self.max_block_ms / 1000
        last: BaseException | None = None
        while time.monotonic() < deadline:
            try:
                coordinator = self._coordinator or self._find_coordinator()
                reply = ray.get(getattr(coordinator, method).remote(*args),
                                timeout=max(deadline - time.monotonic(), 0.1))
            except Exception as error:  # the broker died or did not answer: find another
                if not is_retriable(error) and not isinstance(error, ray.exceptions.RayError):
                    raise
                last, self._coordinator = error, None
                time.sleep(RETRY_BACKOFF_S)
                continue
            reply_error = error_for(reply)
            if reply_error is None:
                return reply
            if not is_retriable(reply_error):
                raise reply_error
            last = reply_error
            if isinstance(reply_error, (CoordinatorNotAvailableError, NotCoordinatorError)):
                self._coordinator = None
            time.sleep(RETRY_BACKOFF_S)
        raise RequestTimedOutError(
            f"the transaction coordinator of {self.transactional_id!r} did not answer "
            f"{method} within max.block.ms ({self.max_block_ms} ms): last {last!r}")

    def _find_coordinator(self) -> Any:
        for broker in self._brokers():
            try:
                handle = ray.get_actor(broker_name(broker), namespace=self.namespace)
                reply = ray.get(handle.find_transaction_coordinator.remote(
                    self.transactional_id), timeout=10)
            except Exception:
                continue
            if error_for(reply) is None:
                try:
                    self._coordinator = ray.get_actor(broker_name(reply),
                                                      namespace=self.namespace)
                except ValueError:  # being started again: the next round finds it
                    continue
                return self._coordinator
        raise CoordinatorNotAvailableError(
            f"no broker named the transaction coordinator of {self.transactional_id!r}")

    # ------------------------------------------------------------------ the protocol

    def init(self) -> tuple[int, int]:
        """The producer id and epoch for this id; fences every older instance, and aborts the
        transaction one left open."""
        if self.state not in (TransactionState.UNINITIALIZED, TransactionState.READY):
            raise InvalidTxnStateError(f"init_transactions in state {self.state.value}")
        reply: ProducerIdAndEpoch = self._fenced_if(lambda: self._ask(
            "init_transactions", self.transactional_id, self.timeout_ms))
        self.producer_id, self.producer_epoch = reply
        self.state = TransactionState.READY
        return self.producer_id, self.producer_epoch

    def begin(self) -> None:
        self._require(TransactionState.READY, "begin_transaction")
        self.partitions, self.groups = set(), set()
        self.last_error = None
        self.state = TransactionState.IN_TRANSACTION

    def add_partitions(self, partitions: Iterable[tuple[str, int]]) -> None:
        """Make sure the coordinator counts these partitions in the transaction, before a batch
        of theirs is sent (AddPartitionsToTxn)."""
        new = set(partitions) - self.partitions
        if not new:
            return
        self._require(TransactionState.IN_TRANSACTION, "send")
        self._fenced_if(lambda: self._ask(
            "add_partitions_to_transaction", self.transactional_id, self.producer_id,
            self.producer_epoch, sorted(new)))
        self.partitions |= new

    def add_offsets(self, group_id: str) -> None:
        """The group's `__consumer_offsets` partition joins the transaction (AddOffsetsToTxn),
        before its offsets are committed in it."""
        self._require(TransactionState.IN_TRANSACTION, "send_offsets_to_transaction")
        self._fenced_if(lambda: self._ask(
            "add_offsets_to_transaction", self.transactional_id, self.producer_id,
            self.producer_epoch, group_id))
        self.groups.add(group_id)

    def end(self, commit: bool) -> None:
        """EndTxn. A commit needs the transaction free of failed sends; an abort is taken in
        any state but fatal."""
        if commit:
            self._require(TransactionState.IN_TRANSACTION, "commit_transaction")
        elif self.state not in (TransactionState.IN_TRANSACTION,
                                TransactionState.ABORTABLE_ERROR):
            raise InvalidTxnStateError(f"abort_transaction in state {self.state.value}")
        if self.partitions or self.groups:  # else the coordinator has nothing to end
            self._fenced_if(lambda: self._ask(
                "end_transaction", self.transactional_id, self.producer_id,
                self.producer_epoch, commit))
        self.partitions, self.groups = set(), set()
        self.state = TransactionState.READY

    def fail(self, error: BaseException) -> None:
        """A send of the transaction failed: only an abort may follow (fenced: nothing may)."""
        self.last_error = error
        if isinstance(error, InvalidProducerEpochError):  # ProducerFencedError is one
            self.state = TransactionState.FATAL_ERROR
        elif self.state is TransactionState.IN_TRANSACTION:
            self.state = TransactionState.ABORTABLE_ERROR

    def _require(self, state: TransactionState, operation: str) -> None:
        if self.state is TransactionState.FATAL_ERROR:
            raise ProducerFencedError(
                f"{operation}: this producer was fenced ({self.last_error}); close it")
        if self.state is TransactionState.ABORTABLE_ERROR:
            raise InvalidTxnStateError(
                f"{operation}: a send of this transaction failed ({self.last_error!r}); "
                "abort the transaction")
        if self.state is not state:
            raise InvalidTxnStateError(
                f"{operation} in state {self.state.value} (needs {state.value})")

    def _fenced_if(self, request: Callable[[], Any]) -> Any:
        try:
            return request()
        except ProducerFencedError as error:
            self.fail(error)
            raise
