"""cluster.yaml on separate network hosts (issue 22): the multi-node test bed started with the
file's own commands (each broker on a node of its own, its replicas beside it), then nodes
killed, the GCS killed, a node cut off and healed, and last a nemesis of overlapping faults of
every kind, each while a client on a node of its own writes acks=all to every partition of an
RF 3, min.insync.replicas=2 topic (and, under the nemesis, a consumer group reads it). After
each: nothing acknowledged lost or doubled, no send left without an outcome, failed sends within
a bound, and each partition's longest stretch without an acknowledged write, from the first send
to the last (the stretches before its first acknowledgement and after its last count). Each
bound is a named constant: what holds today, with the control plane as it is (issue 54, point
1, is what tightens them).

The tests share one deployment, in order; each leaves every broker back in every ISR.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

from tests.support.bed_nemesis import KINDS as NEMESIS_KINDS
from tests.support.bed_nemesis import BedNemesis, zookeeper_member
from tests.support.checker import (
    PARTITION_ANOMALY_KINDS,
    anomaly_total,
    by_partition,
    check,
    longest_read_gaps,
    longest_write_gaps,
)
from tests.support.deployment import BedClient, Deployment
from tests.support.fault_windows import unexplained_write_gaps
from tests.support.secured_clients import listener_endpoints
from tests.support.seeds import run_seed
from tests.support.testbed import TestBed
from tests.support.waiting import wait_until

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="network namespaces need root")

PARTITIONS = 6
# The bed topic's min.insync.replicas (tests/harness/bed_client.py): how many brokers of its
# three must be up for a write.
MIN_INSYNC_REPLICAS = 2
# What the figures of a run are printed under, for the notes.
FIGURES = "RAFKA-BED-FIGURES"


@pytest.fixture(scope="module")
def deployment() -> Iterator[Deployment]:
    bed = TestBed(4)
    # Short: Ray's Unix sockets live under each node's temp dir, and their paths are limited.
    deployed = Deployment(bed, Path(f"/tmp/{bed.owner}"))
    try:
        deployed.start()
        yield deployed
    finally:
        deployed.close()


def assert_nothing_lost(client: BedClient, label: str, *,
                        max_failed_sends: int) -> dict[int, float]:
    """Nothing acknowledged lost, nothing refused written, nothing twice or out of order, every
    send resolved, at most `max_failed_sends` failed; each partition's longest write gap."""
    history = client.checker_history()
    gaps = longest_write_gaps(history)
    verdict = check(history)
    figures = {"acknowledged": len(history.acks), "failed_sends": verdict.failed_sends,
               "unresolved_sends": len(verdict.unresolved), "longest_write_gap_s": gaps}
    print(f"{FIGURES} {label}: {json.dumps(figures)}")
    assert not verdict.lost, f"{len(verdict.lost)} acknowledged records lost"
    assert not verdict.aborted_reads, f"{len(verdict.aborted_reads)} refused sends written"
    assert not verdict.duplicated, f"{len(verdict.duplicated)} records twice in the log"
    assert not verdict.reordered, verdict.reordered[:3]
    assert not verdict.unresolved, (f"{len(verdict.unresolved)} sends never resolved",
                                    verdict.unresolved[:5])
    assert verdict.failed_sends <= max_failed_sends, (
        f"{verdict.failed_sends} sends failed, bound {max_failed_sends}",
        client.history()["failed"][:5])
    acknowledged = {ack.partition for ack in history.acks}
    assert len(acknowledged) == PARTITIONS, f"writes reached only partitions {sorted(acknowledged)}"
    return gaps


def describe(deployment: Deployment, topic: str, *, replicas: bool = False) -> list[dict]:
    """The topic's partitions as ZooKeeper has them; with `replicas`, every replica as its
    host sees it too (under "replica_states")."""
    result = deployment.shell(deployment.client, f"rafka topics describe {topic} --zk "
                              f"{deployment.zk_connect} --address auto --format json"
                              + (" --replicas" if replicas else ""), timeout_s=90)
    found = json.loads(result.stdout)[0]
    return [*found["partitions"], *found.get("replica_states", [])]


