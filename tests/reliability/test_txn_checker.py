"""The transactional checker itself, on histories made by hand: each anomaly is caught, and the
histories that look like one but are legitimate are not."""

from __future__ import annotations

from tests.support.txn_checker import (
    Outcome,
    Transaction,
    TxnHistory,
    check_transactions,
    read_progress,
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


def test_a_live_readers_progress_and_its_unexplained_errors() -> None:
    progress_history = history()
    # c1 read t1 (committed) in part only: no committed transaction read whole yet.
    assert read_progress(progress_history, "c1", 5).committed_read_whole == 0
    progress_history.reads["c1"] = list(progress_history.final_read)
    progress_history.faults = [(10.0, 12.0)]
    progress_history.read_errors["c1"] = [(11.0, "BrokerUnavailableError"),
                                          (16.0, "NotLeaderError"),
                                          (30.0, "RequestTimedOutError")]
    progress = read_progress(progress_history, "c1", explained_within_s=5)
    assert (progress.records, progress.committed_read_whole, progress.committed) == (6, 1, 1)
    assert progress.read_fraction == 1.0
    assert progress.errors == {"BrokerUnavailableError": 1, "NotLeaderError": 1,
                               "RequestTimedOutError": 1}
    # During the fault, and 4 s after its heal: explained. 18 s after: not.
    assert progress.unexplained_errors == [(30.0, "RequestTimedOutError")]
    assert read_progress(progress_history, "nobody", 5).read_fraction == 0.0
