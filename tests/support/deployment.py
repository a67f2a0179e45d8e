"""cluster.yaml, deployed on the test bed: each of its nodes a network namespace of the bed,
started by the very commands the file gives `ray up` (issue 22).

What the bed plays, and how:
- `ray up` runs a node's commands over SSH, in a login shell, on a machine with its own home.
  Here each node gets a home directory of its own (HOME), a temp dir of its own (RAY_TMPDIR,
  since the namespaces share one file system), and its commands run in the node's namespace
  under bash after `~/.bashrc`. The provider's addresses in the file are replaced by the bed's.
- The setup commands that install (apt-get, the venv, pip) are skipped: `~/rafka-env` is a link
  to the environment running the tests. Those that shape the shell's environment run as written.
- On a local provider, the head's autoscaler starts the workers over SSH. Here the bed starts
  them, so the head's autoscaling config lists no workers for it to start.
- The file mounts the Ray token, the ZooKeeper credentials and the cluster's certificates
  (`~/.rafka/tls`) into every home; the bed makes them once and copies them in. With the
  certificates there, every node's login sources cluster.yaml's secured profile
  (`~/.rafka-tls-profile`): the bed deploys the file's secured cluster, as a user with
  certificates would (docs/security.md, "Door by door").

An extra node that is not in the file, the client node, runs a Ray node of its own without a
broker slot: drivers (producers, consumers, checks) run there, as clients on a machine of their
own, out of the way of the faults a test makes on the cluster's nodes.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import psutil
import yaml
from ray.autoscaler._private.util import prepare_config

from .certificates import deployment_files
from .checker import (
    Ack,
    Commit,
    FailedSend,
    History,
    Poll,
    Rebalance,
    Refused,
    Revocation,
    Unresolved,
)
from .testbed import TestBed
from .waiting import wait_until

CLUSTER_YAML = Path(__file__).resolve().parents[2] / "cluster.yaml"
REPO = CLUSTER_YAML.parent
# The environment the tests run in: what every node's ~/rafka-env stands for.
ENVIRONMENT = Path(sys.prefix)
# What `ray up` would install, or set on the machine itself, rather than configure in a
# node's home: the bed has it installed already, and its nodes share this machine's /etc
# (the bed runs as root, which may raise a priority anyway).
_INSTALLS = ("apt-get", "pip install", "-m venv", "/etc/security/limits.d")
RAY_PORT = 6379
# The client node waits for the GCS as long as the cluster's workers do (cluster.yaml).
CLIENT_PATIENCE = {"RAY_gcs_rpc_server_reconnect_timeout_s": "600"}
# The secured profile's ZooKeeper port: each member's mutual-TLS port at its address, what
# every rafka client connects to (the plaintext 2181 is on each node's 127.0.0.1 only).
ZOOKEEPER_SECURE_PORT = 2182
# Errors that say a record was not written: a send's error is its last attempt's, so only an
# error the producer does not retry (it fails the first attempt, and no attempt came before)
# is certain. A retriable one (NotEnoughReplicasError among them: a retry of a batch that an
# earlier, timed-out attempt appended is refused so too) leaves the record maybe written.
REFUSED_FOR_CERTAIN = {"RecordTooLargeError", "InvalidRecordError", "UnknownTopicError",
                       "UnknownPartitionError"}


class DeploymentError(AssertionError):
    """A command of cluster.yaml failed on a node of the bed."""


class Deployment:
    """The nodes of cluster.yaml on `bed` (its first nodes, the head first), plus a client
    node when the bed has one node more than the file. `root` holds every node's home."""

    def __init__(self, bed: TestBed, root: Path, *, config_file: Path = CLUSTER_YAML) -> None:
        self.bed = bed
        self.root = root
        self.config = yaml.safe_load(config_file.read_text())
        provider = self.config["provider"]
        placeholders = [provider["head_ip"], *provider["worker_ips"]]
        names = list(bed.nodes)
        if len(names) < len(placeholders):
            raise ValueError(f"cluster.yaml has {len(placeholders)} nodes, the bed only "
                             f"{len(names)}")
        self.cluster_nodes = names[:len(placeholders)]
        self.head = self.cluster_nodes[0]
        self.client = names[len(placeholders)] if len(names) > len(placeholders) else None
        # The file's addresses, as the bed's: longest first, so 10.0.0.1 is not found in .10.
        self.addresses = dict(sorted(
            ((placeholder, bed.nodes[name].address)
             for placeholder, name in zip(placeholders, names, strict=False)),
            key=lambda pair: -len(pair[0])))
        self.token = secrets.token_hex(32)
        self.zookeeper_credentials = f"rafka:{secrets.token_urlsafe(18)}"
        # The cluster's certificates, made once (`start`).
        self.certificates = root / "certificates"

    # ------------------------------------------------------------------------- the nodes

    def home(self, node: str) -> Path:
        return self.root / node / "home"

    def address(self, node: str) -> str:
        return self.bed.nodes[node].address

    @property
    def zk_connect(self) -> str:
        """The ensemble's secure ports: what the secured profile's RAFKA_ZK names."""
        return ",".join(f"{self.address(node)}:{ZOOKEEPER_SECURE_PORT}"
                        for node in self.cluster_nodes)

    def tls_folder(self, node: str) -> Path:
        return self.home(node) / ".rafka" / "tls"

    def environment(self, node: str) -> dict[str, str]:
        """What a login on `node` has before its ~/.bashrc runs."""
        return {
            "HOME": str(self.home(node)),
            "USER": "root",
            "PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
            "LANG": "C.UTF-8",
            "RAY_TMPDIR": str(self.root / node / "tmp"),
            "TMPDIR": str(self.root / node / "tmp"),
            # What Ray's launcher exports to the commands it runs on a node.
            "RAY_HEAD_IP": self.address(self.head),
            # The tests' own modules (tests.harness.*) are importable by a node's drivers.
            "PYTHONPATH": str(REPO),
            "PYTHONUNBUFFERED": "1",
            # RAFKA_BED_LOG_LEVEL=info: the nodes' actors log at that level (for a post-mortem
            # with RAFKA_BED_LOGS).
            **({"RAFKA_LOG_LEVEL": os.environ["RAFKA_BED_LOG_LEVEL"]}
               if os.environ.get("RAFKA_BED_LOG_LEVEL") else {}),
        }

    def _localize(self, command: str) -> str:
        for placeholder, address in self.addresses.items():
            command = command.replace(placeholder, address)
        return command

    def shell(self, node: str, command: str, *, timeout_s: float = 120,
              check: bool = True) -> subprocess.CompletedProcess[str]:
        """Run `command` on `node` as Ray's launcher would: bash, after ~/.bashrc."""
        result = subprocess.run(
            [*self.bed.enter(node), "bash", "-c", f". ~/.bashrc; {command}"],
            capture_output=True, text=True, timeout=timeout_s, env=self.environment(node),
            cwd=self.home(node))
        if check and result.returncode != 0:
            raise DeploymentError(f"on {node}, `{command}` exited {result.returncode}:\n"
                                  f"{result.stdout[-2000:]}\n{result.stderr[-4000:]}")
        return result

    def _prepare(self, node: str) -> None:
        home = self.home(node)
        (self.root / node / "tmp").mkdir(parents=True, exist_ok=True)
        (home / ".ray").mkdir(parents=True, exist_ok=True)
        (home / ".rafka").mkdir(parents=True, exist_ok=True)
        (home / ".bashrc").touch()
        (home / "rafka-env").symlink_to(ENVIRONMENT)
        (home / "rafka-src").symlink_to(REPO)
        (home / ".ray" / "auth_token").write_text(self.token)
        credentials = home / ".rafka" / "zookeeper-credentials"
        credentials.write_text(self.zookeeper_credentials + "\n")
        credentials.chmod(0o600)
        # cluster.yaml mounts the cluster's certificates (an empty folder would deploy it
        # without TLS).
        shutil.copytree(self.certificates, self.tls_folder(node), dirs_exist_ok=True)
        for command in self.config["setup_commands"]:
            if not any(install in command for install in _INSTALLS):
                self.shell(node, self._localize(command))

    def _bootstrap_config(self) -> None:
        """The head's autoscaling config, as `ray up` leaves it: the file, but with no worker
        for the autoscaler to start over SSH (the bed starts them)."""
        config = prepare_config(json.loads(json.dumps(self.config)))
        config["provider"] = {**config["provider"], "head_ip": self.address(self.head),
                              "worker_ips": []}
        config["max_workers"] = 0
        # As `ray up` leaves them: each mount at its place on the head.
        config["file_mounts"] = {path: path for path in config["file_mounts"]}
        (self.home(self.head) / "ray_bootstrap_config.yaml").write_text(yaml.safe_dump(config))

    # --------------------------------------------------------------------- bringing up

    def start(self, timeout_s: float = 300) -> None:
        """Every node of the file, then the client node; returns once the brokers are up."""
        # As cluster.yaml's header tells a user to: one certificate naming every node's
        # address (the client node's too, whose Ray node serves gRPC), 127.0.0.1 and localhost.
        deployment_files(self.certificates, [*(node.address for node in self.bed.nodes.values()),
                                             "127.0.0.1", "localhost"])
        for node in [*self.cluster_nodes, *([self.client] if self.client else [])]:
            self._prepare(node)
        self._bootstrap_config()
        for node in self.cluster_nodes:
            self.start_node(node)
        if self.client is not None:
            patience = " ".join(f"{name}={value}" for name, value in CLIENT_PATIENCE.items())
            self.shell(self.client, f"{patience} "
                                    f"rafka supervise start --stop-timeout 5 ray-node -- "
                                    f"ray start --block --num-cpus=0 --disable-usage-stats "
                                    f"--address={self.address(self.head)}:{RAY_PORT}")
        self.wait_for_brokers(len(self.cluster_nodes), timeout_s)

    def start_node(self, node: str) -> None:
        """Run the node's start commands, as `ray up` does (and as after a reboot)."""
        key = "head_start_ray_commands" if node == self.head else "worker_start_ray_commands"
        for command in self.config[key]:
            self.shell(node, self._localize(command))

    def status(self, node: str | None = None) -> dict[str, Any]:
        """`rafka status --format json`, asked on `node` (the client node by default)."""
        result = self.shell(node or self.client or self.head,
                            f"rafka status --zk {self.zk_connect} --address auto "
                            f"--format json", timeout_s=90)
        return json.loads(result.stdout)

    def wait_for_brokers(self, count: int, timeout_s: float) -> None:
        def registered() -> bool:
            try:
                return len(self.status()["brokers"]) >= count
            except (DeploymentError, subprocess.TimeoutExpired, json.JSONDecodeError):
                return False

        try:
            wait_until(registered, timeout_s, f"{count} brokers registered", interval_s=3)
        except AssertionError as error:
            raise DeploymentError(f"{error}\n{self.logs()}") from None

    def logs(self, lines: int = 40) -> str:
        """The tail of every node's rafka logs, for a failure's message."""
        found = []
        for path in sorted(self.root.glob("*/home/**/*.log")):
            # Partition segments and the GCS's tables end in .log too: binary, and no help.
            if {"rafka", "rafka-gcs"} & set(path.relative_to(self.root).parts[2:-1]):
                continue
            with contextlib.suppress(OSError):
                tail = path.read_text(errors="replace").splitlines()[-lines:]
                found.append(f"--- {path.relative_to(self.root)}\n" + "\n".join(tail))
        return "\n".join(found)

    def actor_warnings(self, lines: int = 15) -> str:
        """The last warnings and errors of each broker and replica host (their Ray worker
        logs), kazoo's reconnection chatter left out, for a failure's message."""
        noise = ("Connection dropped", "Transition to CONNECTING", "Session has expired",
                 ":job_id:", ":task_name:")
        found = []
        for path in sorted(self.root.glob("*/tmp/ray/session_*/logs/worker-*.err")):
            with contextlib.suppress(OSError):
                kept = [line for line in path.read_text(errors="replace").splitlines()
                        if line.strip() and not line.startswith(noise)]
                if len(kept) > 1:  # more than the actor's name
                    found.append(f"--- {path.name}\n" + "\n".join(kept[:1] + kept[1:][-lines:]))
        return "\n".join(found)

    # ------------------------------------------------------------------------- drivers

    def driver(self, argv: Sequence[str], *, log: Path, node: str | None = None
               ) -> subprocess.Popen[bytes]:
        """Start a Ray driver (`argv` after the Python interpreter) on the client node, in
        a login's environment: its ~/.bashrc sources the profile, so the driver has the
        node's Ray token, Ray's TLS, RAFKA_ZK and ZooKeeper's TLS, as a user's would."""
        node = node or self.client or self.head
        environment = {**self.environment(node), **CLIENT_PATIENCE}
        return self.bed.start(
            node, ["bash", "-c", '. ~/.bashrc; exec "$@"', "driver", sys.executable, *argv],
            log=log, env=environment)

    # -------------------------------------------------------------------------- faults

    def ray_process(self, node: str, name: str) -> psutil.Process:
        """The node's Ray process called `name` (gcs_server, raylet), found by its namespace."""
        for pid in self.bed.pids(node):
            with contextlib.suppress(psutil.NoSuchProcess):
                process = psutil.Process(pid)
                if process.name() == name:
                    return process
        raise LookupError(f"no {name} runs on {node}")

    def kill_gcs(self) -> int:
        """SIGKILL the head's GCS server alone; its pid."""
        process = self.ray_process(self.head, "gcs_server")
        process.send_signal(signal.SIGKILL)
        process.wait(10)
        return process.pid

    def close(self) -> None:
        self.bed.close()
        keep = os.environ.get("RAFKA_BED_LOGS")
        # For a post-mortem: every node's Ray logs (the brokers' among them) and rafka logs.
        if keep:
            for node in self.bed.nodes:
                home = self.home(node)
                for found in [*(self.root / node / "tmp").glob("ray/session_*/logs"),
                              *home.glob("*.log"), *home.glob(".rafka/supervised/*.log"),
                              *home.glob(".rafka/zookeeper-member/*.log")]:
                    target = Path(keep) / node / found.relative_to(self.root / node)
                    with contextlib.suppress(OSError):
                        if found.is_dir():
                            shutil.copytree(found, target, dirs_exist_ok=True)
                        else:
                            target.parent.mkdir(parents=True, exist_ok=True)
                            shutil.copy2(found, target)
        shutil.rmtree(self.root, ignore_errors=True)