def partitions_led_on(client: BedClient, deployment: Deployment, node: str) -> set[int]:
    """The partitions whose leader is on `node`, as the client last saw them."""
    wait_until(lambda: (client.out / "leaders.json").exists(), 30, "the leaders known")
    known = json.loads((client.out / "leaders.json").read_text())
    return {int(p) for p, state in known["partitions"].items()
            if known["brokers"].get(str(state["leader"])) == deployment.address(node)}


def every_broker_in_every_isr(deployment: Deployment, topic: str) -> bool:
    try:
        found = describe(deployment, topic)
    except Exception:  # a node still coming back: ask again
        return False
    return len(found) == PARTITIONS and all(len(p["isr"]) == 3 for p in found)


def wait_for_every_isr(deployment: Deployment, topic: str, timeout_s: float, what: str) -> None:
    """Wait until every broker is in every ISR of `topic`; failing, say what the nodes' logs
    (their Ray's supervisors among them) said last."""
    try:
        wait_until(lambda: every_broker_in_every_isr(deployment, topic), timeout_s, what)
    except AssertionError:
        # Printed, not put in the message: pytest's short summary, the last lines CI shows,
        # then still names every failed test.
        with contextlib.suppress(Exception):
            for facts in describe(deployment, topic, replicas=True):
                print(json.dumps(facts))
        print("--- the actors' last warnings\n" + deployment.actor_warnings())
        print(deployment.logs())
        raise


def ray_node_runs(deployment: Deployment, node: str) -> int:
    """How many times `rafka supervise` has started the node's Ray."""
    state = deployment.home(node) / ".rafka" / "supervised" / "ray-node.state"
    return json.loads(state.read_text())["runs"]


def broker_processes(deployment: Deployment, node: str) -> list[int]:
    found = []
    for pid in deployment.bed.pids(node):
        try:
            if psutil.Process(pid).name() == "ray::Broker":
                found.append(pid)
        except psutil.NoSuchProcess:
            continue
    return found


# ------------------------------------------------------------------------------- the tests

def test_the_file_deploys_an_ensemble_a_broker_per_node_with_its_replicas_and_access_control(
        deployment: Deployment) -> None:
    assert len(deployment.status()["brokers"]) == 3
    for node in deployment.cluster_nodes:
        assert len(broker_processes(deployment, node)) == 1, f"one broker on {node}"
    # Every replica runs on its broker's node (replication factor 3: each broker holds one of
    # every partition), as Ray's actor table says.
    deployment.shell(deployment.client, "rafka topics create placed --partitions 3 "
                                        "--replication-factor 3 --address auto", timeout_s=90)
    placed = probe(deployment, "placement", "placed", timeout_s=120)
    assert len(set(placed["brokers"].values())) == 3, placed
    assert len(placed["replicas"]) == 9, placed
    for replica, node in placed["replicas"].items():
        broker = replica.rsplit("-", 1)[1]
        assert node == placed["brokers"][broker], (replica, placed)
    # Each member answers the four-letter words on its own node only (127.0.0.1:2181, the
    # secured profile's RAFKA_ZK_CHECK).
    modes = []
    for node in deployment.cluster_nodes:
        found = json.loads(deployment.shell(
            node, 'rafka zookeeper status --zk "$RAFKA_ZK_CHECK" --format json').stdout)
        modes += [member["mode"] for member in found["servers"]]
    assert sorted(modes) == ["follower", "follower", "leader"], modes
    # The GCS keeps its tables on the head's disk.
    assert any((deployment.home(deployment.head) / "rafka-gcs").iterdir())
    # Without Ray's token, a driver with the certificates is refused.
    tls = deployment.tls_folder(deployment.client)
    refused = deployment.bed.run(deployment.client, [
        "env", f"HOME={deployment.root / 'nobody'}", "RAY_AUTH_MODE=token",
        f"RAY_TMPDIR={deployment.root / deployment.client / 'tmp'}",
        "RAY_USE_TLS=1", f"RAY_TLS_SERVER_CERT={tls / 'node.crt'}",
        f"RAY_TLS_SERVER_KEY={tls / 'node.key'}", f"RAY_TLS_CA_CERT={tls / 'ca.pem'}",
        sys.executable, "-c",
        f"import ray; ray.init(address='{deployment.address(deployment.head)}:6379')"],
        timeout_s=120)
    assert refused.returncode != 0 and "token" in (refused.stdout + refused.stderr).lower()
    # Over ZooKeeper's TLS but without the ZooKeeper credentials, a client may look but not
    # change a thing.
    kazoo_probe = ("from kazoo.client import KazooClient\n"
                   "from kazoo.exceptions import NoAuthError\n"
                   "from rafka.coordination.zookeeper_tls import client_tls\n"
                   "import os\n"
                   "zk = KazooClient(hosts=os.environ['RAFKA_ZK'],\n"
                   "                 **client_tls().kazoo_options())\n"
                   "zk.start(timeout=30)\n"
                   "zk.get_children('/rafka/rafka/brokers/ids')\n"
                   "try:\n"
                   "    zk.create('/rafka/rafka/brokers/topics/intruder', b'{}')\n"
                   "except NoAuthError:\n"
                   "    print('refused')\n")
    assert deployment.shell(deployment.client, f"python -c {shlex.quote(kazoo_probe)}",
                            timeout_s=60).stdout.strip() == "refused"


