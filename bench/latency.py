"""End-to-end latency of rafka, measured from when each record was due, beside the same run's
floor: a chain of bare Ray actor calls with as many hops. Prints one JSON object; `--plot
out.png` draws the latency distributions.

    .venv/bin/python bench/latency.py --rate 5000 --seconds 10

What it does (issue 26, point 1):

* A producer in a process of its own sends `--rate` records/s of `--record-size` bytes with
  acks=all to a topic of one partition with three replicas, once per `--lingers` value. Each
  record carries the time it was due (`start + i / rate`, Linux's CLOCK_MONOTONIC, which every
  process on the machine shares), not the time it was sent: a producer that falls behind
  shows its delay in every record it owes (no coordinated omission).
* A consumer in this process polls; a record's latency is when `poll` returned it less when it
  was due. The first `--warmup` seconds are not counted.
* The floor: a process of its own sends the same records at the same rate through a chain of
  `--hops` async Ray actors (fire-and-forget calls, as the hosts' calls are); the last records
  when each arrived. rafka's path has four such hops: producer to leader host, the follower's
  fetch answered, the follower's next fetch moving the high watermark, the consumer's fetch
  answered.
* A second floor, what point 4's "plain sockets" would start from: the same records through
  `--hops` actors of the same kind that pass them on over TCP (loopback, TCP_NODELAY, a length
  before each frame of the records due), with no Ray call on the path.

`--producer-calls batch` has the producer call `send_batch` with the records due at each
wake-up, as the floors' senders do, instead of `send()` per record: what a producer of almost
no CPU would buy.

`--transports ray,tcp --rounds 3` compares the two ways requests reach the hosts (the
producer's, the followers' and the consumer's: actor calls, or connections kept to the hosts'
data ports), a cluster each, alternating, in one invocation.

Reports p50, p99, p99.9 and max (ms) of each, the five worst 100 ms windows (by due time, from
the end of the warm-up), and each rafka run's p99 over the chain's.

And where the time goes (issue 26, point 2): during each rafka run the producer and the
partition's three replicas trace their events (`rafka.actors.path_trace`), and each record's
latency is laid along its ten hops, from `late` (the producer's own lag behind the schedule)
to `delivery` (the consumer's fetch answered to `poll` returning). Each hop's mean, p50 and
p99 are printed under `hops`; the means add up to the mean latency.

And what it costs: under `cpu`, the cores each process on the path kept busy while records were
measured (the producer's process, the leader's and followers' replica hosts, the consumer's,
which is this one) and the whole machine's, and the same as CPU us per record. A change of a
few per cent of a core shows there run after run, where the tail moves with the machine.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import shutil
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
from array import array
from collections import deque
from pathlib import Path
from typing import Any

import msgpack
import numpy as np
import psutil
import ray

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import pyplot
from bench.machine_canary import MachineCanary
from rafka import Cluster
from rafka.actors.clients.producer import RecordFuture, SentRecords
from rafka.actors.path_trace import HOPS, SentRequest, TracedRecord, hop_breakdown
from rafka.actors.runtime import init_ray
from rafka.common.serving import no_delay

# Each record's first bytes: when it was due, and when the producer got to it (monotonic ns).
STAMPS = struct.Struct("<qq")
# Before each frame of the socket floor: its length.
FRAME_LENGTH = struct.Struct("<I")
REPO = Path(__file__).resolve().parent.parent
CHAIN_NAME = "bench-latency-hop"


def percentile(ordered: list[float], q: float) -> float:
    return ordered[min(len(ordered) - 1, int(len(ordered) * q / 100))]


def summary(samples: list[tuple[int, float]], records: int, counted_from: int) -> dict[str, Any]:
    """Percentiles of `(due ns, latency ms)` samples due from `counted_from`, and the worst
    100 ms windows by due time (a stall shows as a run of them)."""
    counted = [(due, latency) for due, latency in samples if due >= counted_from]
    ordered = sorted(latency for _due, latency in counted)
    windows: dict[int, float] = {}
    for due, latency in counted:
        window = (due - counted_from) // 100_000_000
        windows[window] = max(windows.get(window, 0.0), latency)
    worst = sorted(windows.items(), key=lambda item: -item[1])[:5]
    return {"records": records, "measured": len(ordered),
            "p50_ms": round(percentile(ordered, 50), 3),
            "p99_ms": round(percentile(ordered, 99), 3),
            "p999_ms": round(percentile(ordered, 99.9), 3),
            "max_ms": round(ordered[-1], 3),
            "worst_windows": [{"due_at_s": window / 10, "max_ms": round(latency, 1)}
                              for window, latency in sorted(worst)]}


# ----------------------------------------------------------------------- sending processes


# A sending process that is ahead sleeps at least this long, and then sends every record that
# fell due meanwhile, each still stamped with its own due time (so the wait counts against the
# system measured, not for it): as Kafka's ThroughputThrottler does with its 2 ms. A sleep costs
# this machine 10-18 us of CPU, so sleeping until each record's due time cost the process
# 3 us a record at 50,000/s and 11 us at 5,000/s, CPU taken from the processes measured.
MIN_SLEEP_NS = 250_000


def send_at_rate(send: Any, rate: int, total: int, record_size: int,
                 wait_for_room: Any = None) -> int:
    """Send record i at `start + i / rate` (or up to MIN_SLEEP_NS after it, with the records
    due meanwhile), each payload stamped with its due time; returns the start (monotonic ns),
    printed first so the reader knows it. Without `wait_for_room`, `send(payload)` for each
    record; with it, `send(payloads)` with every record due, once `wait_for_room()` returns (as
    a producer sends what accumulated while its requests in flight were full)."""
    interval = 1e9 / rate
    pad = b"\0" * max(0, record_size - STAMPS.size)
    start = time.monotonic_ns() + 100_000_000
    print(f"START {start}", flush=True)
    clock = time.monotonic_ns
    i = 0
    while i < total:
        due = start + int(i * interval)
        delay = due - clock()
        if delay > 0:
            time.sleep(max(delay, MIN_SLEEP_NS) / 1e9)
        if wait_for_room is None:
            send(STAMPS.pack(due, clock()) + pad)
            i += 1
            continue
        wait_for_room()
        now = clock()
        payloads = []
        while i < total and (due := start + int(i * interval)) <= now:
            payloads.append(STAMPS.pack(due, now) + pad)
            i += 1
        send(payloads)
    return start


def machine_busy_seconds() -> float:
    """CPU time the machine's cores spent on anything but waiting (idle and iowait)."""
    times = psutil.cpu_times()
    return times.user + times.nice + times.system + times.irq + times.softirq + times.steal


