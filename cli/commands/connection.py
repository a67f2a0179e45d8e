"""How a command finds a running cluster: options, the state `rafka up` left, reachability.

Precedence: `--zk`/`--address` on the command line, then the state of `--name` (or the one in
`--data-dir`), then `$RAFKA_ZK` and `$RAY_ADDRESS`. ZooKeeper and Ray are probed with a plain TCP
connection first, so that an address where nothing listens is one clear message at once rather
than a client retrying for a minute.

The ZooKeeper credentials (a cluster whose znodes carry digest ACLs) come from a file: the one
of `--zk-credentials-file`, else the one `rafka up` recorded, else `$RAFKA_ZK_CREDENTIALS_FILE`,
else `$RAFKA_HOME/zookeeper-credentials` if it exists. Without one a command may still look, but
changes nothing.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import socket
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import ray

from rafka.actors.cluster import Cluster
from rafka.actors.naming import cluster_namespace
from rafka.actors.runtime import init_ray, named_actors
from rafka.cli.commands import state as cluster_state
from rafka.cli.commands.arguments import add_name_option
from rafka.cli.commands.errors import CliError
from rafka.coordination.embedded import ZooKeeperAddress
from rafka.coordination.errors import InvalidZooKeeperAddressError, ZooKeeperUnavailableError
from rafka.coordination.security import (
    CREDENTIALS_FILE_ENV,
    ClusterCredentials,
    load_credentials_file,
)


def add_connection_options(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("cluster")
    add_name_option(group)
    group.add_argument("--zk", "--zookeeper", dest="zk", metavar="HOST:PORT[/CHROOT]",
                       help="ZooKeeper of a cluster started elsewhere; "
                            "default: what `rafka up` recorded")
    group.add_argument("--address", metavar="RAY_ADDRESS",
                       help="the Ray cluster's address (ip:port, or 'auto' on a Ray node); "
                            "default: what `rafka up` recorded, else $RAY_ADDRESS, else auto")
    group.add_argument("--data-dir", help="find the cluster by the state `rafka up` left here")
    add_zk_credentials_option(group)


def add_zk_credentials_option(parser: argparse.ArgumentParser | argparse._ArgumentGroup, *,
                              recorded_by_up: bool = True) -> None:
    """`--zk-credentials-file`: the `user:password` file guarding the cluster's znodes."""
    recorded = "what `rafka up` recorded, else " if recorded_by_up else ""
    parser.add_argument(
        "--zk-credentials-file", metavar="FILE",
        help=f"the cluster's ZooKeeper credentials (one line user:password, mode 0600); "
             f"default: {recorded}${CREDENTIALS_FILE_ENV}, else "
             f"$RAFKA_HOME/zookeeper-credentials if it exists, else none (open znodes)")


def load_zk_credentials(path: Path | None) -> ClusterCredentials | None:
    """The credentials in `path` (a typed error if the file is unusable); None for no file."""
    return None if path is None else load_credentials_file(path)


@dataclass(frozen=True)
class Target:
    name: str
    zk: str
    ray_address: str
    ray_auth_mode: str | None
    state: cluster_state.ClusterState | None
    zk_credentials_file: Path | None = None


def resolve(args: argparse.Namespace) -> Target:
    """Where the cluster of these arguments is; an error that says how to start one if none."""
    recorded = cluster_state.load(args.name, args.data_dir)
    zk = args.zk or (recorded.zk if recorded else None) or os.environ.get("RAFKA_ZK")
    if zk is None:
        where = args.data_dir or cluster_state.pointer_path(args.name)
        raise CliError(
            f"no rafka cluster named {args.name!r} is up here (nothing recorded at {where}): "
            f"start one with `rafka up`, or pass --zk HOST:PORT and --address for a cluster "
            f"started elsewhere"
        )
    address = (args.address or (recorded.ray_address if recorded else None)
               or os.environ.get("RAY_ADDRESS") or "auto")
    auth = recorded.ray_auth_mode if recorded and not args.address else None
    # A state is the cluster's only when no --zk names another.
    credentials_file = cluster_state.zk_credentials_file(
        args.zk_credentials_file,
        recorded.zk_credentials_file if recorded and not args.zk else None)
    return Target(args.name, zk, address, auth, recorded, credentials_file)


def parse_zookeeper(text: str) -> ZooKeeperAddress:
    try:
        return ZooKeeperAddress.parse(text)
    except InvalidZooKeeperAddressError as error:
        raise CliError(str(error), 2) from None


