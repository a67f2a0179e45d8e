"""Run by test_cleanup.py in a pytest of its own (the name keeps it out of the main run).

It starts the whole stack through the session fixtures, then writes down every process the
test session has started, so the outer test can check that none outlives the session.
"""

from __future__ import annotations

import json
import os

import psutil


def test_record_processes_of_the_full_stack(zookeeper, zk_client, ray_namespace, spark) -> None:
    assert spark.range(10).count() == 10
    assert zk_client.connected
    # Ray's raylet starts its workers itself; they are children of the raylet, listed here.
    report = []
    for process in psutil.Process().children(recursive=True):
        try:
            report.append({"pid": process.pid, "create_time": process.create_time(),
                           "cmdline": " ".join(process.cmdline())})
        except (psutil.NoSuchProcess, psutil.ZombieProcess):
            continue  # exited between the listing and the look: nothing left to stop
    with open(os.environ["RAFKA_PROCESS_REPORT"], "w") as out:
        json.dump({"zookeeper": zookeeper.pid, "processes": report}, out)