class CpuWindow(threading.Thread):
    """CPU each of `pids` (a role each) used between two monotonic instants (ns), and the
    whole machine's (psutil), read by a thread that sleeps until each instant: less noisy
    than a latency tail, so an A/B pair can show a change of a few per cent of a core. The
    reading takes well under a millisecond, so the consumer's loop is not held up by it."""

    def __init__(self, pids: dict[str, int], began_ns: int, ended_ns: int) -> None:
        super().__init__(daemon=True)
        self.processes = {role: psutil.Process(pid) for role, pid in pids.items()}
        self.began_ns, self.ended_ns = began_ns, ended_ns
        self.cores: dict[str, float] = {}

    def _read(self) -> dict[str, float]:
        used = {role: sum(process.cpu_times()[:2])  # user and system, every thread
                for role, process in self.processes.items()}
        used["machine"] = machine_busy_seconds()
        return used

    def run(self) -> None:
        time.sleep(max(0, self.began_ns - time.monotonic_ns()) / 1e9)
        before, began = self._read(), time.monotonic_ns()
        time.sleep(max(0, self.ended_ns - time.monotonic_ns()) / 1e9)
        after, ended = self._read(), time.monotonic_ns()
        seconds = (ended - began) / 1e9
        self.cores = {role: round((after[role] - before[role]) / seconds, 3) for role in after}

    def summary(self, rate: int) -> dict[str, Any]:
        """Cores busy per role, and CPU us per record at `rate`, once the window has ended."""
        self.join()
        return {"cores": self.cores,
                "us_per_record": {role: round(cores * 1e6 / rate, 2)
                                  for role, cores in self.cores.items()}}


