"""How rafka scales with the number of partitions: create time, memory, idle CPU, failover.

    python bench/scale.py [--partitions 100,1000] [--brokers 3] [--idle-seconds 20]
        [--phases create,memory,idle,failover] [--broker-config key=value ...]
        [--data-dir DIR] [--plot out.png]

Prints one JSON object on stdout at the end (progress and Ray's logs go to stderr). One cluster
(``--brokers`` brokers, embedded ZooKeeper, local Ray; start-up not timed) gets one topic per
size in ``--partitions`` (``scale-<size>``, replication factor ``--replication-factor``, 3), so
the partitions accumulate: with the defaults the cluster ends up holding 1,100 partitions. Only
the public API is used (``Cluster``, its producer and consumer, ``describe_topic``); processes
are found as descendants of this one (Ray's GCS, raylet, agents and workers, ZooKeeper's JVM).

Phases (``--phases``, all by default; the topics are created whatever is selected):

* ``create``: time of ``create_topic`` (which returns once every partition has a leader) for
  each size, then of one ``acks=all`` record to every partition of that topic (first ``send``
  to the last future resolved, one producer for all topics).
* ``memory``: after each creation and at the end, the PSS (``/proc/<pid>/smaps_rollup``) summed
  over every process of the cluster: Ray's processes (GCS, raylet, dashboard, agents, every
  worker) and, separately, ZooKeeper's JVM. The driver (this process: the clients, the
  admin's ZooKeeper connection) is reported on its own and counted in no total.
* ``idle``: CPU time (user + system) of the same processes over ``--idle-seconds`` (20) with
  nothing being sent, after ``--settle-seconds`` (5) of quiet, as a percentage of one core.
* ``failover``: a thread sends numbered records round-robin over every partition of the biggest
  topic (``acks=all``, idempotent, default retries; ``--failover-rate`` records/s). Once a full
  round is acknowledged, the broker leading the most partitions of that topic is killed
  (``kill_broker``) and ``describe_topic`` is polled until each partition it led has another
  leader. Per-partition times run from just before ``kill_broker`` to the end of the first poll
  that showed the new leader (an upper bound; the poll before gives a lower bound, and the poll
  durations, which grow with the partition count, are reported; ``--leader-source zookeeper``
  reads the leaders from ZooKeeper alone, for a finer resolution). After ``--tail-seconds`` more
  of sending, the producer is flushed and every partition read back from the beginning: every
  acknowledged record must be at the offset it was acknowledged with (``lost``), and no number
  may appear twice (``duplicated``). ``--restart-broker`` then restarts the broker and times
  its return to every ISR.

Targets (the scale issue), each with ``pass``: total PSS of the cluster (Ray + ZooKeeper) under
6 GiB with 1,000 partitions RF 3; idle CPU under 10 % of one core; creating 100 partitions under
10 s and 1,000 under 60 s (judged only when a topic of exactly that size was created); failover
max within ``zookeeper.session.timeout.ms`` + 5 s; no acknowledged record lost. Memory and idle
CPU carry ``at_target_scale``: whether the cluster held at least 1,000 partitions at RF 3.

The cluster is always shut down (and any of its processes left after that stopped by pid); the
run is abandoned when the machine's available memory falls below ``--min-available-gib``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import re
import shutil
import signal
import statistics
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

_HERE = Path(__file__).resolve().parent
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != _HERE]
sys.path.insert(0, str(_HERE.parent))

import psutil  # noqa: E402
import ray  # noqa: E402

from bench.common import deadline, pyplot  # noqa: E402
from rafka import Cluster  # noqa: E402

PHASES = ("create", "memory", "idle", "failover")
MIB = 1024 * 1024
GIB = 1024 * MIB

TARGET_MEMORY_BYTES = 6 * GIB
TARGET_MEMORY_PARTITIONS = 1_000
TARGET_IDLE_PERCENT = 10.0
TARGET_CREATE_SECONDS = {100: 10.0, 1_000: 60.0}
FAILOVER_MARGIN_S = 5.0
DEFAULT_SESSION_TIMEOUT_MS = 6_000
SESSION_TIMEOUT_KEY = "zookeeper.session.timeout.ms"

_STARTED = time.monotonic()


def log(message: str) -> None:
    print(f"[scale +{time.monotonic() - _STARTED:7.1f}s] {message}", file=sys.stderr, flush=True)


def _median(values: list[float]) -> float | None:
    return round(statistics.median(values), 3) if values else None


def _max(values: list[float]) -> float | None:
    return round(max(values), 3) if values else None


class GuardTripped(BaseException):
    """Raised in the main thread by `MemoryGuard`; not an Exception, so that no phase's error
    handling swallows it and goes on."""


class MemoryGuard:
    """Abandon the run before the machine runs out of memory: while active, a thread checks
    MemAvailable every second and, below `min_available_bytes`, raises MemoryError in the main
    thread (through SIGUSR1), whose finally shuts the cluster down. A design with one process
    per replica needs about 200 GB for 1,100 partitions RF 3; this stops it in time."""

    def __init__(self, min_available_bytes: int) -> None:
        self.min_available_bytes = min_available_bytes
        self.tripped: str | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._previous: Any = None

    def __enter__(self) -> MemoryGuard:
        if self.min_available_bytes <= 0:
            return self

        def trip(_signum: int, _frame: Any) -> None:
            raise GuardTripped(self.tripped or "memory guard")

        self._previous = signal.signal(signal.SIGUSR1, trip)
        self._thread = threading.Thread(target=self._watch, name="memory-guard", daemon=True)
        self._thread.start()
        return self

    def _watch(self) -> None:
        while not self._stop.wait(1.0):
            available = psutil.virtual_memory().available
            if available < self.min_available_bytes:
                self.tripped = (f"only {available / GIB:.2f} GiB of memory left (below "
                                f"--min-available-gib {self.min_available_bytes / GIB:.2f}): "
                                "run abandoned")
                log(self.tripped)
                os.kill(os.getpid(), signal.SIGUSR1)
                return

    def check(self) -> None:
        """Raise GuardTripped if the guard has tripped: its signal may have been raised inside
        a C extension call, which turns it into a SystemError that a phase caught."""
        if self.tripped is not None:
            raise GuardTripped(self.tripped)

    def __exit__(self, *exc_info: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5)
            signal.signal(signal.SIGUSR1, self._previous)


# ---------------------------------------------------------------------------------- processes


def _smaps_rollup(pid: int) -> dict[str, int] | None:
    """Pss, Rss, Uss (private), SwapPss of `pid` in bytes, from /proc/<pid>/smaps_rollup (psutil
    where that file is missing); None if the process is gone or unreadable."""
    try:
        text = Path(f"/proc/{pid}/smaps_rollup").read_text()
    except FileNotFoundError:
        text = None
    except (PermissionError, ProcessLookupError, OSError):
        return None
    if text is None:
        try:
            info = psutil.Process(pid).memory_full_info()
        except (psutil.Error, OSError):
            return None
        return {"pss": getattr(info, "pss", info.rss), "rss": info.rss,
                "uss": getattr(info, "uss", 0), "swap_pss": getattr(info, "swap", 0)}
    fields: dict[str, int] = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) >= 2 and parts[0].endswith(":") and parts[1].isdigit():
            fields[parts[0][:-1]] = int(parts[1]) * 1024
    if "Pss" not in fields:
        return None
    return {"pss": fields["Pss"], "rss": fields.get("Rss", 0),
            "uss": fields.get("Private_Clean", 0) + fields.get("Private_Dirty", 0),
            "swap_pss": fields.get("SwapPss", 0)}


def _title(proc: psutil.Process) -> str:
    """A short label of a process: Ray's process title (ray::Broker, ray::IDLE, ...) without the
    method it is running, else the executable or script name."""
    try:
        cmdline = proc.cmdline()
        name = proc.name()
    except (psutil.Error, OSError):
        return "?"
    first = cmdline[0] if cmdline else name
    if first.startswith("ray::"):
        return re.split(r"[.( ]", first, maxsplit=1)[0]
    for arg in cmdline[1:3]:
        if arg.endswith(".py"):
            return Path(arg).name
    return name or Path(first).name


class ClusterProcesses:
    """The processes this benchmark's cluster runs: every descendant of this process (Ray's
    GCS, raylet, dashboard, agents and workers; ZooKeeper's JVM), plus any process that names
    the Ray session's directory but was re-parented away. Each is sorted into a group:
    raylet, gcs_server, ray_workers (children of a raylet other than its agents),
    ray_agents, ray_other (dashboard, monitors) and zookeeper."""

    RAY_GROUPS = ("raylet", "gcs_server", "ray_workers", "ray_agents", "ray_other")

    def __init__(self, zookeeper_pid: int | None) -> None:
        self.zookeeper_pid = zookeeper_pid
        self.me = psutil.Process()
        # Every process seen, by (pid, create time): what shutdown must have stopped.
        self.seen: dict[tuple[int, float], psutil.Process] = {}
        self.session_dir: str | None = None

    def scan(self) -> dict[int, tuple[psutil.Process, str, str]]:
        """pid -> (process, group, title) of every live process of the cluster now."""
        procs: dict[int, psutil.Process] = {}
        with contextlib.suppress(psutil.Error):
            for proc in self.me.children(recursive=True):
                procs[proc.pid] = proc
        if self.session_dir is None:
            for proc in procs.values():
                with contextlib.suppress(psutil.Error):
                    match = re.search(r"(/[^ =]*/session_[^/ ]+)", " ".join(proc.cmdline()))
                    if match:
                        self.session_dir = match.group(1)
                        break
        if self.session_dir:
            for proc in psutil.process_iter():
                if proc.pid in procs or proc.pid == self.me.pid:
                    continue
                with contextlib.suppress(psutil.Error):
                    if self.session_dir in " ".join(proc.cmdline()):
                        procs[proc.pid] = proc
                        for child in proc.children(recursive=True):
                            procs.setdefault(child.pid, child)
        raylets = set()
        for pid, proc in procs.items():
            with contextlib.suppress(psutil.Error):
                if proc.name() == "raylet":
                    raylets.add(pid)
        out = {}
        for pid, proc in procs.items():
            try:
                name, ppid, cmdline = proc.name(), proc.ppid(), " ".join(proc.cmdline())
                self.seen[(pid, proc.create_time())] = proc
            except psutil.Error:
                continue
            title = _title(proc)
            if pid == self.zookeeper_pid or (
                    self.zookeeper_pid is None and "org.apache.zookeeper" in cmdline):
                group = "zookeeper"
            elif name in ("raylet", "gcs_server"):
                group = name
            elif ppid in raylets:
                group = "ray_agents" if title.endswith("Agent") else "ray_workers"
            else:
                group = "ray_other"
            out[pid] = (proc, group, title)
        return out

    # -- memory -------------------------------------------------------------------------------

    def memory(self) -> dict[str, Any]:
        """PSS of every process of the cluster, by group and by process title."""
        started = time.perf_counter()
        groups: dict[str, dict[str, float]] = {}
        titles: dict[str, dict[str, float]] = {}
        largest = []
        for pid, (_proc, group, title) in self.scan().items():
            mem = _smaps_rollup(pid)
            if mem is None:
                continue
            for table, key in ((groups, group), (titles, title)):
                entry = table.setdefault(key, {"processes": 0, "pss": 0, "rss": 0, "uss": 0})
                entry["processes"] += 1
                for field in ("pss", "rss", "uss"):
                    entry[field] += mem[field]
            largest.append((mem["pss"], pid, title))
        driver = _smaps_rollup(self.me.pid) or {"pss": 0, "rss": 0}

        def pss(*names: str) -> int:
            return int(sum(groups.get(name, {}).get("pss", 0) for name in names))

        def mib(value: float) -> float:
            return round(value / MIB, 1)

        ray_pss = pss(*self.RAY_GROUPS)
        zookeeper = pss("zookeeper")
        largest.sort(reverse=True)
        return {
            "total_pss_bytes": ray_pss + zookeeper,
            "total_pss_gib": round((ray_pss + zookeeper) / GIB, 3),
            "ray_pss_mib": mib(ray_pss),
            "workers_pss_mib": mib(pss("ray_workers")),
            "worker_processes": int(groups.get("ray_workers", {}).get("processes", 0)),
            "zookeeper_pss_mib": mib(zookeeper),
            "ray_processes": int(sum(groups.get(g, {}).get("processes", 0)
                                     for g in self.RAY_GROUPS)),
            "by_group": {
                group: {"processes": int(e["processes"]), "pss_mib": mib(e["pss"]),
                        "rss_mib": mib(e["rss"]), "uss_mib": mib(e["uss"])}
                for group, e in sorted(groups.items(), key=lambda item: -item[1]["pss"])
            },
            "by_title": {
                title: {"processes": int(e["processes"]), "pss_mib": mib(e["pss"]),
                        "pss_mib_each": mib(e["pss"] / e["processes"])}
                for title, e in sorted(titles.items(), key=lambda item: -item[1]["pss"])
            },
            "largest": [{"pid": pid, "title": title, "pss_mib": mib(value)}
                        for value, pid, title in largest[:5]],
            "driver_pss_mib_not_counted": mib(driver["pss"]),
            "measure_seconds": round(time.perf_counter() - started, 2),
        }

    # -- CPU ----------------------------------------------------------------------------------

    def cpu_times(self) -> dict[tuple[int, float], tuple[float, str, str]]:
        """(pid, create time) -> (user + system CPU seconds, group, title), cluster and driver."""
        out = {}
        scanned = self.scan()
        scanned[self.me.pid] = (self.me, "driver", "driver")
        for pid, (proc, group, title) in scanned.items():
            with contextlib.suppress(psutil.Error):
                times = proc.cpu_times()
                out[(pid, proc.create_time())] = (times.user + times.system, group, title)
        return out

    # -- shutdown -----------------------------------------------------------------------------

    def stop_leftovers(self, wait_s: float = 15.0) -> list[dict[str, Any]]:
        """After the cluster's shutdown: wait for every process seen to exit; terminate (then
        kill) by pid those still there, only if they are the very processes seen (same pid and
        create time), which this script's cluster started."""

        def alive() -> list[tuple[int, psutil.Process]]:
            left = []
            for (pid, created), proc in self.seen.items():
                with contextlib.suppress(psutil.Error):
                    if (proc.is_running() and proc.create_time() == created
                            and proc.status() != psutil.STATUS_ZOMBIE):
                        left.append((pid, proc))
            return left

        deadline = time.monotonic() + wait_s
        left = alive()
        while left and time.monotonic() < deadline:
            time.sleep(0.5)
            left = alive()
        stopped = []
        for pid, proc in left:
            title = _title(proc)
            with contextlib.suppress(psutil.Error):
                proc.terminate()
            stopped.append({"pid": pid, "title": title})
        if left:
            _gone, still = psutil.wait_procs([proc for _, proc in left], timeout=5)
            for proc in still:
                with contextlib.suppress(psutil.Error):
                    proc.kill()
            log(f"stopped {len(left)} process(es) left after shutdown: {stopped}")
        return stopped


