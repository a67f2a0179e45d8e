"""The checker of transactional histories (pure): what transactional producers sent and how each
transaction ended, and what read_committed consumers read, judged for the anomalies
transactions must rule out.

- **aborted read**: a record of a transaction its producer aborted was read by read_committed;
- **torn transaction**: a complete read (a consumer that read every partition to its end once
  the writers had stopped) holds some of a transaction's records but not all;
- **lost commit**: a transaction whose commit returned has a record that complete read lacks;
- **duplicate**: a record read twice by one consumer;
- **unknown record**: a record no transaction sent (a checker that cannot place a record
  cannot vouch for it).

A transaction whose commit raised is *unknown*: it may have committed or not, but all of it or
none of it (torn applies), never part. Records are identified by their values, which name the
transaction and the record's place in it: `txn_value`.

`read_progress` says how far a live read_committed reader got and which of its errors no fault
explains: a reader that swallows every error and reads nothing would pass the checks above.
"""

from __future__ import annotations

import enum
from collections import Counter
from dataclasses import dataclass, field


class Outcome(enum.Enum):
    COMMITTED = "committed"
    ABORTED = "aborted"
    UNKNOWN = "unknown"  # the commit raised: it may or may not have happened


def txn_value(transaction: str, index: int) -> bytes:
    """The value of a transaction's `index`-th record."""
    return f"{transaction}/{index}".encode()


def transaction_of(value: bytes) -> str:
    return value.decode().rsplit("/", 1)[0]


@dataclass
class Transaction:
    name: str
    values: list[bytes]
    outcome: Outcome


@dataclass
class TxnHistory:
    transactions: list[Transaction] = field(default_factory=list)
    # What each read_committed consumer read while the writers ran, in order.
    reads: dict[str, list[bytes]] = field(default_factory=dict)
    # What one consumer read of every partition, to its end, after the writers stopped.
    final_read: list[bytes] = field(default_factory=list)
    # What each live reader's polls raised: (when, the error's class name).
    read_errors: dict[str, list[tuple[float, str]]] = field(default_factory=dict)
    # When each fault began and when it was healed, on the clock of `read_errors`.
    faults: list[tuple[float, float]] = field(default_factory=list)


@dataclass
class TxnVerdict:
    aborted_reads: list[bytes] = field(default_factory=list)
    torn: list[str] = field(default_factory=list)
    lost: list[str] = field(default_factory=list)
    duplicates: list[tuple[str, bytes]] = field(default_factory=list)
    unknown_records: list[bytes] = field(default_factory=list)

    @property
    def total(self) -> int:
        return (len(self.aborted_reads) + len(self.torn) + len(self.lost)
                + len(self.duplicates) + len(self.unknown_records))

    def summary(self) -> dict[str, int]:
        return {"aborted_reads": len(self.aborted_reads), "torn_transactions": len(self.torn),
                "lost_commits": len(self.lost), "duplicates": len(self.duplicates),
                "unknown_records": len(self.unknown_records)}


def check_transactions(history: TxnHistory) -> TxnVerdict:
    verdict = TxnVerdict()
    by_name = {t.name: t for t in history.transactions}
    readers = {**history.reads, "final": history.final_read}
    for reader, values in readers.items():
        for value, count in Counter(values).items():
            if count > 1:
                verdict.duplicates.append((reader, value))
            transaction = by_name.get(transaction_of(value))
            if transaction is None or value not in transaction.values:
                verdict.unknown_records.append(value)
            elif transaction.outcome is Outcome.ABORTED:
                verdict.aborted_reads.append(value)
    final = set(history.final_read)
    for transaction in history.transactions:
        seen = sum(value in final for value in transaction.values)
        if transaction.outcome is Outcome.COMMITTED and seen < len(transaction.values):
            verdict.lost.append(transaction.name)
        elif 0 < seen < len(transaction.values):
            verdict.torn.append(transaction.name)
    return verdict


@dataclass
class ReadProgress:
    """How far one live reader got: the committed transactions it read whole, of all those
    committed; its errors by kind, and those that came neither during a fault nor soon after
    its heal (`explained_within_s`)."""

    records: int
    committed_read_whole: int
    committed: int
    errors: dict[str, int]
    unexplained_errors: list[tuple[float, str]]

    @property
    def read_fraction(self) -> float:
        return self.committed_read_whole / self.committed if self.committed else 0.0

    def summary(self) -> dict[str, object]:
        return {"records": self.records, "committed_read_whole": self.committed_read_whole,
                "committed": self.committed, "errors": self.errors,
                "unexplained_errors": self.unexplained_errors[:10]}


def read_progress(history: TxnHistory, reader: str, explained_within_s: float) -> ReadProgress:
    read = set(history.reads.get(reader, []))
    committed = [t for t in history.transactions if t.outcome is Outcome.COMMITTED]
    errors = history.read_errors.get(reader, [])
    unexplained = [(at, kind) for at, kind in errors
                   if not any(began <= at <= healed + explained_within_s
                              for began, healed in history.faults)]
    return ReadProgress(
        records=len(history.reads.get(reader, [])),
        committed_read_whole=sum(all(v in read for v in t.values) for t in committed),
        committed=len(committed),
        errors=dict(Counter(kind for _at, kind in errors)),
        unexplained_errors=unexplained,
    )