def settle_heap() -> None:
    """Put what this process holds so far out of the collector's sight, as the replica hosts
    do (`ReplicaHost.__init__`). A full collection walks every object: in a process holding
    Ray's driver state it stalled the consumer's process for 100-270 ms in the first seconds of
    a run (its fetches then answered that late: p99 of the `consumer_fetch_answered` hop 100-270
    ms, against 1.4-5 ms with this; docs/latency.md). What is allocated while timing is
    collected as usual, so what a run keeps while timing must not pile up as objects the
    collector tracks: a million futures or named tuples stopped the producer's and the
    consumer's processes for up to 178 and 265 ms at each full collection."""
    gc.collect()
    gc.freeze()


def producer_process(ray_address: str, zk: str, name: str, topic: str, rate: int, total: int,
                     record_size: int, linger_ms: int, requests_file: str,
                     transport: str, max_in_flight: int, calls: str) -> None:
    cluster = Cluster.connect(zk, name, ray_address=ray_address)
    producer = cluster.producer(acks="all", linger_ms=linger_ms, transport=transport,
                                max_in_flight_requests_per_connection=max_in_flight)
    producer.metadata.partitions(topic)
    requests = producer.trace_requests()
    settle_heap()
    # Each future is looked at once it is answered and let go: a million kept to the end would
    # make every full collection of the process walk them all (eight of them over a 25 s run
    # at 50,000/s, up to 178 ms each, the producer stopped meanwhile).
    waiting: deque[RecordFuture] = deque()
    failed = 0

    def send(payload: bytes) -> None:
        nonlocal failed
        waiting.append(producer.send(topic, payload))
        while waiting and waiting[0].done():
            failed += waiting.popleft().exception(0) is not None

    sent_batches: deque[SentRecords] = deque()

    def send_due(payloads: list[bytes]) -> None:
        nonlocal failed
        sent_batches.append(producer.send_batch(topic, payloads))
        while sent_batches and sent_batches[0].done():
            failed += sum(future.exception(0) is not None for future in sent_batches.popleft())

    if calls == "batch":
        send_at_rate(send_due, rate, total, record_size, wait_for_room=lambda: None)
    else:
        send_at_rate(send, rate, total, record_size)
    producer.flush(60)
    failed += sum(future.exception(0) is not None for future in waiting)
    failed += sum(future.exception(0) is not None for sent in sent_batches for future in sent)
    producer.close()
    Path(requests_file).write_bytes(msgpack.packb([tuple(request) for request in requests]))
    print(f"DONE {failed}", flush=True)


def chain_process(ray_address: str, namespace: str, rate: int, total: int,
                  record_size: int, in_flight: int) -> None:
    ray.init(address=ray_address, namespace=namespace, log_to_driver=False)
    first = ray.get_actor(f"{CHAIN_NAME}-0")
    pending: list[Any] = []
    settle_heap()

    def wait_for_room() -> None:
        nonlocal pending
        _done, pending = ray.wait(pending, num_returns=len(pending), timeout=0)
        if len(pending) >= in_flight:
            _done, pending = ray.wait(pending, num_returns=1)

    send_at_rate(lambda payloads: pending.append(first.relay.remote(payloads)), rate, total,
                 record_size, wait_for_room)
    ray.get(pending)
    print("DONE 0", flush=True)


class ArrivalLog:
    """What the last hop of a floor keeps: each record's due time and latency."""

    def __init__(self) -> None:
        self.dues = array("q")
        self.latencies = array("d")

    def keep(self, due: int, now: int) -> None:
        self.dues.append(due)
        self.latencies.append((now - due) / 1e6)

    async def arrived(self) -> int:
        return len(self.latencies)

    async def taken(self) -> tuple[bytes, bytes]:
        return self.dues.tobytes(), self.latencies.tobytes()


@ray.remote(num_cpus=0)
class Hop(ArrivalLog):
    """One hop of the floor's chain: passes each call's payloads to the next hop and answers
    when it has; the last hop keeps each payload's latency."""

    def __init__(self, next_hop: Any) -> None:
        super().__init__()
        self.next_hop = next_hop

    async def relay(self, payloads: list[bytes]) -> None:
        if self.next_hop is not None:
            await self.next_hop.relay.remote(payloads)
            return
        now = time.monotonic_ns()
        for payload in payloads:
            # STAMPS' first (a Struct won't pickle)
            self.keep(struct.unpack_from("<q", payload)[0], now)