# ------------------------------------------------------------------------------- the phases


def _leaders(description: dict[str, Any]) -> dict[int, int]:
    return {entry["partition"]: entry["leader"] for entry in description["partitions"]}


def _zookeeper_leaders(cluster: Cluster, topic: str) -> dict[int, int]:
    """Each partition's leader as ZooKeeper's partition state says (what `describe_topic`
    reports as `leader`), without asking every leader for its offsets: `--leader-source
    zookeeper`. It goes through `cluster.admin`, the one thing here beyond the public API."""
    states = cluster.admin.describe_topic(topic).states
    return {p: (state.value.leader if state is not None else -1) for p, state in states.items()}


class Bench:
    def __init__(self, cluster: Cluster, args: argparse.Namespace,
                 processes: ClusterProcesses, guard: MemoryGuard) -> None:
        self.cluster = cluster
        self.args = args
        self.processes = processes
        self.guard = guard
        self.topics: dict[str, int] = {}  # name -> partitions, in creation order
        self.memory_points: list[dict[str, Any]] = []
        self.created: list[dict[str, Any]] = []  # one entry per topic, filled as they come

    @property
    def partitions_total(self) -> int:
        return sum(self.topics.values())

    # -- create -------------------------------------------------------------------------------

    def create(self, sizes: list[int], timed_writes: bool, measure_memory: bool) -> None:
        args = self.args
        results = self.created
        producer = self.cluster.producer(acks="all") if timed_writes else None
        try:
            for size in sizes:
                self.guard.check()
                name = f"scale-{size}"
                suffix = 1
                while name in self.topics:
                    suffix += 1
                    name = f"scale-{size}-{suffix}"
                entry: dict[str, Any] = {"topic": name, "partitions": size,
                                         "replication_factor": args.replication_factor,
                                         "partitions_in_cluster_before": self.partitions_total}
                log(f"creating {name}: {size} partitions, RF {args.replication_factor}")
                started = time.perf_counter()
                try:
                    self.cluster.create_topic(name, partitions=size,
                                              replication_factor=args.replication_factor,
                                              config=args.topic_config,
                                              timeout_s=args.create_timeout)
                except GuardTripped as error:
                    entry["seconds"] = round(time.perf_counter() - started, 3)
                    entry["error"] = f"abandoned: {error}"
                    results.append(entry)
                    raise
                except Exception as error:  # a timeout here is a result, not the end
                    entry["seconds"] = round(time.perf_counter() - started, 3)
                    if self.guard.tripped:
                        entry["error"] = f"abandoned: {self.guard.tripped}"
                        results.append(entry)
                    self.guard.check()
                    entry["error"] = repr(error)
                    log(f"create {name} failed after {entry['seconds']} s: {error!r}")
                    results.append(entry)
                    self.topics[name] = size  # it may exist in part; later phases may use it
                    continue
                entry["seconds"] = round(time.perf_counter() - started, 3)
                self.topics[name] = size
                log(f"created {name} in {entry['seconds']} s")
                # Check what create_topic promised, and time describe_topic at this size.
                started = time.perf_counter()
                description = self.cluster.describe_topic(name)
                entry["describe_topic_seconds"] = round(time.perf_counter() - started, 3)
                leaders = _leaders(description)
                entry["partitions_without_leader"] = sum(1 for x in leaders.values() if x < 0)
                entry["leaders_per_broker"] = dict(sorted(Counter(
                    str(x) for x in leaders.values()).items()))
                if producer is not None:
                    try:
                        entry["first_record"] = self._one_record_each(producer, name, size)
                    except Exception as error:  # flush timed out: a result too
                        self.guard.check()
                        entry["first_record"] = {"seconds": None, "error": repr(error)}
                    log(f"one record to each of {size} partitions: "
                        f"{entry['first_record']['seconds']} s")
                if measure_memory:
                    point = self.processes.memory()
                    self.memory_points.append({"partitions_in_cluster": self.partitions_total,
                                               **{k: point[k] for k in (
                                                   "total_pss_gib", "ray_pss_mib",
                                                   "workers_pss_mib", "worker_processes",
                                                   "zookeeper_pss_mib")}})
                    log(f"memory with {self.partitions_total} partitions: "
                        f"{point['total_pss_gib']} GiB PSS, "
                        f"{point['worker_processes']} Ray worker processes")
                results.append(entry)
        finally:
            if producer is not None:
                with contextlib.suppress(Exception):
                    producer.close(timeout=30)

    def _one_record_each(self, producer: Any, topic: str, size: int) -> dict[str, Any]:
        started = time.perf_counter()
        futures = [producer.send(topic, value=b"first-%d" % p, partition=p)
                   for p in range(size)]
        producer.flush(timeout=self.args.create_timeout)
        errors: Counter[str] = Counter()
        for future in futures:
            error = future.exception(timeout=self.args.create_timeout)
            if error is not None:
                errors[type(error).__name__] += 1
        seconds = time.perf_counter() - started
        return {"seconds": round(seconds, 3), "acknowledged": size - sum(errors.values()),
                "errors": dict(errors)}

    # -- idle ---------------------------------------------------------------------------------

    def idle(self) -> dict[str, Any]:
        args = self.args
        log(f"idle: settling {args.settle_seconds} s, then measuring {args.idle_seconds} s")
        time.sleep(args.settle_seconds)
        before = self.processes.cpu_times()
        started = time.perf_counter()
        time.sleep(args.idle_seconds)
        after = self.processes.cpu_times()
        wall = time.perf_counter() - started
        groups: dict[str, float] = {}
        titles: dict[str, float] = {}
        per_process = []
        for key, (cpu, group, title) in after.items():
            used = cpu - before.get(key, (0.0, "", ""))[0]  # new processes count whole
            groups[group] = groups.get(group, 0.0) + used
            if group != "driver":
                titles[title] = titles.get(title, 0.0) + used
                per_process.append((used, key[0], title))
        exited = [key for key in before if key not in after]
        per_process.sort(reverse=True)

        def percent(seconds: float) -> float:
            return round(100 * seconds / wall, 2)

        ray_cpu = sum(v for g, v in groups.items() if g in ClusterProcesses.RAY_GROUPS)
        total = ray_cpu + groups.get("zookeeper", 0.0)
        return {
            "wall_seconds": round(wall, 2),
            "percent_of_one_core": percent(total),
            "ray_percent": percent(ray_cpu),
            "zookeeper_percent": percent(groups.get("zookeeper", 0.0)),
            "workers_percent": percent(groups.get("ray_workers", 0.0)),
            "driver_percent_not_counted": percent(groups.get("driver", 0.0)),
            "by_group_percent": {g: percent(v) for g, v in
                                 sorted(groups.items(), key=lambda item: -item[1])},
            "by_title_percent": {t: percent(v) for t, v in
                                 sorted(titles.items(), key=lambda item: -item[1])
                                 if percent(v) >= 0.05},
            "busiest": [{"pid": pid, "title": title, "percent": percent(used)}
                        for used, pid, title in per_process[:5]],
            "processes_exited_during_window": len(exited),
            "processes_started_during_window": sum(1 for key in after if key not in before),
        }

    # -- failover -----------------------------------------------------------------------------

    def failover(self, session_timeout_ms: int) -> dict[str, Any]:
        args = self.args
        cluster = self.cluster
        topic = max(self.topics, key=lambda name: (self.topics[name], name))
        partitions = self.topics[topic]
        result: dict[str, Any] = {"topic": topic, "partitions": partitions,
                                  "rate_records_per_s": args.failover_rate}
        producer = cluster.producer(acks="all", enable_idempotence=True)
        writer = NumberedWriter(producer, topic, partitions, args.failover_rate)
        writer.start()
        try:
            # Warm up: one full round acknowledged, so that every partition is being written.
            log(f"failover: writing round-robin to {partitions} partitions of {topic}")
            deadline = time.monotonic() + args.failover_timeout
            while len(writer.sent) < partitions and time.monotonic() < deadline:
                time.sleep(0.1)
            for _seq, _p, _t, future in list(writer.sent[:partitions]):
                future.exception(timeout=max(1.0, deadline - time.monotonic()))
            time.sleep(args.warmup_seconds)

            before = cluster.describe_topic(topic)
            leaders = _leaders(before)
            counts = Counter(x for x in leaders.values() if x >= 0)
            victim = min(counts, key=lambda broker: (-counts[broker], broker))
            led = sorted(p for p, leader in leaders.items() if leader == victim)
            result.update({
                "killed_broker": victim,
                "killed_broker_was_controller": cluster.controller() == victim,
                "leaders_per_broker_before": {str(b): counts[b] for b in sorted(counts)},
                "partitions_led_by_killed_broker": len(led),
                "records_sent_before_kill": len(writer.sent),
            })
            log(f"killing broker {victim}, leader of {len(led)} partitions "
                f"(controller: {result['killed_broker_was_controller']})")
            killed_at = time.perf_counter()
            cluster.kill_broker(victim)
            result["kill_broker_call_seconds"] = round(time.perf_counter() - killed_at, 3)

            pending = set(led)
            upper: dict[int, float] = {}
            lower: dict[int, float] = {}
            new_leader: dict[int, int] = {}
            polls = []
            previous_start = 0.0
            deadline = killed_at + args.failover_timeout
            while pending and time.perf_counter() < deadline:
                poll_start = time.perf_counter()
                try:
                    if args.leader_source == "zookeeper":
                        now_leaders = _zookeeper_leaders(cluster, topic)
                    else:
                        now_leaders = _leaders(cluster.describe_topic(topic))
                except Exception as error:  # ZooKeeper busy or a leader gone mid-call: retry
                    self.guard.check()
                    log(f"describe_topic failed during failover: {error!r}")
                    time.sleep(0.2)
                    continue
                poll_end = time.perf_counter()
                polls.append(poll_end - poll_start)
                for p in list(pending):
                    leader = now_leaders.get(p, -1)
                    if leader >= 0 and leader != victim:
                        upper[p] = poll_end - killed_at
                        lower[p] = max(0.0, previous_start - killed_at)
                        new_leader[p] = leader
                        pending.discard(p)
                previous_start = poll_start
                if pending:
                    time.sleep(args.poll_interval)
            times = sorted(upper.values())
            result.update({
                "failover_seconds_max": _max(times),
                "failover_seconds_median": _median(times),
                "failover_seconds_min": round(times[0], 3) if times else None,
                "failover_seconds_max_lower_bound": _max(list(lower.values())),
                "partitions_without_new_leader": sorted(pending),
                "per_partition_seconds": {str(p): round(upper[p], 3) for p in sorted(upper)},
                "new_leaders": dict(sorted(Counter(str(b) for b in new_leader.values())
                                           .items())),
                "leader_source": args.leader_source,
                "polls": len(polls),
                "poll_seconds_median": _median(polls),
                "poll_seconds_max": _max(polls),
                "session_timeout_ms": session_timeout_ms,
            })
            log(f"failover: max {result['failover_seconds_max']} s, median "
                f"{result['failover_seconds_median']} s over {len(times)} partitions "
                f"({len(pending)} without a new leader); {args.leader_source} polls took "
                f"{result['poll_seconds_median']} s (median)")
            time.sleep(args.tail_seconds)
        finally:
            writer.stop()
        log(f"failover: producer stopped after {len(writer.sent)} records; flushing")
        with contextlib.suppress(Exception):
            producer.flush(timeout=args.failover_timeout)
        result["check"] = self._check(topic, partitions, writer)
        with contextlib.suppress(Exception):
            producer.close(timeout=10)
        if args.restart_broker:
            result["restart"] = self._restart(topic, result["killed_broker"])
        return result

    def _check(self, topic: str, partitions: int, writer: NumberedWriter) -> dict[str, Any]:
        """Read every partition back; every acknowledged record must be where it was acked."""
        acked: dict[int, tuple[int, int]] = {}  # seq -> (partition, offset)
        errors: Counter[str] = Counter()
        unresolved = 0
        for seq, partition, _sent, future in writer.sent:
            if not future.done():
                unresolved += 1
                continue
            error = future.exception(timeout=0)
            if error is not None:
                errors[type(error).__name__] += 1
                continue
            metadata = future.result(timeout=0)
            acked[seq] = (partition, metadata.offset)
        log(f"check: {len(acked)} acknowledged, {sum(errors.values())} failed, "
            f"{unresolved} unresolved; reading {topic} back")
        consumer = self.cluster.consumer([topic], auto_offset_reset="earliest")
        found: dict[tuple[int, int], bytes | None] = {}
        started = time.perf_counter()
        try:
            tps = [(topic, p) for p in range(partitions)]
            ends = {tp.partition: offset for tp, offset in consumer.end_offsets(tps).items()}
            deadline = time.monotonic() + self.args.read_timeout
            remaining = {p for p, end in ends.items() if end > 0}
            while remaining and time.monotonic() < deadline:
                for record in consumer.poll(timeout_ms=1000):
                    found[(record.partition, record.offset)] = record.value
                remaining = {p for p in remaining if consumer.position(topic, p) < ends[p]}
        finally:
            consumer.close()
        read_seconds = time.perf_counter() - started
        occurrences: Counter[int] = Counter()
        for value in found.values():
            if value and value.startswith(b"f:"):
                occurrences[int(value[2:])] += 1
        lost, misplaced = [], 0
        for seq, (partition, offset) in acked.items():
            if found.get((partition, offset)) != b"f:%d" % seq:
                lost.append(seq)
                if occurrences[seq]:
                    misplaced += 1
        duplicated = sum(1 for count in occurrences.values() if count > 1)
        acked_seqs = set(acked)
        return {
            "sent": len(writer.sent),
            "acknowledged": len(acked),
            "failed": dict(errors),
            "unresolved": unresolved,
            "send_errors": dict(writer.send_errors),
            "lost": len(lost),
            "lost_sample": sorted(lost)[:20],
            "lost_but_present_elsewhere": misplaced,
            "duplicated": duplicated,
            "unacknowledged_but_present": sum(1 for seq in occurrences
                                              if seq not in acked_seqs),
            "records_read": len(found),
            "partitions_not_read_to_end": sorted(remaining),
            "read_seconds": round(read_seconds, 2),
        }

    def _restart(self, topic: str, broker: int) -> dict[str, Any]:
        log(f"restarting broker {broker}")
        started = time.perf_counter()
        try:
            self.cluster.start_broker(broker, timeout_s=self.args.failover_timeout)
        except Exception as error:
            return {"error": repr(error)}
        start_s = time.perf_counter() - started
        deadline = time.monotonic() + self.args.failover_timeout
        missing: list[int] = []
        while time.monotonic() < deadline:
            description = self.cluster.describe_topic(topic)
            missing = [e["partition"] for e in description["partitions"]
                       if broker in e["replicas"] and broker not in e["isr"]]
            if not missing:
                break
            time.sleep(self.args.poll_interval)
        return {"start_broker_seconds": round(start_s, 3),
                "back_in_every_isr_seconds": None if missing else
                round(time.perf_counter() - started, 3),
                "partitions_not_back_in_isr": len(missing)}


