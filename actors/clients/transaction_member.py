"""A producer that sends into a transaction another process began: the writer of each Spark
task of the transactional sink (`rafka.pipelines.transactional_sink`).

Kafka's transaction protocol names a transaction by its producer id and epoch, not by a
connection: any process that holds them can send batches of the transaction, and the leaders
count them in it, as the coordinator counts the partitions the transaction's owner added. So the
owner (the Spark driver) begins the transaction and adds its partitions, the members (the tasks)
send with the owner's id and epoch, and only the owner commits or aborts.

One rule makes this sound: a partition takes the transaction's batches from one member only,
since a leader checks the sequence numbers of an id and epoch, and two members numbering the same
partition from 0 would collide. Before its first send to a partition, a member makes sure no
earlier member wrote there under this epoch: one that did failed, and its transaction must be
aborted, not added to.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from rafka.actors.clients.producer import Producer, SentRecords
from rafka.actors.clients.sequenced_producer import describe_producer
from rafka.actors.clients.transactions import TransactionManager, TransactionState
from rafka.actors.errors import InvalidTxnStateError, RequestTimedOutError

if TYPE_CHECKING:  # pyarrow is slow to import; the columns come from a caller that has it
    import pyarrow as pa

# Between two rounds of DescribeProducers while a leader has not answered.
_POLL_S = 0.05


class JoinedTransaction(TransactionManager):
    """The transaction a member sends in: its id and epoch and the partitions its owner added
    are given; beginning, adding and ending it are the owner's."""

    def __init__(self, transactional_id: str, producer_id: int, producer_epoch: int,
                 partitions: Iterable[tuple[str, int]]) -> None:
        super().__init__("", list, transactional_id, timeout_ms=0, max_block_ms=0)
        self.producer_id, self.producer_epoch = producer_id, producer_epoch
        self.partitions = set(partitions)
        self.state = TransactionState.IN_TRANSACTION

    def add_partitions(self, partitions: Iterable[tuple[str, int]]) -> None:
        outside = set(partitions) - self.partitions
        if outside:
            raise InvalidTxnStateError(
                f"{sorted(outside)} are not in transaction {self.transactional_id!r}: its "
                "owner adds every partition before its members send")

    def init(self) -> tuple[int, int]:
        raise InvalidTxnStateError("a member of a transaction does not start one")

    def begin(self) -> None:
        raise InvalidTxnStateError("a member of a transaction does not begin one")

    def end(self, commit: bool) -> None:
        raise InvalidTxnStateError("only the transaction's owner commits or aborts it")


class TransactionMemberProducer(Producer):
    """`Producer` sending the batches of `transaction` (acks=all, idempotent, its sequences from
    0 in each partition under the transaction's epoch)."""

    def __init__(self, namespace: str, transaction: JoinedTransaction, **config: Any) -> None:
        super().__init__(namespace, acks="all", enable_idempotence=True, **config)
        with self._lock:  # nothing is queued yet: as init_transactions does
            self.transactions = self._sender.transactions = transaction
            self.producer_id = transaction.producer_id
            self._accumulator.start_epoch(transaction.producer_epoch)
        self._claimed: set[tuple[str, int]] = set()

    def send_columns(self, topic: str, values: pa.Array, keys: pa.Array | None = None, *,
                     partition: int, headers: pa.Array | None = None) -> SentRecords:
        """`Producer.send_columns`, after making sure, at a partition's first send, that no
        earlier member wrote to it in this transaction (see the module docstring)."""
        if (topic, partition) not in self._claimed:
            self._claim(topic, partition)
            self._claimed.add((topic, partition))
        return super().send_columns(topic, values, keys, partition=partition, headers=headers)

    def _claim(self, topic: str, partition: int) -> None:
        """`InvalidTxnStateError` if `topic-partition` holds batches of this transaction
        already: an earlier attempt of this member failed, and the transaction with it."""
        transaction = self.transactions
        assert isinstance(transaction, JoinedTransaction)
        deadline = time.monotonic() + self.config.max_block_ms / 1000
        while True:
            answer = describe_producer(self.metadata, topic, [partition],
                                       self.producer_id).get(partition)
            if answer is not None:
                break
            if time.monotonic() > deadline:
                raise RequestTimedOutError(
                    f"the leader of {topic}-{partition} did not answer DescribeProducers "
                    f"within max.block.ms ({self.config.max_block_ms} ms)")
            time.sleep(_POLL_S)
        if answer.producer_epoch == transaction.producer_epoch and answer.last_sequence >= 0:
            raise InvalidTxnStateError(
                f"{topic}-{partition} already holds batches of transaction "
                f"{transaction.transactional_id!r} (epoch {answer.producer_epoch}) from an "
                "earlier attempt of this member: abort the transaction and run it again")