def socket_chain_process(port: int, rate: int, total: int, record_size: int) -> None:
    connection = socket.create_connection(("127.0.0.1", port))
    connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def send(payloads: list[bytes]) -> None:
        body = b"".join(payloads)
        connection.sendall(FRAME_LENGTH.pack(len(body)) + body)

    # Every record due goes in one frame, as the Ray chain's source sends what is due as one
    # call: there is no limit of calls in flight to wait for.
    send_at_rate(send, rate, total, record_size, wait_for_room=lambda: None)
    connection.close()
    print("DONE 0", flush=True)


@ray.remote(num_cpus=0)
class SocketHop(ArrivalLog):
    """One hop of the socket floor: passes the bytes that reach its listener on to the next
    hop's; the last reads the frames and keeps each record's latency."""

    def __init__(self, record_size: int) -> None:
        super().__init__()
        self.record_size = record_size
        self.next_hop: asyncio.StreamWriter | None = None
        self.server: asyncio.Server | None = None

    async def listen(self, next_port: int | None) -> int:
        """Connect to the next hop (None: this is the last), listen; returns the port."""
        if next_port is not None:
            _reader, self.next_hop = await asyncio.open_connection("127.0.0.1", next_port)
            no_delay(self.next_hop)
        self.server = await asyncio.start_server(self._relay, "127.0.0.1", 0)
        return self.server.sockets[0].getsockname()[1]

    async def _relay(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """Pass on whatever bytes have come, as they come (a hop between two others need not
        find the frames: it forwards what is there in one write, as a replication stream
        would); the last hop reads the frames."""
        no_delay(writer)
        if self.next_hop is not None:
            while data := await reader.read(1 << 20):
                self.next_hop.write(data)
            return
        while True:
            try:
                head = await reader.readexactly(4)  # FRAME_LENGTH (a Struct won't pickle)
                body = await reader.readexactly(int.from_bytes(head, "little"))
            except asyncio.IncompleteReadError:
                return
            now = time.monotonic_ns()
            for at in range(0, len(body), self.record_size):
                self.keep(int.from_bytes(body[at:at + 8], "little", signed=True), now)


def start_sender(args: list[str]) -> tuple[subprocess.Popen, int]:
    """Start a sending process; returns it and the start time it announced."""
    process = subprocess.Popen([sys.executable, __file__, *args], cwd=REPO,
                               stdout=subprocess.PIPE, text=True,
                               env={**os.environ, "PYTHONPATH": str(REPO.parent)})
    line = next_line(process, "START ")
    if not line.startswith("START "):
        process.kill()
        raise RuntimeError(f"the sending process did not start: {line!r}")
    return process, int(line.split()[1])


def next_line(process: subprocess.Popen, prefix: str) -> str:
    """The process's next output line starting with `prefix` (Ray prints its warnings to the
    same stdout), or "" at its end."""
    assert process.stdout is not None
    for line in process.stdout:
        if line.startswith(prefix):
            return line
    return ""


def finish_sender(process: subprocess.Popen) -> None:
    line = next_line(process, "DONE ")
    process.wait(60)
    if not line.startswith("DONE ") or int(line.split()[1]) or process.returncode:
        raise RuntimeError(f"the sending process failed: {line!r}, exit {process.returncode}")


# --------------------------------------------------------------------------------- phases


def warm_up_topic(cluster: Cluster, topic: str) -> None:
    """One record through the topic, acks=all, before anything is timed: the first after a
    topic is created can wait a second while replica hosts start (docs/latency.md)."""
    producer = cluster.producer(acks="all")
    producer.send(topic, b"warm-up").result(60)
    producer.close()
    consumer = cluster.consumer([topic], auto_offset_reset="earliest")
    deadline = time.monotonic() + 60
    while not consumer.poll(timeout_ms=100) and time.monotonic() < deadline:
        pass
    consumer.close()


def rafka_latency(cluster: Cluster, topic: str, linger_ms: int, args: argparse.Namespace,
                  transport: str) -> dict[str, Any]:
    total = int(args.rate * (args.warmup + args.seconds))
    warm_up_topic(cluster, topic)
    consumer = cluster.consumer([topic], auto_offset_reset="latest", transport=transport)
    for tp in consumer.assignment():
        consumer.position(tp.topic, tp.partition)
    hosts = cluster.replica_hosts(topic, 0)
    ray.get([host.start_tracing_path.remote(topic, 0) for host in hosts.values()])
    leader = cluster.describe_topic(topic)["partitions"][0]["leader"]
    host_pids = {broker: ray.get(host.pid.remote()) for broker, host in hosts.items()}
    requests_file = Path(tempfile.mkdtemp(prefix="rafka-bench-latency-")) / "requests"
    sender, start = start_sender([
        "producer", ray.get_runtime_context().gcs_address, str(cluster.stack.zk_address),
        cluster.name, topic, str(args.rate), str(total), str(args.record_size),
        str(linger_ms), str(requests_file), transport, str(args.max_in_flight),
        args.producer_calls])
    counted_from = start + int(args.warmup * 1e9)
    followers = sorted(broker for broker in host_pids if broker != leader)
    cpu = CpuWindow({"producer_process": sender.pid, "leader_host": host_pids[leader],
                     **{f"follower_host_{n}": host_pids[broker]
                        for n, broker in enumerate(followers, 1)},
                     "consumer_process": os.getpid()},
                    counted_from, counted_from + int(args.seconds * 1e9))
    cpu.start()
    # Plain tuples while timing, TracedRecords after: the collector stops tracking a tuple of
    # ints, but not a named tuple, and every full collection walked the million of them (nine
    # over a 25 s run at 50,000/s, up to 265 ms each, the consumer stopped meanwhile).
    rows: list[tuple[int, int, int, int]] = []
    settle_heap()
    deadline = time.monotonic() + args.warmup + args.seconds + 60
    try:
        while len(rows) < total and time.monotonic() < deadline:
            records = consumer.poll(timeout_ms=100)
            now = time.monotonic_ns()
            for record in records:
                rows.append((record.offset, *STAMPS.unpack_from(record.value), now))
        finish_sender(sender)
    finally:
        if sender.poll() is None:
            sender.kill()
        consumer.close()
    if len(rows) != total:
        raise RuntimeError(f"{len(rows)} of {total} records arrived")
    traced = list(map(TracedRecord._make, rows))
    events = {broker: ray.get(host.stop_tracing_path.remote(topic, 0))
              for broker, host in hosts.items()}
    requests = [SentRequest(*request) for request in msgpack.unpackb(requests_file.read_bytes())]
    shutil.rmtree(requests_file.parent, ignore_errors=True)
    counted = [record for record in traced if record.due_ns >= counted_from]
    samples = [(record.due_ns, (record.polled_ns - record.due_ns) / 1e6) for record in traced]
    return {**summary(samples, total, counted_from),
            "produce_requests": len(requests),
            "cpu": cpu.summary(args.rate),
            "hops": hop_summary(hop_breakdown(counted, requests, events.pop(leader), events),
                                len(counted))}


def hop_summary(hops: dict[str, np.ndarray], counted: int) -> dict[str, Any]:
    """Each hop's mean, p50 and p99 in ms, over the records the trace showed whole."""
    traced = len(hops[HOPS[0]])
    found = {"records_traced": traced, "records_counted": counted}
    for hop in HOPS:
        values = hops[hop]
        found[hop] = ({"mean_ms": round(float(values.mean()), 3),
                          "p50_ms": round(float(np.percentile(values, 50)), 3),
                          "p99_ms": round(float(np.percentile(values, 99)), 3)}
                         if traced else None)
    return found


def chain_latency(args: argparse.Namespace) -> dict[str, Any]:
    total = int(args.rate * (args.warmup + args.seconds))
    hops: list[Any] = []
    next_hop = None
    for index in reversed(range(args.hops)):
        next_hop = Hop.options(name=f"{CHAIN_NAME}-{index}").remote(next_hop)
        hops.append(next_hop)
    last = hops[0]
    ray.get([hop.arrived.remote() for hop in hops])  # all started
    context = ray.get_runtime_context()
    return measure_chain(args, hops, last, total, [
        "chain", context.gcs_address, context.namespace, str(args.rate), str(total),
        str(args.record_size), str(args.chain_in_flight)])


def socket_chain_latency(args: argparse.Namespace) -> dict[str, Any]:
    total = int(args.rate * (args.warmup + args.seconds))
    size = max(args.record_size, STAMPS.size)
    hops = [SocketHop.remote(size) for _ in range(args.hops)]
    port = None
    for hop in reversed(hops):
        port = ray.get(hop.listen.remote(port))
    return measure_chain(args, hops, hops[-1], total, [
        "socket_chain", str(port), str(args.rate), str(total), str(size)])


def measure_chain(args: argparse.Namespace, hops: list[Any], last: Any, total: int,
                  sender_args: list[str]) -> dict[str, Any]:
    """Run a floor's sending process, wait until its `last` hop has every record, and
    summarise their latencies; the hops are killed whatever happens."""
    sender, start = start_sender(sender_args)
    try:
        finish_sender(sender)
        deadline = time.monotonic() + 60
        while (arrived := ray.get(last.arrived.remote())) < total:
            if time.monotonic() > deadline:
                raise RuntimeError(f"{arrived} of {total} records arrived")
            time.sleep(0.1)
        dues, latencies = (array(code, raw) for code, raw in
                           zip("qd", ray.get(last.taken.remote()), strict=True))
    finally:
        if sender.poll() is None:
            sender.kill()
        for hop in hops:
            ray.kill(hop)
    counted_from = start + int(args.warmup * 1e9)
    return summary(list(zip(dues, latencies, strict=True)), total, counted_from)


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "socket_chain":
        port, rate, total, size = (int(value) for value in sys.argv[2:])
        socket_chain_process(port, rate, total, size)
        return
    if len(sys.argv) > 1 and sys.argv[1] in ("producer", "chain"):
        role, rest = sys.argv[1], sys.argv[2:]
        if role == "producer":
            (address, zk, name, topic, rate, total, size, linger, requests_file, transport,
             max_in_flight, calls) = rest
            producer_process(address, zk, name, topic, int(rate), int(total), int(size),
                             int(linger), requests_file, transport, int(max_in_flight), calls)
        else:
            address, namespace, rate, total, size, in_flight = rest
            chain_process(address, namespace, int(rate), int(total), int(size), int(in_flight))
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate", type=int, default=5_000, help="records/s")
    parser.add_argument("--seconds", type=float, default=10, help="measured, after warm-up")
    parser.add_argument("--warmup", type=float, default=1)
    parser.add_argument("--record-size", type=int, default=100)
    parser.add_argument("--lingers", default="0,5", help="linger.ms values, one run each")
    parser.add_argument("--hops", type=int, default=4, help="the floor's chain length")
    parser.add_argument("--chain-in-flight", type=int, default=5,
                        help="the floor's calls in flight: its source sends what is due as "
                             "one call when fewer are (a call per record is more than Ray's "
                             "actors take here: about 550 calls/s through 4 hops)")
    parser.add_argument("--transports", default="tcp",
                        help="how requests reach the hosts, comma-separated: a cluster each, "
                             "in turn, with every --lingers run on each; each value is both "
                             "the brokers' replica.fetch.transport and the clients' "
                             "transport (tcp or ray)")
    parser.add_argument("--rounds", type=int, default=1,
                        help="how many times to go through the transports, alternating")
    parser.add_argument("--max-in-flight", type=int, default=5,
                        help="the producer's max.in.flight.requests.per.connection (Kafka's "
                             "default 5; 1 makes a partition's next batch wait for the answer "
                             "to its last, and so fewer, fuller requests)")
    parser.add_argument("--producer-calls", choices=("record", "batch"), default="record",
                        help="the producer's calls: send() per record, or send_batch() with "
                             "the records due at each wake-up, as the floors' senders send "
                             "(what a producer of almost no CPU would buy; docs/latency.md)")
    parser.add_argument("--idle-seconds", type=float, default=5.0,
                        help="the machine canary alone first, for the machine's own weather")
    parser.add_argument("--plot", help="write a chart of the percentiles to this PNG file")
    args = parser.parse_args()

    init_ray(log_to_driver=False)
    transports = args.transports.split(",")
    results: dict[str, Any] = {"rate": args.rate, "seconds": args.seconds,
                               "record_size": args.record_size, "replication_factor": 3,
                               "acks": "all", "max_in_flight": args.max_in_flight,
                               "producer_calls": args.producer_calls}
    with MachineCanary() as canary:
        idle = (canary.idle(args.idle_seconds), time.time())
        spans: dict[str, tuple[float, float]] = {}
        for round_ in range(args.rounds):
            for transport in transports:
                scratch = tempfile.mkdtemp(prefix="rafka-bench-latency-")
                cluster = Cluster.start(brokers=3,
                                        name=f"bench-latency-{os.getpid()}-{transport}",
                                        data_dir=scratch + "/data",
                                        broker_config={"replica.fetch.transport": transport})
                try:
                    for linger in (int(value) for value in args.lingers.split(",")):
                        topic = f"latency-linger-{linger}"
                        cluster.create_topic(topic, partitions=1, replication_factor=3)
                        key = f"rafka_linger_{linger}"
                        if len(transports) > 1:
                            key = f"rafka_{transport}_linger_{linger}"
                        if args.rounds > 1:
                            key += f"_round_{round_ + 1}"
                        began = time.time()
                        results[key] = rafka_latency(cluster, topic, linger, args, transport)
                        spans[key] = (began, time.time())
                finally:
                    cluster.shutdown()
                    shutil.rmtree(scratch, ignore_errors=True)
        began = time.time()
        results[f"ray_chain_{args.hops}_hops"] = {
            **chain_latency(args), "in_flight": args.chain_in_flight}
        spans[f"ray_chain_{args.hops}_hops"] = (began, time.time())
        began = time.time()
        results[f"socket_chain_{args.hops}_hops"] = socket_chain_latency(args)
        spans[f"socket_chain_{args.hops}_hops"] = (began, time.time())
    # How much of each run the machine itself was stalled (bench/machine_canary.py): a tail
    # is only comparable between runs whose shares are alike.
    results["machine_slow_fraction_idle"] = canary.slow_fraction(*idle)
    for key, (began, ended) in spans.items():
        results[key]["machine_slow_fraction"] = canary.slow_fraction(began, ended)
    results["machine_canary_median_ms"] = round(canary.median_ms, 3)
    floor = results[f"ray_chain_{args.hops}_hops"]["p99_ms"]
    sockets = results[f"socket_chain_{args.hops}_hops"]["p99_ms"]
    for key in [key for key in results if key.startswith("rafka_") and "_vs_" not in key]:
        results[f"{key}_p99_vs_ray_chain"] = round(results[key]["p99_ms"] / floor, 2)
        results[f"{key}_p99_vs_socket_chain"] = round(results[key]["p99_ms"] / sockets, 2)
    print(json.dumps(results, indent=2))
    if args.plot:
        plot(results, args.plot)


def plot(results: dict[str, Any], out: str) -> None:
    plt = pyplot()
    if plt is None:
        print("matplotlib is not installed: no plot")
        return
    runs = {key: value for key, value in results.items() if isinstance(value, dict)}
    traced = {key: value["hops"] for key, value in runs.items()
              if value.get("hops", {}).get("records_traced")}
    figure, (percentiles, hops) = plt.subplots(1, 2, figsize=(12, 5))
    marks = ["p50_ms", "p99_ms", "p999_ms", "max_ms"]
    for key, value in runs.items():
        percentiles.plot(marks, [value[mark] for mark in marks], marker="o", label=key)
    percentiles.set_yscale("log")
    percentiles.set_ylabel("ms from due to delivered")
    percentiles.set_title(f"{results['rate']} records/s, RF 3, acks=all")
    percentiles.legend()
    # Each rafka run's mean latency, hop by hop, stacked in the order of a record's way.
    bottoms = [0.0] * len(traced)
    for hop in HOPS:
        means = [breakdown[hop]["mean_ms"] for breakdown in traced.values()]
        hops.bar(list(traced), means, bottom=bottoms, label=hop)
        bottoms = [bottom + mean for bottom, mean in zip(bottoms, means, strict=True)]
    hops.set_ylabel("mean ms, hop by hop")
    hops.legend(fontsize="small", reverse=True)
    figure.tight_layout()
    figure.savefig(out)

if __name__ == "__main__":
    main()