class NumberedWriter(threading.Thread):
    """Sends b"f:<n>" for n = 0, 1, ... to partition n % partitions, at `rate` records/s (0: as
    fast as send() takes them), keeping every future."""

    def __init__(self, producer: Any, topic: str, partitions: int, rate: float) -> None:
        super().__init__(name="numbered-writer", daemon=True)
        self.producer = producer
        self.topic = topic
        self.partitions = partitions
        self.rate = rate
        self.sent: list[tuple[int, int, float, Any]] = []  # seq, partition, send time, future
        self.send_errors: Counter[str] = Counter()
        self._stop_event = threading.Event()

    def run(self) -> None:
        seq = 0
        origin = time.perf_counter()
        while not self._stop_event.is_set():
            if self.rate > 0:
                due = origin + seq / self.rate
                now = time.perf_counter()
                if due > now:
                    self._stop_event.wait(due - now)
                    continue
                if now - due > 1.0:  # fell behind (send blocked): do not burst to catch up
                    origin = now - seq / self.rate
            partition = seq % self.partitions
            try:
                future = self.producer.send(self.topic, value=b"f:%d" % seq,
                                            partition=partition)
            except Exception as error:  # e.g. max.block.ms passed while no leader was known
                self.send_errors[type(error).__name__] += 1
                self._stop_event.wait(0.1)
            else:
                self.sent.append((seq, partition, time.perf_counter(), future))
            seq += 1

    def stop(self) -> None:
        self._stop_event.set()
        self.join(timeout=120)


