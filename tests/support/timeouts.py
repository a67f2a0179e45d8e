"""pytest-timeout's signal method, made to end a test that waits on a Spark job.

A test blocked in a Spark action waits inside py4j for the JVM's answer. pytest-timeout's
SIGALRM handler raises there, which leaves the thread's py4j connection expecting an answer
that is still to come: the test then hangs in its next call into the JVM (pyspark makes one as
the exception unwinds) for as long as the job runs, and one whose executors are gone runs
forever. So on timeout, when Spark has a job running, the handler cancels every job from a
thread of its own (its own py4j connection) and returns: the action fails at once with Spark's
"cancelled" error, which fails the test, and the session's Spark stays usable for the next
test. A test still running a grace period later is failed as pytest-timeout would.
"""

from __future__ import annotations

import signal
import sys
import threading

import pytest
import pytest_timeout

# Time for a cancelled action to return before the test is failed the ordinary way.
CANCEL_GRACE_S = 60


def active_spark_context():
    """The driver's SparkContext, if this process has started one (never imports pyspark)."""
    pyspark = sys.modules.get("pyspark")
    return pyspark.SparkContext._active_spark_context if pyspark else None


def cancel_running_spark_jobs(item: pytest.Item) -> bool:
    """Cancel every running Spark job; whether there was one."""
    context = active_spark_context()
    if context is None:
        return False
    found: list[bool] = []

    def cancel() -> None:
        if context.statusTracker().getActiveJobsIds():
            found.append(True)
            context.cancelAllJobs()

    canceller = threading.Thread(target=cancel, name="timeout-cancels-spark", daemon=True)
    canceller.start()
    canceller.join(30)
    if found:
        item.config.get_terminal_writer().line(
            f"{item.nodeid}: timed out in a Spark job; every running job cancelled")
    return bool(found)


def set_timer(item: pytest.Item, settings) -> bool | None:
    """pytest-timeout's `signal` method with the Spark step above; other methods are its own."""
    if settings.method != "signal" or threading.current_thread() is not threading.main_thread():
        return None

    def fail(signum, frame) -> None:
        __tracebackhide__ = True
        pytest_timeout.timeout_sigalrm(item, settings)

    def on_timeout(signum, frame) -> None:
        __tracebackhide__ = True
        if cancel_running_spark_jobs(item):
            signal.signal(signal.SIGALRM, fail)
            signal.setitimer(signal.ITIMER_REAL, CANCEL_GRACE_S)
            pytest_timeout.dump_stacks(item.config.get_terminal_writer())
            return
        fail(signum, frame)

    def cancel() -> None:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, signal.SIG_DFL)

    item.cancel_timeout = cancel  # pytest-timeout's own cancel hook calls it
    signal.signal(signal.SIGALRM, on_timeout)
    signal.setitimer(signal.ITIMER_REAL, settings.timeout)
    return True
