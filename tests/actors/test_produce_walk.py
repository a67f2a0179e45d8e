"""The produce walk: how many of rafka's source files a record passes through, from
`Producer.send` to the leader's log and back to the caller's future.

Each file on the path is one more that a reader must hold in mind to follow a produce request,
so the count is kept from climbing back up. It is taken as a reader would follow the walk: every
rafka source file with a function that ran, in the producer's process (the caller's thread and
the sender's) and in the leader's replica host (its event loop, where the data port and the
replica run), for one record sent once metadata and connections are warm. The log store's own
files count as one, the log: how a `Log` appends is a walk of its own (docs/storage.md).
"""

from __future__ import annotations

import asyncio
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import ray
import ray.cloudpickle

ROOT = Path(__file__).resolve().parent.parent.parent
# rafka's source: the front door and the layers (`rafka/<layer>` links to `<layer>/`).
SOURCE_FOLDERS = frozenset({"rafka", "common", "logstore", "coordination", "wire", "actors",
                            "pipelines", "cli"})
# The walk passed 15 files (the log one of them) while the data port was spread over four
# modules; 13 since it is one package and a success is read without the error helpers; 14 since
# the producer's sender thread (Kafka's Sender) is its own module, actors/clients/sender.py,
# beside the producer's API in producer.py.
MOST_FILES = 14

# The functions below run inside the replica host too: shipped by value, not by import.
ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])


class FileRecorder:
    """A profile hook that notes the rafka source files whose functions are called, while on."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.on = False
        self.files: set[str] = set()

    def __call__(self, frame: Any, event: str, _arg: Any) -> None:
        if self.on and event == "call":
            name = _source_file(self.root, frame.f_code.co_filename)
            if name is not None:
                self.files.add(name)


def _source_file(root: Path, filename: str) -> str | None:
    """A rafka source file's path from the tree's root (None for the standard library,
    third-party packages, the tests and the benchmarks)."""
    try:
        path = Path(filename).resolve().relative_to(root)
    except ValueError:
        return None
    return str(path) if path.parts[0] in SOURCE_FOLDERS and path.suffix == ".py" else None


def _toggle_in_host(actor: Any, root: str, on: bool) -> list[str]:
    """Run inside the host (`__ray_call__`): record on its running event loops' threads, where
    its requests run, from now on; or stop and hand back what was recorded."""
    loops = _loops_of(actor)
    if on:
        recorder = actor._walk_recorder = FileRecorder(Path(root))
        recorder.on = True
        hook: FileRecorder | None = recorder
    else:
        recorder, hook = actor.__dict__.pop("_walk_recorder"), None
    for loop in loops:
        done = threading.Event()

        def set_hook(done: threading.Event = done) -> None:
            sys.setprofile(hook)
            done.set()

        loop.call_soon_threadsafe(set_hook)
        done.wait(10)
    return sorted(recorder.files) if not on else []


def _loops_of(actor: Any) -> set[asyncio.AbstractEventLoop]:
    """The event loops the host's tasks, futures and servers run on (Ray's async actor has one
    for its requests), found among its attributes and theirs."""
    loops = set()
    for value in vars(actor).values():
        for candidate in [value, *getattr(value, "__dict__", {}).values()]:
            if isinstance(candidate, asyncio.Future | asyncio.AbstractServer):
                loops.add(candidate.get_loop())
    return loops


def test_a_produce_passes_few_files(start_cluster: Callable[..., Any]) -> None:
    cluster = start_cluster(1)
    cluster.create_topic("walk", partitions=1, replication_factor=1)
    (host,) = cluster.replica_hosts("walk", 0).values()
    recorder = FileRecorder(ROOT)
    # Threads started from now on (the producer's sender) carry the hook; it records only
    # while on.
    threading.setprofile(recorder)
    try:
        producer = cluster.producer(acks=1, linger_ms=0)
        producer.send("walk", value=b"warm").result(timeout=30)  # metadata and connection
        ray.get(host.__ray_call__.remote(_toggle_in_host, str(ROOT), True))
        sys.setprofile(recorder)
        recorder.on = True
        producer.send("walk", value=b"walked").result(timeout=30)
        recorder.on = False
        sys.setprofile(None)
        host_files = ray.get(host.__ray_call__.remote(_toggle_in_host, str(ROOT), False))
        producer.close()
    finally:
        threading.setprofile(None)  # type: ignore[arg-type]
        sys.setprofile(None)
    walk = sorted({"logstore" if name.startswith("logstore/") else name
                   for name in recorder.files | set(host_files)})
    # It reached the log, and came back to the producer.
    assert any(name.startswith("logstore/") for name in host_files), (host_files, walk)
    assert any(name.endswith("producer.py") for name in recorder.files), walk
    assert "actors/clients/sender.py" in recorder.files, walk
    assert len(walk) <= MOST_FILES, f"the produce walk passes {len(walk)} files: {walk}"
