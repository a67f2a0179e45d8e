"""`rafka up`: start a cluster that outlives the command, and record where it is.

By default everything is local and started here: an embedded ZooKeeper (a JVM in a session of
its own, not stopped when `up` exits) and a Ray head (`ray start --head --block`, likewise), then
`--brokers` detached broker actors. `--zk` and `--address` use an ensemble or a Ray cluster that
exist already; then `up` starts only the brokers (`rafka down` stops only what `up` started).

With a ZooKeeper credentials file (`--zk-credentials-file`, `$RAFKA_ZK_CREDENTIALS_FILE`, or
`$RAFKA_HOME/zookeeper-credentials` if it exists) every znode of the cluster gets a digest ACL, as
with Kafka's `zookeeper.set.acl=true`; the state records the file's path, never the password.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import time
from pathlib import Path
from typing import Any

import ray
from ray.exceptions import GetTimeoutError

from rafka.actors.cluster import Cluster
from rafka.actors.config import BrokerConfig
from rafka.actors.errors import RequestTimedOutError
from rafka.actors.stack import RayHead
from rafka.cli.commands import state as cluster_state
from rafka.cli.commands.arguments import add_command, add_name_option
from rafka.cli.commands.connection import (
    add_zk_credentials_option,
    check_ray,
    check_zookeeper,
    join_ray,
    kill_cluster_actors,
    load_zk_credentials,
    parse_zookeeper,
)
from rafka.cli.commands.errors import CliError
from rafka.cli.commands.output import add_key_value_option, echo, key_values
from rafka.cli.commands.progress import Progress, wait_with_spinner
from rafka.common.waiting import wait_until
from rafka.coordination.embedded import (
    EmbeddedZooKeeper,
    find_java,
    is_embedded_server,
    pyspark_jars,
)
from rafka.coordination.errors import InvalidTopicError
from rafka.coordination.validation import validate_topic_name
from rafka.wire.listeners import parse_listeners


def register(commands: argparse._SubParsersAction) -> None:
    parser = add_command(
        commands, "up", doc=__doc__,
        help="start a cluster (embedded ZooKeeper, a Ray head, brokers) that outlives this",
    )
    add_name_option(parser)
    parser.add_argument("--brokers", type=int, default=3, help="how many brokers (default 3)")
    parser.add_argument("--zk", "--zookeeper", dest="zk", metavar="HOST:PORT[/CHROOT]",
                        help="an existing ZooKeeper ensemble (default: start an embedded one)")
    parser.add_argument("--zk-host", default="127.0.0.1",
                        help="the address the embedded ZooKeeper binds (default 127.0.0.1; "
                             "'auto' for this node's IP, so brokers on other nodes reach it)")
    parser.add_argument("--address", metavar="RAY_ADDRESS",
                        help="an existing Ray cluster (ip:port, or 'auto' on one of its nodes); "
                             "default: start a Ray head here")
    parser.add_argument("--data-dir",
                        help="where ZooKeeper, the brokers' logs and the state go "
                             "(default: $RAFKA_HOME/<name>, $RAFKA_HOME defaulting to ~/.rafka)")
    parser.add_argument("--num-cpus", type=int,
                        help="CPUs of the Ray head started here (default: Ray detects them)")
    parser.add_argument("--dashboard", action="store_true",
                        help="start the Ray dashboard with the head started here")
    parser.add_argument("--broker-resource", metavar="NAME",
                        help="a custom Ray resource each broker needs one unit of, so that "
                             "brokers spread one per node that offers one (see cluster.yaml)")
    add_key_value_option(parser, "--broker-config",
                         help="a broker setting (e.g. replica.lag.time.max.ms=10000); repeatable")
    parser.add_argument("--kafka-port", type=int, metavar="PORT",
                        help="serve Kafka's wire protocol: broker i listens on 127.0.0.1, port "
                             "PORT + i, for any Kafka client (bootstrap.servers); 0: free ports")
    parser.add_argument("--listeners", metavar="NAME://HOST:PORT[,...]",
                        help="Kafka's listeners instead of --kafka-port, e.g. PLAINTEXT://"
                             "127.0.0.1:9092,SSL://0.0.0.0:9093: broker i listens on each "
                             "PORT + i (0: free ports); an SSL listener needs --broker-config "
                             "ssl.keystore.location=broker.pem (docs/security.md)")
    parser.add_argument("--timeout", type=float, default=180.0,
                        help="seconds to wait for the brokers (default 180)")
    add_zk_credentials_option(parser, recorded_by_up=False)
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    try:
        validate_topic_name(args.name)
    except InvalidTopicError:
        raise CliError(f"cluster name {args.name!r} is not allowed: use letters, digits, "
                       f"'.', '_' and '-' (it names a ZooKeeper chroot and a Ray namespace)",
                       2) from None
    if args.brokers < 1:
        raise CliError(f"--brokers must be at least 1, got {args.brokers}", 2)
    broker_config = key_values(args.broker_config, "--broker-config")
    BrokerConfig.from_dict(broker_config)  # a wrong setting is refused before anything starts
    start_options = _placement_options(args.broker_resource)
    listeners = _listeners(args)
    if listeners is not None:
        start_options["kafka_listeners"] = listeners
    credentials_file = cluster_state.zk_credentials_file(args.zk_credentials_file)
    if credentials_file is not None:
        credentials_file = credentials_file.resolve()
        start_options["zk_credentials"] = load_zk_credentials(credentials_file)
    _refuse_if_up(args.name)
    data_dir = Path(args.data_dir or cluster_state.default_data_dir(args.name)).resolve()
    # Everything that can be checked is checked before anything is started.
    if args.zk:
        check_zookeeper(args.zk)
    else:
        find_java()
        pyspark_jars()
    if args.address:
        check_ray(args.address)
    data_dir.mkdir(parents=True, exist_ok=True)
    return _bring_up(args, data_dir, broker_config, start_options, credentials_file)


def _listeners(args: argparse.Namespace) -> str | None:
    """The Kafka listeners of broker 0 (broker i adds i to each port), checked with the broker
    settings given; None serves none."""
    if args.kafka_port is not None and args.listeners is not None:
        raise CliError("--kafka-port and --listeners: give one (--kafka-port P is "
                       "--listeners PLAINTEXT://127.0.0.1:P)", 2)
    if args.kafka_port is not None:
        ports, listeners = [args.kafka_port], f"PLAINTEXT://127.0.0.1:{args.kafka_port}"
        option = "--kafka-port"
    elif args.listeners is not None:
        try:
            found = parse_listeners(args.listeners)
            BrokerConfig.from_dict({**key_values(args.broker_config, "--broker-config"),
                                    "listeners": args.listeners})
        except ValueError as error:
            raise CliError(f"--listeners {args.listeners}: {error}", 2) from None
        ports, listeners = [listener.port for listener in found], args.listeners
        option = "--listeners"
    else:
        return None
    if not all(0 <= port <= 65535 - args.brokers for port in ports):
        raise CliError(f"{option} must leave room for {args.brokers} port(s) below 65536, "
                       f"got {', '.join(map(str, ports))}", 2)
    return listeners


def _placement_options(resource: str | None) -> dict[str, Any]:
    if resource is None:
        return {}
    return {"broker_resources": {resource: 1}}


def _refuse_if_up(name: str) -> None:
    """Refuse to start a second cluster under a name; forget a record of one that is gone."""
    recorded = cluster_state.load(name)
    if recorded is None:
        return
    zk, head = recorded.zookeeper, recorded.ray_head
    alive = (zk is not None and is_embedded_server(zk["pid"], zk["data_dir"])) or (
        head is not None and RayHead.is_head(head["pid"], head["address"]))
    if alive or (zk is None and head is None):
        raise CliError(f"a cluster named {name!r} is up already (recorded in {recorded.path}): "
                       f"stop it with `rafka down --name {name}`, or choose another --name")
    print(f"forgetting cluster {name!r}: its processes are gone (recorded in {recorded.path})",
          file=sys.stderr)
    recorded.remove()


def _bring_up(args: argparse.Namespace, data_dir: Path, broker_config: dict[str, str],
              start_options: dict[str, Any], credentials_file: Path | None) -> int:
    started = time.monotonic()
    zookeeper: EmbeddedZooKeeper | None = None
    head: RayHead | None = None
    recorded: cluster_state.ClusterState | None = None
    try:
        if args.zk:
            zk_address = str(parse_zookeeper(args.zk))
        else:
            zookeeper = wait_with_spinner("starting ZooKeeper", lambda: _start_zookeeper(
                data_dir, args.zk_host), announce=True)
            zk_address = str(zookeeper.address)
            print(f"started ZooKeeper at {zk_address} (pid {zookeeper.pid})", file=sys.stderr)
        if args.address:
            ray_address, auth_mode = args.address, None
        else:
            resources = {args.broker_resource: args.brokers} if args.broker_resource else None
            head = wait_with_spinner("starting a Ray head", lambda: RayHead.start(
                data_dir / "logs" / "ray-head.log", num_cpus=args.num_cpus,
                resources=resources, include_dashboard=args.dashboard), announce=True)
            ray_address, auth_mode = head.address, head.auth_mode
            print(f"started a Ray head at {ray_address} (pid {head.pid})", file=sys.stderr)
        recorded = cluster_state.ClusterState(
            name=args.name, zk=zk_address, ray_address=ray_address, data_dir=str(data_dir),
            brokers=args.brokers, ray_auth_mode=auth_mode,
            zk_credentials_file=None if credentials_file is None else str(credentials_file),
            zookeeper=None if zookeeper is None else {
                "pid": zookeeper.pid, "data_dir": str(zookeeper.data_dir)},
            ray_head=None if head is None else head.record(),
        )
        # Recorded before the brokers start, so that `rafka down` can clean up an interrupted up.
        recorded.save()
        join_ray(ray_address, args.name, auth_mode)
        if ray_address == "auto":
            recorded.ray_address = ray.get_runtime_context().gcs_address
            recorded.save()
        if args.broker_resource:
            _wait_for_resource(args.broker_resource, args.brokers, args.timeout)
        try:
            cluster = wait_with_spinner(
                f"starting {args.brokers} broker(s)", lambda: Cluster.start(
                    args.brokers, name=args.name, zk=zk_address, ray_address=ray_address,
                    data_dir=data_dir, broker_config=broker_config, detached=True,
                    timeout_s=args.timeout, **start_options), announce=True)
        except (GetTimeoutError, RequestTimedOutError):
            where = f"its log {head.log_path} and " if head else ""
            raise CliError(f"the brokers did not start within {args.timeout:g} s: see "
                           f"{where}the Ray logs (ray/session_latest/logs in Ray's temp dir), "
                           f"or raise --timeout") from None
        controller = cluster.controller()
        cluster.close()
    except BaseException:
        _undo(args.name, zookeeper, head, recorded)
        raise
    ray.shutdown()
    _report(recorded, controller, time.monotonic() - started)
    return 0


def _start_zookeeper(data_dir: Path, host: str) -> EmbeddedZooKeeper:
    if host == "auto":
        host = ray.util.get_node_ip_address()
    # It must outlive this process: no parent-death signal, a session of its own, and not
    # stopped at interpreter exit (detach). `rafka down` stops it by the PID in its data dir.
    server = EmbeddedZooKeeper(data_dir / "zookeeper", host=host, die_with_parent=False,
                               new_session=True)
    server.start()
    server.detach()
    return server


def _wait_for_resource(resource: str, brokers: int, timeout_s: float) -> None:
    """Wait until the Ray cluster offers a unit of `resource` per broker (nodes still joining)."""
    with Progress(f"waiting for {brokers} nodes with {resource}", total=brokers,
                  unit="nodes") as progress:

        def enough() -> bool:
            available = int(ray.cluster_resources().get(resource, 0))
            progress.update(available - progress.count)
            return available >= brokers

        try:
            wait_until(enough, timeout_s, f"{brokers} units of {resource}", interval_s=1)
        except TimeoutError:
            raise CliError(f"the Ray cluster offers {progress.count} unit(s) of {resource!r} "
                           f"after {timeout_s:.0f} s, and {brokers} brokers need one each: "
                           f"start more nodes with --resources='{{\"{resource}\": 1}}', "
                           f"or lower --brokers") from None


def _undo(name: str, zookeeper: EmbeddedZooKeeper | None, head: RayHead | None,
          recorded: cluster_state.ClusterState | None) -> None:
    """After a failed or interrupted `up`: stop what it started, and only that."""
    if ray.is_initialized():
        # Brokers this up created: on a Ray cluster that stays up they would linger, and a head
        # about to stop would wait for them (it drains running actors for up to 30 s).
        with contextlib.suppress(Exception):
            kill_cluster_actors(name)
        ray.shutdown()
    if head is not None:
        head.stop()
    if zookeeper is not None:
        zookeeper.stop()
    if recorded is not None:
        recorded.remove()
    if head is not None or zookeeper is not None:
        print("stopped what this `rafka up` had started", file=sys.stderr)


def _report(recorded: cluster_state.ClusterState, controller: int | None, seconds: float) -> None:
    zk = recorded.zookeeper
    head = recorded.ray_head
    lines = [
        f"rafka cluster {recorded.name!r} is up: {recorded.brokers} broker(s), "
        f"controller {controller} ({seconds:.0f} s)",
        f"  ZooKeeper  {recorded.zk}" + (f"  (embedded, pid {zk['pid']})" if zk else ""),
        *([f"  ACL        digest, credentials in {recorded.zk_credentials_file}"]
          if recorded.zk_credentials_file else []),
        f"  Ray        {recorded.ray_address}" + (f"  (head pid {head['pid']})" if head else ""),
        f"  data dir   {recorded.data_dir}",
        f"  state      {recorded.path}",
        f"stop it with: rafka down --name {recorded.name}",
    ]
    echo("\n".join(lines))
