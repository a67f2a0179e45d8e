"""The multi-node test bed itself: nodes reach each other by their own addresses, cuts drop
packets both ways or one way, a paused node says nothing, a killed node's processes are gone,
and nothing of the bed is left behind, even by a run that crashed."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time

import psutil
import pytest

from tests.support.testbed import PREFIX, TestBed, sweep_leftovers
from tests.support.waiting import wait_until

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="network namespaces need root")

PORT = 7070
# An echo server, and a client that says whether the server answered within a timeout.
SERVER = ("import socket, sys\n"
          "s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n"
          "s.bind(('0.0.0.0', int(sys.argv[1]))); s.listen()\n"
          "while True:\n"
          "    c, _ = s.accept(); c.sendall(c.recv(64)); c.close()\n")
CLIENT = ("import socket, sys\n"
          "try:\n"
          "    c = socket.create_connection((sys.argv[1], int(sys.argv[3])), "
          "timeout=float(sys.argv[2]))\n"
          "    c.sendall(b'ping'); print(c.recv(64).decode())\n"
          "except OSError as error:\n"
          "    print(type(error).__name__)\n")


def reaches(bed: TestBed, source: str, target: str, timeout_s: float = 1.0, *,
            port: int = PORT) -> bool:
    result = bed.run(source, [sys.executable, "-c", CLIENT, bed.nodes[target].address,
                              str(timeout_s), str(port)], timeout_s=timeout_s + 30)
    return result.stdout.strip() == "ping"


def serve(bed: TestBed, node: str, port: int = PORT) -> None:
    bed.start(node, [sys.executable, "-c", SERVER, str(port)])
    wait_until(lambda: reaches(bed, node, node, port=port), 10, f"the echo server on {node}")


@pytest.fixture
def bed():
    with TestBed(3) as created:
        yield created


def test_nodes_reach_each_other_by_their_own_addresses_and_not_the_machine(bed: TestBed) -> None:
    assert len({node.address for node in bed.nodes.values()}) == 3
    serve(bed, "n2")
    assert reaches(bed, "n1", "n2") and reaches(bed, "n3", "n2")
    # Nothing of the bed is in the machine's own namespace: no address on its subnet, no link
    # of its; and the bridge's namespace has nothing but the bridge and the nodes' cables.
    subnet = bed.network.removesuffix("0/24")
    assert subnet not in subprocess.run(["ip", "-o", "addr"], capture_output=True,
                                        text=True).stdout
    assert bed.owner not in subprocess.run(["ip", "-o", "link"], capture_output=True,
                                           text=True).stdout
    bridge_links = subprocess.run(["ip", "-n", bed.bridge_namespace, "-o", "link"],
                                  capture_output=True, text=True).stdout
    names = {line.split(":")[1].strip().split("@")[0] for line in bridge_links.splitlines()}
    assert names == {"lo", "br0", *(f"{bed.owner}v{i}" for i in (1, 2, 3))}


def test_a_node_reaches_nothing_outside_the_bed(bed: TestBed) -> None:
    # A server of the machine's own, on every address of the machine: no node gets to it.
    with socket.socket() as server:
        server.bind(("0.0.0.0", 0))
        server.listen()
        port = server.getsockname()[1]
        addresses = [line.split()[3].split("/")[0] for line in subprocess.run(
            ["ip", "-o", "-4", "addr"], capture_output=True, text=True).stdout.splitlines()
            if " lo " not in line]
        for address in addresses:
            probe = ("import socket\n"
                     "try:\n"
                     f"    socket.create_connection(('{address}', {port}), timeout=1); "
                     "print('reached')\n"
                     "except OSError as error:\n"
                     "    print(type(error).__name__)\n")
            result = bed.run("n1", [sys.executable, "-c", probe])
            assert result.stdout.strip() != "reached", address


def test_a_cut_drops_silently_both_ways_and_heals(bed: TestBed) -> None:
    serve(bed, "n1")
    serve(bed, "n2")
    bed.cut("n1", "n2")
    started = time.monotonic()
    assert not reaches(bed, "n1", "n2", timeout_s=1.0)
    assert time.monotonic() - started >= 0.9  # dropped, not refused: the client waited
    assert not reaches(bed, "n2", "n1", timeout_s=1.0)
    assert reaches(bed, "n3", "n2")  # only the pair is cut
    bed.heal()
    assert reaches(bed, "n1", "n2") and reaches(bed, "n2", "n1")


def test_a_one_way_cut_loses_only_what_one_side_sends(bed: TestBed) -> None:
    serve(bed, "n1")
    serve(bed, "n2")
    bed.cut("n1", "n2", one_way=True)
    # n1's packets to n2 are lost, so neither side completes a handshake with the other, but
    # n2's own packets still arrive at n1: its SYN is seen (and the answer lost).
    assert not reaches(bed, "n1", "n2")
    bed.heal()
    assert reaches(bed, "n1", "n2")


def test_an_isolated_node_reaches_no_one_and_no_one_reaches_it(bed: TestBed) -> None:
    for node in bed.nodes:
        serve(bed, node)
    bed.isolate("n3")
    assert not reaches(bed, "n3", "n1") and not reaches(bed, "n1", "n3")
    assert reaches(bed, "n1", "n2")
    bed.heal()
    assert reaches(bed, "n3", "n1")


def test_overlapping_cuts_are_undone_one_at_a_time_and_spare_the_ports_asked(
        bed: TestBed) -> None:
    spared = PORT + 1  # ZooKeeper's port, say, in a leader cut off from its followers
    for node in bed.nodes:
        serve(bed, node)
        serve(bed, node, spared)
    around_n1 = bed.isolate("n1", except_ports=[spared])
    assert not reaches(bed, "n1", "n2") and not reaches(bed, "n3", "n1")
    assert reaches(bed, "n1", "n2", port=spared) and reaches(bed, "n3", "n1", port=spared)
    # A second cut over the first: its drop holds although the first one spares the port.
    n1_n2 = bed.cut("n1", "n2")
    assert not reaches(bed, "n1", "n2", port=spared)
    bed.restore(around_n1)
    assert not reaches(bed, "n1", "n2") and reaches(bed, "n1", "n3")
    bed.restore(n1_n2)
    assert reaches(bed, "n1", "n2") and reaches(bed, "n2", "n1")
    # One port out of reach from a node, its own address included, and nothing else.
    no_spared = bed.cut_port("n2", spared)
    assert not reaches(bed, "n2", "n2", port=spared) and not reaches(bed, "n2", "n1", port=spared)
    assert reaches(bed, "n2", "n1") and reaches(bed, "n1", "n2", port=spared)
    bed.restore(no_spared)
    assert reaches(bed, "n2", "n1", port=spared)


def test_a_paused_node_says_nothing_until_resumed_and_a_killed_one_is_gone(bed: TestBed) -> None:
    serve(bed, "n2")
    paused = bed.pause_node("n2")
    assert paused
    wait_until(lambda: all(psutil.Process(pid).status() == psutil.STATUS_STOPPED
                           for pid in paused), 5, "the node's processes to stop")
    assert not reaches(bed, "n1", "n2", timeout_s=1.0)
    bed.resume_node("n2")
    assert reaches(bed, "n1", "n2")
    killed = bed.kill_node("n2")
    assert killed and not any(psutil.pid_exists(pid) and psutil.Process(pid).status()
                              != psutil.STATUS_ZOMBIE for pid in killed)
    assert bed.pids("n2") == []
    assert not reaches(bed, "n1", "n2")


def test_closing_leaves_nothing_and_a_crashed_runs_bed_is_swept() -> None:
    with TestBed(2) as bed:
        serve(bed, "n1")
        bed.cut("n1", "n2")
        bed.pause_node("n1")  # even paused processes and cuts in place go
        namespaces = [bed.bridge_namespace, *(n.namespace for n in bed.nodes.values())]
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    assert not any(namespace in listed for namespace in namespaces)

    # A bed whose owner died: made by a child process that exits without closing it.
    child = subprocess.run(
        [sys.executable, "-c", "from tests.support.testbed import TestBed; "
         "bed = TestBed(1, bed=250); print(bed.owner)"],
        capture_output=True, text=True, check=True)
    owner = child.stdout.strip()
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    assert f"{owner}-n1" in listed and owner.startswith(PREFIX)
    swept = sweep_leftovers()
    assert f"{owner}-n1" in swept and f"{owner}-br" in swept
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    assert owner not in listed