# ------------------------------------------------------------------------------------- run


def _zookeeper_pid(cluster: Cluster) -> int | None:
    """The embedded ZooKeeper's pid, if the cluster says; else found by its command line."""
    zookeeper = getattr(getattr(cluster, "stack", None), "zookeeper", None)
    return getattr(zookeeper, "pid", None)


def _run_phases(bench: Bench, results: dict[str, Any], errors: dict[str, str],
                session_timeout_ms: int) -> None:
    args, phases = bench.args, bench.args.phases
    if "memory" in phases:
        results["memory_empty_cluster"] = bench.processes.memory()
        bench.memory_points.append({"partitions_in_cluster": 0, **{
            k: results["memory_empty_cluster"][k] for k in (
                "total_pss_gib", "ray_pss_mib", "workers_pss_mib", "worker_processes",
                "zookeeper_pss_mib")}})
    try:
        with deadline(args.phase_timeout * len(args.partitions), "create"):
            bench.create(args.partitions, "create" in phases, "memory" in phases)
    except Exception as error:
        bench.guard.check()
        errors["create"] = repr(error)
        log(f"creating the topics failed: {error!r}")
    for phase, call in (("memory", bench.processes.memory), ("idle", bench.idle),
                        ("failover", lambda: bench.failover(session_timeout_ms))):
        if phase not in phases:
            continue
        bench.guard.check()
        if not bench.topics:
            errors[phase] = "no topic was created"
            continue
        try:
            with deadline(args.phase_timeout, phase):
                results[phase] = call()
        except Exception as error:
            bench.guard.check()
            errors[phase] = repr(error)
            log(f"phase {phase} failed: {error!r}")