def probe(deployment: Deployment, *argv: str, timeout_s: float = 60) -> dict[str, Any]:
    """One of tests.harness.bed_probes, run on the client node in a login's environment; what
    it found, and how long it took in all (`seconds_in_all`)."""
    started = time.monotonic()
    result = deployment.shell(deployment.client,
                              "python -m tests.harness.bed_probes " + shlex.join(argv),
                              timeout_s=timeout_s)
    found = json.loads(result.stdout.strip().splitlines()[-1])
    found["seconds_in_all"] = round(time.monotonic() - started, 1)
    print(f"{FIGURES} probe {argv[0]}: {json.dumps(found)[:600]}")
    return found


# Each door's refusal must come within this (the probes give up after 8 s).
QUICK_REFUSAL_S = 10


def test_the_secured_profile_serves_its_users_and_refuses_everyone_else(
        deployment: Deployment) -> None:
    """From the client node, as a user of the secured deployment: a SCRAM-SHA-512 user made
    with `rafka users create` and given ACLs with `rafka acls add` produces and consumes over
    SASL_SSL; a wrong password, a plaintext Kafka client, the brokers' local port, ZooKeeper
    without TLS, a data port in the clear and a Ray driver without the certificates get
    nothing."""
    client = deployment.client
    # Started first, as it only waits for Ray to give up: it runs beside the other probes.
    with start_ray_driver_without_tls(deployment) as unjoined:
        brokers = deployment.status()["brokers"]
        sasl = listener_endpoints(brokers, "SASL_SSL")
        assert len(sasl) == 3 and all(host != "127.0.0.1" for host, _ in sasl), sasl
        bootstrap = ",".join(f"{host}:{port}" for host, port in sasl)
        ca = str(deployment.tls_folder(client) / "ca.pem")
        password = secrets.token_urlsafe(12)
        # `--password=` because a random password may start with "-", which argparse would
        # otherwise take for an option.
        deployment.shell(client, f"rafka users create --user alice --mechanism SCRAM-SHA-512 "
                                 f"--password={password} --address auto", timeout_s=90)
        deployment.shell(client, "rafka topics create secured --partitions 3 "
                                 "--replication-factor 3 --address auto", timeout_s=90)
        deployment.shell(client, "rafka acls add --allow-principal User:alice --operation Write "
                                 "--operation Read --operation Describe --topic secured "
                                 "--group secured-group --address auto", timeout_s=90)

        found = probe(deployment, "sasl-round-trip", bootstrap, ca, "alice", password, "secured",
                      timeout_s=120)
        assert found["produced"] == 20 and not found["delivery_errors"], found
        assert found["read_back"], found

        wrong = probe(deployment, "sasl-wrong-password", bootstrap, ca, "alice", "not-" + password)
        assert not wrong["served"], wrong
        assert wrong["authentication_failed_after_s"] is not None, wrong
        assert wrong["authentication_failed_after_s"] < QUICK_REFUSAL_S, wrong

        plaintext = probe(deployment, "plaintext-kafka", bootstrap)
        assert not plaintext["served"], plaintext

        # The brokers' PLAINTEXT listener is on 127.0.0.1, of each node alone.
        local = listener_endpoints(brokers, "PLAINTEXT")
        assert local and all(host == "127.0.0.1" for host, _ in local), local
        for broker in brokers:
            [(host, _)] = listener_endpoints([broker], "SASL_SSL")
            [(_, port)] = listener_endpoints([broker], "PLAINTEXT")
            assert probe(deployment, "tcp", host, str(port))["error"] == "refused", broker

        members = [deployment.address(node) for node in deployment.cluster_nodes]
        for port in (2181, 2182):
            unreached = probe(deployment, "zookeeper-plain",
                              ",".join(f"{member}:{port}" for member in members))
            assert not unreached["session"], (port, unreached)
            assert unreached["seconds_in_all"] < 3 * QUICK_REFUSAL_S, unreached
        assert probe(deployment, "tcp", members[0], "2181")["error"] == "refused"

        # A data port, learnt as an operator's driver learns it (an actor call), then reached in
        # the clear.
        port = probe(deployment, "data-port-address", "secured", "0", timeout_s=120)
        assert port["tls"], port
        clear = probe(deployment, "data-port", port["host"], str(port["port"]))
        # Nothing served: closed, at most after a TLS alert (a record of type 21).
        assert clear["connected"] and clear["outcome"] != "silent", clear
        assert clear["answer"] == "" or clear["answer"].startswith("15"), clear

        # A driver with the token but without Ray's TLS cannot join: the GCS takes no gRPC in
        # the clear.
        stdout, stderr = unjoined.communicate(timeout=60)
        said = stdout + stderr
        print(f"{FIGURES} probe ray-without-tls: exit {unjoined.returncode}: {said[-600:]}")
        assert unjoined.returncode != 0 and "joined" not in stdout
        assert "Failed to connect to GCS" in said, said[-2000:]


