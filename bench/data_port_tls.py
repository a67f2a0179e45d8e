"""A replica host's data port over TLS beside in the clear: throughput of rafka's own clients.

    python bench/data_port_tls.py [--seconds 3] [--repeats 5] [--mb 1]

No Ray, no ZooKeeper: two processes, each serving a `DataPort` (the replica hosts' own class)
whose host methods answer at once (`tests/support/data_ports.py`), one in the clear and one
with mutual TLS (`security.inter.broker.protocol=SSL`'s contexts, from certificates made by
trustme, the `test` extra). This process talks to each through the blocking client producers
and consumers use (`TcpCalls`, its lookup of the host's address, an actor call, stood in
for): `produce` sends requests of `--mb` MiB (a producer's direction) and `fetch` reads
answers of `--mb` MiB (a consumer's and a follower's), one request at a time, for `--seconds`
each. The rounds alternate the two ports (ABAB), so that both see the same stretch of the
machine's weather. Prints one JSON object: per port and direction the median MB/s, and
`tls_over_plaintext`, TLS's share of the plaintext rate, beside `ssl_only_mb_per_s`: what
Python's `ssl` alone moves per second here (one TLS connection over memory buffers, both ends
in this process, no sockets), and `tls_over_expected`: TLS's rate over the rate it would have
if it cost plaintext's time per MB plus ssl's alone (1.0: TLS costs what ssl costs).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import multiprocessing
import os
import ssl
import statistics
import sys
import tempfile
import time
from pathlib import Path

import trustme

from rafka.actors.dataport.blocking_client import TcpCalls
from rafka.actors.dataport.tls import DataPortTls, TlsSession, client_context, server_context
from rafka.actors.messages import PartitionFetch, PartitionProduce
from tests.support.data_ports import StandInHost, lookups_answered_at_once, serve_in_process


def rate(calls: TcpCalls, host: StandInHost, method: str, arguments: tuple, seconds: float,
         mb: float) -> float:
    """MB/s of `method` requests one at a time for `seconds` (after one to connect)."""
    def call() -> None:
        key = calls.send("host", host, method, arguments, timeout_s=60)
        while not calls.wait([key], 60):
            pass
        calls.result(key)

    call()
    count, began = 0, time.perf_counter()
    while time.perf_counter() - began < seconds:
        call()
        count += 1
    return count * mb / (time.perf_counter() - began)


def ssl_only(tls: DataPortTls, payload: bytes, seconds: float) -> float:
    """MB/s Python's ssl moves from a client to a server through memory buffers."""
    client = TlsSession(client_context(tls))
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    server = server_context(tls).wrap_bio(incoming, outgoing, server_side=True)
    while not client.established:
        incoming.write(client.outgoing())
        with contextlib.suppress(ssl.SSLWantReadError):
            server.do_handshake()
        client.receive(outgoing.read())
    count, began = 0, time.perf_counter()
    while time.perf_counter() - began < seconds:
        client.send(payload)
        incoming.write(client.outgoing())
        received = 0
        while received < len(payload):
            received += len(server.read(len(payload)))
        count += 1
    return count * len(payload) / 1e6 / (time.perf_counter() - began)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--mb", type=float, default=1.0, help="MiB per request or answer")
    args = parser.parse_args()
    size = int(args.mb * 1024 * 1024)
    folder = Path(tempfile.mkdtemp(prefix="rafka-data-port-tls-bench-"))
    ca = trustme.CA()
    ca.cert_pem.write_to_path(str(folder / "ca.pem"))
    ca.issue_cert("rafka-node").private_key_and_cert_chain_pem.write_to_path(
        str(folder / "node.pem"))
    tls = DataPortTls(str(folder / "node.pem"), str(folder / "ca.pem"))
    mb = size / 1e6
    context = multiprocessing.get_context("spawn")
    servers, hosts = [], {}
    for protocol, port_tls in (("PLAINTEXT", None), ("SSL", tls)):
        ours, theirs = context.Pipe()
        server = context.Process(target=serve_in_process, args=(port_tls, size, theirs),
                                 daemon=True)
        server.start()
        servers.append((server, ours))
        hosts[protocol] = StandInHost(ours.recv())
    try:
        produce_arguments = ([PartitionProduce("bench", 0, os.urandom(size))], 1, 30_000)
        fetch_arguments = ([PartitionFetch("bench", 0, 0, size)], 0, 1, size, False)
        rates: dict[str, dict[str, list[float]]] = {
            protocol: {"produce": [], "fetch": []} for protocol in hosts}
        with lookups_answered_at_once():
            for run in range(args.repeats):
                for protocol, host in hosts.items():
                    calls = TcpCalls(30.0, size)
                    try:
                        rates[protocol]["produce"].append(
                            rate(calls, host, "produce", produce_arguments, args.seconds, mb))
                        rates[protocol]["fetch"].append(
                            rate(calls, host, "fetch", fetch_arguments, args.seconds, mb))
                    finally:
                        calls.close()
                    print(f"{protocol} run {run}: {rates[protocol]}", file=sys.stderr)
        ssl_rate = statistics.median(ssl_only(tls, os.urandom(size), args.seconds)
                                     for _ in range(3))
        summary = {protocol: {direction: {"mb_per_s": round(statistics.median(found), 1)}
                              for direction, found in directions.items()}
                   for protocol, directions in rates.items()}
        print(json.dumps({
            "benchmark": "data_port_tls",
            "config": {"seconds": args.seconds, "repeats": args.repeats, "mb": args.mb,
                       "cpus": os.cpu_count(), "openssl": ssl.OPENSSL_VERSION},
            **summary,
            "tls_over_plaintext": {
                direction: round(summary["SSL"][direction]["mb_per_s"]
                                 / summary["PLAINTEXT"][direction]["mb_per_s"], 3)
                for direction in ("produce", "fetch")},
            "ssl_only_mb_per_s": round(ssl_rate, 1),
            # Plaintext's time per MB plus ssl's: the rate TLS would have if it cost what
            # Python's ssl costs and nothing more.
            "tls_over_expected": {
                direction: round(summary["SSL"][direction]["mb_per_s"] * (
                    1 / summary["PLAINTEXT"][direction]["mb_per_s"] + 1 / ssl_rate), 3)
                for direction in ("produce", "fetch")},
        }, indent=2))
    finally:
        for server, pipe in servers:
            pipe.close()
            server.join(10)


if __name__ == "__main__":
    main()