def run(args: argparse.Namespace) -> dict[str, Any]:
    phases = args.phases
    session_timeout_ms = int(args.broker_config.get(SESSION_TIMEOUT_KEY,
                                                    DEFAULT_SESSION_TIMEOUT_MS))
    if args.failover_timeout is None:
        args.failover_timeout = session_timeout_ms / 1000 + 120
    temporary = None
    data_dir = args.data_dir
    if data_dir is None:
        temporary = data_dir = tempfile.mkdtemp(prefix="rafka-scale-")
    results: dict[str, Any] = {}
    errors: dict[str, str] = {}
    load_before = os.getloadavg()
    log(f"starting {args.brokers} brokers (data in {data_dir})")
    started = time.perf_counter()
    start_seconds = 0.0
    partitions_total = 0
    processes: ClusterProcesses | None = None
    cluster = None
    try:
        cluster = Cluster.start(brokers=args.brokers, name=f"scale-{os.getpid()}",
                                data_dir=data_dir, broker_config=dict(args.broker_config),
                                timeout_s=args.phase_timeout)
        start_seconds = time.perf_counter() - started
        processes = ClusterProcesses(_zookeeper_pid(cluster))
        log(f"cluster up in {start_seconds:.1f} s")
        guard = MemoryGuard(int(args.min_available_gib * GIB))
        bench = Bench(cluster, args, processes, guard)
        try:
            with guard:
                _run_phases(bench, results, errors, session_timeout_ms)
        except GuardTripped as error:
            errors["memory_guard"] = str(error)
        results["create" if "create" in phases else "setup_untimed"] = bench.created
        if "memory" in results:
            results["memory"]["partitions_in_cluster"] = bench.partitions_total
            results["memory"]["replicas_in_cluster"] = (bench.partitions_total
                                                        * args.replication_factor)
            results["memory"]["after_each_create"] = bench.memory_points
        partitions_total = bench.partitions_total
    finally:
        if cluster is not None:
            log("shutting the cluster down")
            try:
                cluster.shutdown()
            except Exception as error:
                errors["shutdown"] = repr(error)
                log(f"shutdown failed: {error!r}")
        leftovers = processes.stop_leftovers() if processes is not None else []
        if temporary is not None:
            shutil.rmtree(temporary, ignore_errors=True)
    report = {
        "benchmark": "scale",
        "config": {
            "brokers": args.brokers,
            "partitions": args.partitions,
            "replication_factor": args.replication_factor,
            "topic_config": args.topic_config,
            "broker_config": args.broker_config,
            "phases": phases,
            "idle_seconds": args.idle_seconds,
            "settle_seconds": args.settle_seconds,
            "failover_rate": args.failover_rate,
            "session_timeout_ms": session_timeout_ms,
            "cluster_start_seconds": round(start_seconds, 1),
            "load_average_at_start": [round(x, 2) for x in load_before],
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "ray": ray.__version__,
        },
        "results": results,
        "errors": errors,
        "processes_left_after_shutdown": leftovers,
    }
    report.update(judge(results, args, session_timeout_ms, partitions_total))
    return report