class BedClient:
    """tests.harness.bed_client, run on the client node for the length of a `with` block:
    writing to `topic` from the start of the block, and, at its end, reading everything back.
    `history()` is then what it saw (see that module)."""

    def __init__(self, deployment: Deployment, topic: str, out: Path, *, partitions: int = 6,
                 rate: int = 300, consumers: int = 0) -> None:
        self.deployment = deployment
        self.out = out
        out.mkdir(parents=True, exist_ok=True)
        self.argv = ["-m", "tests.harness.bed_client", "--topic", topic, "--out", str(out),
                     "--partitions", str(partitions), "--rate", str(rate),
                     "--consumers", str(consumers)]
        self.process: subprocess.Popen[bytes] | None = None
        self._history: dict[str, Any] | None = None

    def progress(self) -> dict[str, Any]:
        with contextlib.suppress(OSError, json.JSONDecodeError):
            return json.loads((self.out / "progress.json").read_text())
        return {"sent": 0, "acknowledged": {}, "last_ack": {}, "failed": 0}

    def acknowledged(self) -> int:
        return sum(self.progress()["acknowledged"].values())

    def __enter__(self) -> BedClient:
        self.process = self.deployment.driver(self.argv, log=self.out / "client.log")
        wait_until(lambda: self.acknowledged() > 500 or self.process.poll() is not None, 180,
                   "the client's first acknowledgements")
        if self.process.poll() is not None:
            raise DeploymentError(f"the client exited: {self.log()}")
        return self

    def __exit__(self, *exc_info: object) -> None:
        (self.out / "stop").touch()
        try:
            self.process.wait(timeout=300)
        except subprocess.TimeoutExpired:
            self.process.kill()
            raise

    def log(self) -> str:
        with contextlib.suppress(OSError):
            return (self.out / "client.log").read_text(errors="replace")[-3000:]
        return ""

    def history(self) -> dict[str, Any]:
        if self._history is None:
            path = self.out / "history.json"
            if not path.exists():
                raise DeploymentError(f"the client left no history: {self.log()}")
            self._history = json.loads(path.read_text())
        return self._history

    def checker_history(self) -> History:
        """The history as the checker takes it (tests/support/checker.py)."""
        found = self.history()

        def certain(error: str) -> bool:
            return error in REFUSED_FOR_CERTAIN or error.startswith("not-sent:")

        return History(
            acks=[Ack(value.encode(), partition, offset, at)
                  for value, partition, offset, at in found["acks"]],
            refused=[Refused(value.encode(), partition, at)
                     for value, partition, error, at in found["failed"] if certain(error)],
            failed=[FailedSend(value.encode(), partition, at, error)
                    for value, partition, error, at in found["failed"] if not certain(error)],
            unresolved=[Unresolved(value.encode(), partition, at)
                        for value, partition, at in found.get("unresolved", [])],
            attempts=[due for due, _partition, _value in found["due"]],
            final_log={int(partition): [(offset, base64.b64decode(value))
                                        for offset, value in records]
                       for partition, records in found["final_log"].items()},
            polls=[Poll(member, at, tuple((p, o, base64.b64decode(v)) for p, o, v in read))
                   for member, at, read in found.get("polls", [])],
            rebalances=[Rebalance(member, started, at, frozenset(partitions))
                        for member, started, at, partitions in found.get("rebalances", [])],
            revocations=[Revocation(member, at, frozenset(partitions))
                         for member, at, partitions in found.get("revocations", [])],
            commits=[Commit(member, float("inf") if answered is None else answered, partition,
                            offset, started=asked)
                     for member, answered, partition, offset, asked
                     in found.get("commits", [])],
        )