def start_ray_driver_without_tls(deployment: Deployment) -> subprocess.Popen[str]:
    """A Ray driver on the client node with the token but without Ray's TLS, trying to join.
    Ray says it failed to connect to the GCS after 5 s, then waits 30 s more for the cluster's
    id before it gives up: it is stopped at 20 s (which leaves room for a slow start)."""
    client = deployment.client
    return subprocess.Popen([
        *deployment.bed.enter(client), "env", f"HOME={deployment.home(client)}",
        "RAY_AUTH_MODE=token", f"RAY_TMPDIR={deployment.root / client / 'tmp'}", "timeout",
        "-s", "KILL", "20", sys.executable, "-c",
        f"import ray; ray.init(address='{deployment.address(deployment.head)}:6379'); "
        "print('joined', len(ray.nodes()))"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


# The single-fault tests' bounds (issue 54); after each, what runs here gave (gaps up to the
# end of the run). Sends have delivery.timeout.ms (120 s), longer than any of these faults
# stops a partition's writes: none may fail (none did).
MAX_FAILED_SENDS_SINGLE_FAULT = 0
# A node killed (worker or head) or the GCS down: the longest write gap of the partitions it
# led, which move to another broker once its ZooKeeper session (6 s) expires or, with the GCS
# down, which its broker keeps leading (6.8 to 7.6 s killed, 5.8 s GCS down) ...
LED_MAX_WRITE_GAP_S = 10
# ... and of every other partition, and their reads, which wait only for the leader to drop
# the follower from the ISR (replica.lag.time.max.ms, 3 s in cluster.yaml: 3.0 to 4.1 s).
FOLLOWED_MAX_GAP_S = 5
# A node cut off: the partitions it led move once its session expires. When the ensemble's
# leader is on that node too, ZooKeeper first elects another (syncLimit, 3 s), and the new
# leader gives every session its whole timeout again: the session expires about 10 s after the
# cut (10.9 s; 11.0 s in another run). Writes to the partitions it followed wait for the ISR
# to drop it, which waits for the leader's ZooKeeper session to reconnect after that election
# (3.7 s; 5.2 s when it did). Kafka's brokers, whose ISR changes went through ZooKeeper too,
# pay the same.
CUT_OFF_LED_MAX_WRITE_GAP_S = 15
CUT_OFF_FOLLOWED_MAX_WRITE_GAP_S = 8
# How long a cut-off node's broker may take to be back in every ISR after the heal, for good:
# its broker rejoins within seconds (3.0 s), but Ray, which declared the node dead during the
# cut, then tells its raylet to exit, `rafka supervise` starts Ray again and Ray restarts the
# broker (27.6 s after the heal; 46 and 60 s before brokers prestarted their replica hosts).
BACK_AFTER_CUT_S = 120


def kill_then_boot(deployment: Deployment, node: str, topic: str, tmp_path: Path, *,
                   down_s: float, back_within_s: float) -> None:
    """Kill every process of `node` under a writing client; once every partition takes writes
    again, leave it down `down_s` more, then boot it (its start commands) and wait until its
    broker is back in every ISR (Ray starts on the node and restarts its broker there, which
    `back_within_s` bounds). Asserts the bounds on each partition's longest write gap."""
    with BedClient(deployment, topic, tmp_path / "client", partitions=PARTITIONS) as client:
        time.sleep(5)
        led = partitions_led_on(client, deployment, node)
        assert led, f"{node} leads none of {topic}'s partitions: its loss would move nothing"
        killed_at = time.time()
        deployment.bed.kill_node(node)
        # Writes go on without it: every partition acknowledged after the kill, those it led
        # by their new leaders.
        wait_until(lambda: all(at > killed_at + 1 for at in
                               client.progress()["last_ack"].values()), 60,
                   f"every partition acknowledging writes after {node}'s loss")
        time.sleep(down_s)
        deployment.start_node(node)  # the machine boots, and runs its start commands
        booted_at = time.monotonic()
        wait_for_every_isr(deployment, topic, back_within_s,
                           f"{node}'s broker back in every ISR")
        print(f"{FIGURES} {node} killed: back in every ISR "
              f"{time.monotonic() - booted_at:.1f} s after its start commands")
        time.sleep(3)
    gaps = assert_nothing_lost(client, f"{node} killed",
                               max_failed_sends=MAX_FAILED_SENDS_SINGLE_FAULT)
    assert_led_and_followed_gaps(gaps, led, LED_MAX_WRITE_GAP_S, FOLLOWED_MAX_GAP_S)


def assert_led_and_followed_gaps(gaps: dict[int, float], led: set[int], led_bound_s: float,
                                 followed_bound_s: float) -> None:
    """The partitions the faulty node led, and the others, each within their bound."""
    led_gaps = {p: gap for p, gap in gaps.items() if p in led}
    followed_gaps = {p: gap for p, gap in gaps.items() if p not in led}
    assert max(led_gaps.values(), default=0) <= led_bound_s, ("led", led_gaps)
    assert max(followed_gaps.values(), default=0) <= followed_bound_s, ("followed", followed_gaps)


def test_a_worker_node_killed_then_restarted(deployment: Deployment, tmp_path: Path) -> None:
    kill_then_boot(deployment, deployment.cluster_nodes[-1], "node-kill", tmp_path, down_s=5,
                   back_within_s=180)


def test_the_gcs_down_for_30_s(deployment: Deployment, tmp_path: Path) -> None:
    head = deployment.head
    supervisor = next(psutil.Process(pid) for pid in deployment.bed.pids(head)
                      if "rafka.cli.supervisor" in " ".join(psutil.Process(pid).cmdline()))
    with BedClient(deployment, "gcs-down", tmp_path / "client", partitions=PARTITIONS,
                   consumers=2) as client:
        time.sleep(5)
        led_on_head = partitions_led_on(client, deployment, head)
        # Held down: the head's supervisor waits, paused, while the GCS is gone (its
        # `ray start --block` takes the head's other Ray processes with it, as a head restart).
        supervisor.send_signal(signal.SIGSTOP)
        try:
            deployment.kill_gcs()
            time.sleep(30)
        finally:
            supervisor.send_signal(signal.SIGCONT)
        resumed_at = time.monotonic()
        runs_before = ray_node_runs(deployment, head)
        # Generous: four machines' processes share two cores here. The starts of the head's
        # Ray are printed: more than one means its raylet gave up on its agent again
        # (docs/deployment.md, "What runs on every node").
        wait_for_every_isr(deployment, "gcs-down", 360,
                           "the head's broker back in every ISR")
        print(f"{FIGURES} GCS down 30 s: head back in every ISR "
              f"{time.monotonic() - resumed_at:.0f} s after its supervisor resumed, "
              f"{ray_node_runs(deployment, head) - runs_before} starts of its Ray")
        time.sleep(3)
    gaps = assert_nothing_lost(client, "GCS down 30 s",
                               max_failed_sends=MAX_FAILED_SENDS_SINGLE_FAULT)
    read_gaps = longest_read_gaps(client.checker_history())
    elsewhere = {p: gap for p, gap in gaps.items() if p not in led_on_head}
    read_elsewhere = {p: gap for p, gap in read_gaps.items() if p not in led_on_head}
    print(f"{FIGURES} GCS down 30 s: led on the head {sorted(led_on_head)}, longest write gap "
          f"of the others {max(elsewhere.values(), default=0):.1f} s, longest read gap "
          f"{max(read_elsewhere.values(), default=0):.1f} s")
    assert_led_and_followed_gaps(gaps, led_on_head, LED_MAX_WRITE_GAP_S, FOLLOWED_MAX_GAP_S)
    # Consumers of the partitions not led on the head never stop for long either.
    assert len(read_gaps) == PARTITIONS, f"reads of only partitions {sorted(read_gaps)}"
    assert max(read_elsewhere.values(), default=0) <= FOLLOWED_MAX_GAP_S, (
        led_on_head, read_gaps)


def test_the_head_node_killed_then_booted(deployment: Deployment, tmp_path: Path) -> None:
    # The GCS, a ZooKeeper member and a broker at once; the workers' Ray waits for the GCS.
    kill_then_boot(deployment, deployment.head, "head-kill", tmp_path, down_s=10,
                   back_within_s=360)


# Longer than Ray's health check allows a silent node (5 checks of 3 s + 10 s: 65 s), so that
# Ray always declares the node dead and the path under test is always the same: its raylet told
# to exit at the heal, `rafka supervise` starting it again, Ray restarting the broker there. A
# 60 s cut raced the fifth check and took either path (7 s or 64 s back).
CUT_OFF_S = 80
def test_a_node_cut_off_past_rays_health_check_comes_back_by_itself(deployment: Deployment,
                                                                    tmp_path: Path) -> None:
    victim = deployment.cluster_nodes[1]
    with BedClient(deployment, "cut-off", tmp_path / "client",
                   partitions=PARTITIONS) as client:
        time.sleep(5)
        led_by_victim = partitions_led_on(client, deployment, victim)
        brokers_before = set(broker_processes(deployment, victim))
        deployment.bed.isolate(victim)
        try:
            time.sleep(CUT_OFF_S)
        finally:
            deployment.bed.heal()
        healed_at = time.time()
        wait_for_every_isr(deployment, "cut-off", BACK_AFTER_CUT_S,
                           f"{victim}'s broker back in every ISR, with no command typed")
        first_back_s = time.time() - healed_at
        # Not yet for good: the client writes on while Ray has the node's raylet exit and
        # starts the broker again there, and the gaps count what that costs too.
        wait_until(lambda: set(broker_processes(deployment, victim)) - brokers_before,
                   BACK_AFTER_CUT_S, f"{victim}'s broker started again by Ray")
        # Long enough for its leaders to have dropped the old process (replica.lag.time.max.ms)
        # had it been in every ISR still; the client's timeline says when the ISRs were full
        # for good.
        time.sleep(10)
        wait_for_every_isr(deployment, "cut-off", BACK_AFTER_CUT_S,
                           f"{victim}'s broker, restarted by Ray, back in every ISR")
    back_after_s = full_for_good(client.out / "leaders.jsonl", PARTITIONS) - healed_at
    print(f"{FIGURES} cut off {CUT_OFF_S} s: back in every ISR {first_back_s:.1f} s after the "
          f"heal, and for good (Ray having restarted the broker) after {back_after_s:.1f} s")
    gaps = assert_nothing_lost(client, f"node cut off {CUT_OFF_S} s",
                               max_failed_sends=MAX_FAILED_SENDS_SINGLE_FAULT)
    assert back_after_s <= BACK_AFTER_CUT_S, back_after_s
    assert_led_and_followed_gaps(gaps, led_by_victim, CUT_OFF_LED_MAX_WRITE_GAP_S,
                                 CUT_OFF_FOLLOWED_MAX_WRITE_GAP_S)


# How long every broker may take to be back in every ISR, and every partition to take writes,
# once the quorum is back and the killed node booted: a broker that fenced itself takes its
# replicas back from ZooKeeper at once, and the killed one is restarted by Ray.
QUORUM_BACK_S = 120


def test_the_quorum_lost_while_one_node_is_isolated_and_another_killed(
        deployment: Deployment, tmp_path: Path) -> None:
    """The faults of a CI nemesis run (seed 1323723241) that left a partition unwritable, made
    on purpose: one member paused and another's node isolated leave the third without a
    quorum, past the brokers' session timeout, and that third node is killed meanwhile. Every
    broker fences itself, the two that live on keep their sessions (ZooKeeper expires none
    without a quorum), and the killed one comes back as a new process."""
    first, isolated, killed = deployment.cluster_nodes
    with BedClient(deployment, "quorum-lost", tmp_path / "client",
                   partitions=PARTITIONS) as client:
        time.sleep(5)
        member = zookeeper_member(deployment, first)
        assert member is not None, f"no ZooKeeper member runs on {first}"
        member.suspend()
        cut = deployment.bed.isolate(isolated)
        try:
            time.sleep(12)  # past the session timeout: every broker fences itself
            deployment.bed.kill_node(killed)
            time.sleep(8)
        finally:
            deployment.bed.restore(cut)
            member.resume()
        healed_at = time.time()
        deployment.start_node(killed)
        wait_for_every_isr(deployment, "quorum-lost", QUORUM_BACK_S,
                           "every broker back in every ISR after the quorum returned")
        wait_until(lambda: all(at > healed_at for at in
                               client.progress()["last_ack"].values()), 60,
                   "every partition acknowledging writes after the quorum returned")
        print(f"{FIGURES} quorum lost: back in every ISR {time.time() - healed_at:.1f} s "
              "after the heal")
        time.sleep(3)
    assert_nothing_lost(client, "quorum lost", max_failed_sends=MAX_FAILED_SENDS_SINGLE_FAULT)


# How long the nemesis makes faults: 180 s in the suite, as the issue asks; its long run is 600
# (RAFKA_BED_NEMESIS_SECONDS=600). Each run draws a new seed and prints it;
# RAFKA_BED_NEMESIS_SEED (or RAFKA_SEED) replays a run's choices.
NEMESIS_SECONDS = float(os.environ.get("RAFKA_BED_NEMESIS_SECONDS", "180"))
# How long every broker may take to be back in every ISR after the last heal: 2.4 to 19.7 s
# in nine runs here, but one CI run of 2026-12-07 had a broker (isolated 31 s at the end) not
# back within 180 s. A cut can leave a broker's connection to Ray's GCS half-open, and Ray's
# gRPC clients find that out only after 300 s without traffic and 120 s more
# (grpc_client_keepalive_time_ms and _timeout_ms); what on that broker's path still waits on
# Ray is not found yet (docs/deployment.md).
BACK_IN_EVERY_ISR_S = 480
# Each partition's longest stretch without an acknowledged write, and without a read, up to
# the end of the run. Two of three nodes faulty at once stop writes (min.insync.replicas 2),
# so the nemesis keeps a second fault to `bed_nemesis.DOUBLE_FAULT_S` and adds one only while
# every partition is writable without the faulty node: what is left is the cluster's own
# recovery.
NEMESIS_MAX_WRITE_GAP_S = 60
NEMESIS_MAX_READ_GAP_S = 60
# The share of the sends attempted that may fail under the nemesis: a send may find no leader
# within max.block.ms, or wait in a partition that takes no write past delivery.timeout.ms
# (120 s). Runs here: none failed.
NEMESIS_MAX_FAILED_SENDS_SHARE = 0.1


@pytest.mark.timeout(NEMESIS_SECONDS + BACK_IN_EVERY_ISR_S + 600)
def test_a_nemesis_of_overlapping_faults_loses_nothing(deployment: Deployment,
                                                        tmp_path: Path) -> None:
    """Random, overlapping faults of every kind (tests/support/bed_nemesis.py) under an
    acks=all idempotent producer and a consumer group of two."""
    seconds = NEMESIS_SECONDS
    seed = run_seed("the bed nemesis", variable="RAFKA_BED_NEMESIS_SEED")
    print(f"{FIGURES} nemesis: {seconds:g} s, seed {seed}")
    with BedClient(deployment, "nemesis", tmp_path / "client", partitions=PARTITIONS,
                   consumers=2) as client:
        nemesis = BedNemesis(deployment, client.out / "leaders.json", seed=seed,
                             min_insync_replicas=MIN_INSYNC_REPLICAS)
        nemesis.start()
        try:
            time.sleep(seconds)
        finally:
            nemesis.stop()
        healed_at = time.time()
        wait_for_every_isr(deployment, "nemesis", BACK_IN_EVERY_ISR_S,
                           "every broker back in every ISR after the last heal")
        back_after_s = time.time() - healed_at
        wait_until(lambda: all(at > healed_at + back_after_s for at in
                               client.progress()["last_ack"].values()), 60,
                   "every partition acknowledging writes after the last heal")
        time.sleep(3)
    history = client.checker_history()
    history.faults = nemesis.faults
    verdict = check(history)
    partitions = by_partition(history, verdict)
    unexplained = unexplained_write_gaps(history, nemesis.faults,
                                         len(deployment.cluster_nodes), MIN_INSYNC_REPLICAS)
    for partition, gap in unexplained.items():
        partitions[partition]["write_gap_the_faults_do_not_explain_s"] = round(gap, 3)
    started = min(history.attempts)
    print(f"{FIGURES} nemesis: " + json.dumps({
        "faults": nemesis.counts(), "failed_heals": nemesis.failed_heals,
        "acknowledged": len(history.acks), "polls": len(history.polls),
        "rebalances": len(history.rebalances),
        "back_in_every_isr_after_last_heal_s": round(back_after_s, 1),
        "faults_in_place_s": [[fault.kind, fault.node, round(fault.at - started, 1),
                               round(fault.healed - started, 1)] for fault in nemesis.faults],
        "consumer_errors": client.history()["consumer_errors"],
        "summary": verdict.summary(), "per_partition": partitions}))
    assert set(nemesis.counts()) == set(NEMESIS_KINDS), (
        f"faults of only some kinds in {seconds:g} s", nemesis.counts())
    assert len(partitions) == PARTITIONS
    assert not verdict.unresolved, (f"{len(verdict.unresolved)} sends never resolved",
                                    verdict.unresolved[:5])
    assert verdict.failed_sends <= NEMESIS_MAX_FAILED_SENDS_SHARE * len(history.attempts), (
        len(history.attempts), verdict.summary())
    gaps = {p: found["longest_write_gap_s"] for p, found in partitions.items()}
    assert max(gaps.values()) <= NEMESIS_MAX_WRITE_GAP_S, gaps
    read_gaps = {p: found["longest_read_gap_s"] for p, found in partitions.items()}
    assert max(read_gaps.values()) <= NEMESIS_MAX_READ_GAP_S, read_gaps
    assert anomaly_total(partitions) == 0, {
        p: {kind: count for kind, count in found.items() if kind in PARTITION_ANOMALY_KINDS
            and count} for p, found in partitions.items()}
    assert all(found["acknowledged"] > 0 for found in partitions.values())
    # Every broker ran on its own node throughout: one restarted elsewhere would find another
    # node's data directory (actors/broker_nodes.py).
    hosts = broker_hosts_seen(client.out / "leaders.jsonl")
    assert all(len(seen) == 1 for seen in hosts.values()), hosts


def full_for_good(timeline: Path, partitions: int) -> float:
    """When the client's leaders timeline last changed to every ISR full (three brokers in each
    of `partitions`) and stayed so to its end."""
    entries = [json.loads(line) for line in timeline.read_text().splitlines()]
    since = None
    for entry in entries:
        full = (len(entry["partitions"]) == partitions
                and all(len(state["isr"]) == 3 for state in entry["partitions"].values()))
        if not full:
            since = None
        elif since is None:
            since = entry["at"]
    assert since is not None, f"the ISRs were not full at the end: {entries[-1:]}"
    return since


def broker_hosts_seen(timeline: Path) -> dict[str, set[str]]:
    """Each broker's registered hosts over a run, from the client's leaders timeline."""
    hosts: dict[str, set[str]] = {}
    for line in timeline.read_text().splitlines():
        for broker, host in json.loads(line)["brokers"].items():
            hosts.setdefault(broker, set()).add(host)
    return hosts