def judge(results: dict[str, Any], args: argparse.Namespace, session_timeout_ms: int,
          partitions_total: int) -> dict[str, Any]:
    """The issue's targets, each with `pass` (None where this run did not measure it)."""
    targets: dict[str, dict[str, Any]] = {}
    at_scale = (partitions_total >= TARGET_MEMORY_PARTITIONS and args.replication_factor >= 3)
    memory = results.get("memory")
    targets["memory_total_pss"] = {
        "target": "total PSS of the cluster (Ray + ZooKeeper) < 6 GiB with 1,000 partitions RF 3",
        "limit_gib": TARGET_MEMORY_BYTES / GIB,
        "measured_gib": memory["total_pss_gib"] if memory else None,
        "partitions_in_cluster": partitions_total,
        "at_target_scale": at_scale,
        "pass": memory["total_pss_bytes"] < TARGET_MEMORY_BYTES if memory else None,
    }
    idle = results.get("idle")
    targets["idle_cpu"] = {
        "target": "idle CPU of the cluster < 10 % of one core",
        "limit_percent_of_one_core": TARGET_IDLE_PERCENT,
        "measured_percent_of_one_core": idle["percent_of_one_core"] if idle else None,
        "partitions_in_cluster": partitions_total,
        "at_target_scale": at_scale,
        "pass": idle["percent_of_one_core"] < TARGET_IDLE_PERCENT if idle else None,
    }
    created = {entry["partitions"]: entry for entry in results.get("create", [])}
    for size, limit in TARGET_CREATE_SECONDS.items():
        entry = created.get(size)
        ok = entry is not None and "error" not in entry
        targets[f"create_{size}_partitions"] = {
            "target": f"create_topic of {size:,} partitions RF 3 < {limit:.0f} s",
            "limit_seconds": limit,
            "measured_seconds": entry["seconds"] if entry else None,
            "pass": (ok and entry["seconds"] < limit) if entry else None,
        }
    failover = results.get("failover")
    limit = session_timeout_ms / 1000 + FAILOVER_MARGIN_S
    measured = failover.get("failover_seconds_max") if failover else None
    targets["failover_max"] = {
        "target": "every partition of the killed broker has a new leader within "
                  "zookeeper.session.timeout.ms + 5 s",
        "limit_seconds": limit,
        "measured_seconds": measured,
        "partitions": failover.get("partitions_led_by_killed_broker") if failover else None,
        "pass": (measured is not None and measured <= limit
                 and not failover["partitions_without_new_leader"]) if failover else None,
    }
    check = failover.get("check") if failover else None
    targets["no_acknowledged_record_lost"] = {
        "target": "lost == 0",
        "acknowledged": check["acknowledged"] if check else None,
        "lost": check["lost"] if check else None,
        "duplicated": check["duplicated"] if check else None,
        "pass": (check["lost"] == 0 and not check["partitions_not_read_to_end"])
        if check else None,
    }
    judged = [t["pass"] for t in targets.values() if t["pass"] is not None]
    return {
        "targets": targets,
        "targets_passed": {name: t["pass"] for name, t in targets.items()},
        "all_measured_targets_passed": bool(judged) and all(judged),
        "all_targets_measured_at_scale": (len(judged) == len(targets) and at_scale),
    }


