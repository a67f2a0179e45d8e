"""The transactional checker itself, on histories made by hand: each anomaly is caught, and the
histories that look like one but are legitimate are not."""

from __future__ import annotations

from tests.support.txn_checker import (
    Outcome,
    Transaction,
    TxnHistory,
    check_transactions,
    txn_value,
)


def transaction(name: str, outcome: Outcome, size: int = 3) -> Transaction:
    return Transaction(name, [txn_value(name, i) for i in range(size)], outcome)


def history() -> TxnHistory:
    """t1 committed, t2 aborted, t3 unknown and in fact committed, t4 unknown and not."""
    transactions = [transaction("t1", Outcome.COMMITTED), transaction("t2", Outcome.ABORTED),
                    transaction("t3", Outcome.UNKNOWN), transaction("t4", Outcome.UNKNOWN)]
    everything = transactions[0].values + transactions[2].values
    return TxnHistory(transactions, reads={"c1": everything[:2]}, final_read=list(everything))


def test_a_clean_history_passes_unknown_outcomes_whole_or_absent() -> None:
    verdict = check_transactions(history())
    assert verdict.total == 0, verdict


def test_a_record_of_an_aborted_transaction_read_is_an_aborted_read() -> None:
    clean = history()
    clean.reads["c2"] = [txn_value("t2", 1)]
    assert check_transactions(clean).aborted_reads == [txn_value("t2", 1)]


def test_part_of_a_transaction_is_torn_and_a_missing_committed_record_lost() -> None:
    partial = history()
    partial.final_read.remove(txn_value("t3", 0))  # unknown: torn if partly there
    partial.final_read.remove(txn_value("t1", 2))  # committed: lost
    verdict = check_transactions(partial)
    assert verdict.torn == ["t3"] and verdict.lost == ["t1"]


def test_a_record_read_twice_or_sent_by_no_transaction_is_caught() -> None:
    doubled = history()
    doubled.final_read.append(txn_value("t1", 0))
    doubled.reads["c1"].append(b"stranger/0")
    verdict = check_transactions(doubled)
    assert verdict.duplicates == [("final", txn_value("t1", 0))]
    assert verdict.unknown_records == [b"stranger/0"]
    assert verdict.total == 2