def check_zookeeper(text: str, timeout_s: float = 3.0) -> ZooKeeperAddress:
    """The parsed address, if at least one of its servers accepts a connection."""
    address = parse_zookeeper(text)
    failures = []
    for host, port in address.hosts:
        try:
            with socket.create_connection((host, port), timeout=timeout_s):
                return address
        except OSError as error:
            failures.append(f"{host}:{port} ({error.strerror or error})")
    raise CliError(
        f"ZooKeeper does not answer at {', '.join(failures)}: check the --zk address and that "
        f"the ensemble is running, or leave --zk out of `rafka up` to use an embedded one"
    )


def check_ray(address: str, timeout_s: float = 3.0) -> None:
    """Fail at once if nothing listens at a `host:port` Ray address ('auto' is Ray's to find)."""
    host, colon, port = address.rpartition(":")
    if not colon or not port.isdigit() or "://" in address:
        return
    try:
        with socket.create_connection((host, int(port)), timeout=timeout_s):
            return
    except OSError as error:
        reason = error.strerror or str(error)
    raise CliError(
        f"no Ray cluster answers at {address} ({reason}): start one with `ray start --head`, "
        f"pass its address with --address (or 'auto' on one of its nodes), or leave --address "
        f"out of `rafka up` to have it start its own"
    )


def use_token_auth() -> None:
    """Authenticate to Ray with the token in ~/.ray/auth_token, as the head `up` started wants.

    Ray reads RAY_AUTH_MODE once, when it is imported, and turns token auth on by itself only
    for a cluster it finds through 'auto'; for an explicit address it must be told, and told
    again after import (Ray's own helper for that is private, hence the guard).
    """
    os.environ.setdefault("RAY_AUTH_MODE", "token")
    with contextlib.suppress(ImportError, AttributeError):
        from ray._private.authentication.authentication_token_setup import _enable_token_auth

        if os.environ["RAY_AUTH_MODE"] == "token":
            _enable_token_auth()


def join_ray(address: str, name: str, auth_mode: str | None) -> None:
    """Connect this process to Ray as a driver in the cluster's namespace."""
    check_ray(address)
    if auth_mode == "token":
        use_token_auth()
    try:
        # log_to_driver=False: the brokers' log lines must not mix into `consume`'s output.
        init_ray(address, namespace=cluster_namespace(name), log_to_driver=False)
    except (ConnectionError, RuntimeError) as error:
        first = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise CliError(
            f"could not connect to Ray at {address}: {first}. Check --address; if the cluster "
            f"uses token authentication, set RAY_AUTH_MODE=token and put its token in "
            f"~/.ray/auth_token"
        ) from None


def connect(args: argparse.Namespace) -> Cluster:
    """The cluster these arguments name, joined (ZooKeeper first: it fails fastest)."""
    target = resolve(args)
    credentials = load_zk_credentials(target.zk_credentials_file)
    check_zookeeper(target.zk)
    join_ray(target.ray_address, target.name, target.ray_auth_mode)
    try:
        return Cluster.connect(target.zk, target.name, ray_address=target.ray_address,
                               zk_credentials=credentials)
    except ZooKeeperUnavailableError as error:
        raise CliError(f"{error}") from None


def cluster_actor_names(name: str) -> list[str]:
    """The named actors of cluster `name` in Ray: `broker-<id>`, `replica-...`."""
    return named_actors(cluster_namespace(name))


def kill_cluster_actors(name: str) -> list[str]:
    """Kill every named actor of cluster `name` (its brokers and replicas), without the graceful
    shutdown: for when the brokers cannot be asked (ZooKeeper gone, an `up` that failed)."""
    namespace = cluster_namespace(name)
    killed = []
    for actor in cluster_actor_names(name):
        with contextlib.suppress(ValueError):  # gone meanwhile
            ray.kill(ray.get_actor(actor, namespace=namespace), no_restart=True)
            killed.append(actor)
    return killed


@contextlib.contextmanager
def connected(args: argparse.Namespace) -> Iterator[Cluster]:
    """`with connected(args) as cluster:` the cluster these arguments name, joined, and left
    running afterwards: this process's ZooKeeper session and Ray driver close."""
    cluster = connect(args)
    try:
        yield cluster
    finally:
        cluster.close()
        if ray.is_initialized():
            ray.shutdown()