# ------------------------------------------------------------------------------------ plot


def plot(report: dict[str, Any], out: str) -> None:
    plt = pyplot()
    if plt is None:
        log("matplotlib is not installed: no plot")
        return
    results = report["results"]
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.5))
    create = results.get("create", [])
    if create:
        labels = [str(entry["partitions"]) for entry in create]
        axes[0].bar([x - 0.2 for x in range(len(create))], [e["seconds"] or 0 for e in create],
                    width=0.4, label="create_topic")
        axes[0].bar([x + 0.2 for x in range(len(create))],
                    [e.get("first_record", {}).get("seconds") or 0 for e in create], width=0.4,
                    label="one record each")
        for x, entry in enumerate(create):
            limit = TARGET_CREATE_SECONDS.get(entry["partitions"])
            if limit:
                axes[0].hlines(limit, x - 0.45, x + 0.45, colors="red")
        axes[0].set_xticks(range(len(create)), labels)
        axes[0].set_xlabel("partitions (RF 3)")
        axes[0].set_ylabel("seconds")
        axes[0].legend()
        axes[0].set_title("create")
    points = results.get("memory", {}).get("after_each_create", [])
    if points:
        xs = [p["partitions_in_cluster"] for p in points]
        axes[1].plot(xs, [p["total_pss_gib"] for p in points], marker="o", label="total PSS")
        axes[1].plot(xs, [p["workers_pss_mib"] / 1024 for p in points], marker="o",
                     label="Ray workers")
        axes[1].axhline(TARGET_MEMORY_BYTES / GIB, color="red", label="target")
        axes[1].set_xlabel("partitions in the cluster")
        axes[1].set_ylabel("GiB")
        axes[1].legend()
        axes[1].set_title("memory")
    failover = results.get("failover", {})
    times = list(failover.get("per_partition_seconds", {}).values())
    if times:
        axes[2].hist(times, bins=min(30, max(5, len(times) // 3)))
        axes[2].axvline(report["config"]["session_timeout_ms"] / 1000, color="grey",
                        linestyle="--", label="session timeout")
        axes[2].axvline(report["targets"]["failover_max"]["limit_seconds"], color="red",
                        label="target")
        axes[2].set_xlim(left=0)
        axes[2].set_xlabel("seconds from kill to new leader")
        axes[2].set_ylabel("partitions")
        axes[2].legend()
        axes[2].set_title(f"failover ({failover.get('topic')})")
    fig.tight_layout()
    fig.savefig(out)
    log(f"plot written to {out}")


# ------------------------------------------------------------------------------------ main


def _size_list(text: str) -> list[int]:
    sizes = [int(part) for part in text.split(",") if part.strip()]
    if not sizes or any(size < 1 for size in sizes):
        raise argparse.ArgumentTypeError(f"partition counts must be positive: {text!r}")
    return sizes


def _key_values(pairs: list[str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise SystemExit(f"expected key=value, got {pair!r}")
        value = value.strip()
        out[key.strip()] = int(value) if re.fullmatch(r"-?\d+", value) else value
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--partitions", type=_size_list, default=[100, 1000],
                        help="partition counts, one new topic each, in this order (100,1000)")
    parser.add_argument("--phases", default=",".join(PHASES),
                        help=f"comma-separated subset of {','.join(PHASES)}")
    parser.add_argument("--brokers", type=int, default=3)
    parser.add_argument("--replication-factor", type=int, default=3)
    parser.add_argument("--broker-config", action="append", default=[], metavar="KEY=VALUE",
                        help="a broker setting (repeatable), e.g. "
                             "zookeeper.session.timeout.ms=6000")
    parser.add_argument("--topic-config", action="append", default=None, metavar="KEY=VALUE",
                        help="a setting of the created topics (repeatable; default "
                             "min.insync.replicas=2)")
    parser.add_argument("--data-dir", default=None,
                        help="default: a temporary directory, removed at the end")
    parser.add_argument("--create-timeout", type=float, default=600.0,
                        help="create_topic's timeout_s, and the first records' timeout")
    parser.add_argument("--idle-seconds", type=float, default=20.0)
    parser.add_argument("--settle-seconds", type=float, default=5.0,
                        help="quiet time before the idle measurement starts")
    parser.add_argument("--failover-rate", type=float, default=1000.0,
                        help="records/s the failover producer sends (0: as fast as it can)")
    parser.add_argument("--warmup-seconds", type=float, default=2.0,
                        help="sending after the first round is acknowledged, before the kill")
    parser.add_argument("--tail-seconds", type=float, default=3.0,
                        help="sending after the last new leader, before the check")
    parser.add_argument("--poll-interval", type=float, default=0.05,
                        help="pause between describe_topic polls")
    parser.add_argument("--leader-source", choices=["describe_topic", "zookeeper"],
                        default="describe_topic",
                        help="how the failover phase polls leaders: describe_topic (public API; "
                             "it also asks every live leader for its offsets, so a poll of "
                             "1,000 partitions takes seconds) or zookeeper (the partition states "
                             "alone, through cluster.admin: finer time resolution)")
    parser.add_argument("--min-available-gib", type=float, default=2.0,
                        help="abandon the run (and shut the cluster down) when the machine's "
                             "available memory falls below this (0: never)")
    parser.add_argument("--failover-timeout", type=float, default=None,
                        help="give up waiting for new leaders (default: session timeout + 120 s)")
    parser.add_argument("--read-timeout", type=float, default=600.0,
                        help="give up reading the topic back after this long")
    parser.add_argument("--restart-broker", action="store_true",
                        help="restart the killed broker and time its return to every ISR")
    parser.add_argument("--phase-timeout", type=float, default=1800.0,
                        help="abandon a phase (and shut the cluster down) after this long; "
                             "creation gets this much per topic")
    parser.add_argument("--plot", metavar="PNG", help="write a chart (needs matplotlib)")
    args = parser.parse_args(argv)
    args.phases = [p.strip() for p in args.phases.split(",") if p.strip()]
    unknown = sorted(set(args.phases) - set(PHASES))
    if unknown:
        parser.error(f"unknown phases {unknown}: choose from {', '.join(PHASES)}")
    args.broker_config = _key_values(args.broker_config)
    args.topic_config = _key_values(args.topic_config or ["min.insync.replicas=2"])
    if args.replication_factor > args.brokers:
        parser.error("--replication-factor is larger than --brokers")
    # Ray, its workers and ZooKeeper may write to file descriptor 1: point it at stderr for the
    # run, so that stdout holds the JSON object only.
    sys.stdout.flush()
    saved_stdout = os.dup(1)
    os.dup2(2, 1)
    stdout, sys.stdout = sys.stdout, sys.stderr
    try:
        report = run(args)
    finally:
        sys.stdout = stdout
        os.dup2(saved_stdout, 1)
        os.close(saved_stdout)
    print(json.dumps(report, indent=2), flush=True)
    if args.plot:
        plot(report, args.plot)
    return 0


if __name__ == "__main__":
    sys.exit(main())
