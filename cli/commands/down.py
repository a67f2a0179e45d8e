"""`rafka down`: stop a cluster that `rafka up` started, and nothing else.

First the brokers, gracefully (each resigns and unregisters); then what `up` started itself, by
the PIDs it recorded: the Ray head (SIGTERM; `ray start --block` stops the node's processes) and
the embedded ZooKeeper (after checking that the PID still is that server). A ZooKeeper ensemble or
a Ray cluster given to `up` with --zk or --address is left running. With nothing up it says so
and exits 0, so it is safe in scripts and cleanup handlers.
"""

from __future__ import annotations

import argparse
import sys

import ray

from rafka.actors.cluster import Cluster
from rafka.actors.naming import broker_id_of
from rafka.actors.stack import RayHead
from rafka.cli.commands import state as cluster_state
from rafka.cli.commands.arguments import add_command, add_name_option
from rafka.cli.commands.connection import (
    check_zookeeper,
    cluster_actor_names,
    join_ray,
    kill_cluster_actors,
    load_zk_credentials,
)
from rafka.cli.commands.output import echo
from rafka.cli.commands.progress import wait_with_spinner
from rafka.coordination.embedded import stop_recorded_server
from rafka.coordination.errors import CredentialsFileError
from rafka.coordination.security import ClusterCredentials


def register(commands: argparse._SubParsersAction) -> None:
    parser = add_command(
        commands, "down", doc=__doc__,
        help="stop the brokers, then the ZooKeeper and Ray head that `rafka up` started",
    )
    add_name_option(parser)
    parser.add_argument("--data-dir", help="the cluster whose state `rafka up` left here")
    parser.add_argument("--timeout", type=float, default=60.0,
                        help="seconds to let each process stop before it is killed (default 60)")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    recorded = cluster_state.load(args.name, args.data_dir)
    if recorded is None:
        where = args.data_dir or cluster_state.pointer_path(args.name)
        print(f"no rafka cluster named {args.name!r} is up here (nothing recorded at {where}); "
              f"nothing to stop", file=sys.stderr)
        return 0
    stopped = []
    brokers = _stop_brokers(recorded)
    if brokers:
        stopped.append(f"broker(s) {', '.join(sorted(brokers, key=int))}")
    head = recorded.ray_head
    if head is not None:
        pids = RayHead.from_record(head).stop(args.timeout)
        if pids:
            stopped.append(f"Ray head (pid {head['pid']})")
    zookeeper = recorded.zookeeper
    if zookeeper is not None and stop_recorded_server(zookeeper["data_dir"], args.timeout):
        stopped.append(f"ZooKeeper (pid {zookeeper['pid']})")
    recorded.remove()
    echo(f"rafka cluster {recorded.name!r} is down; stopped "
         f"{'; '.join(stopped) if stopped else 'nothing (its processes were gone)'}")
    return 0


def _credentials(recorded: cluster_state.ClusterState) -> ClusterCredentials | None:
    """The cluster's ZooKeeper credentials; None, with a warning, if their file is unusable:
    the brokers stop through their own sessions, and this handle only has to look."""
    try:
        return load_zk_credentials(cluster_state.zk_credentials_file(
            None, recorded.zk_credentials_file))
    except CredentialsFileError as error:
        print(f"warning: {error}; going on without ZooKeeper credentials", file=sys.stderr)
        return None


def _stop_brokers(recorded: cluster_state.ClusterState) -> list[str]:
    """Stop every broker: gracefully through the cluster (each resigns and unregisters), else by
    killing its actors; the ids of the brokers stopped. [] with a warning if Ray cannot be
    reached (then the end of its head ends them, if `up` started it)."""
    try:
        join_ray(recorded.ray_address, recorded.name, recorded.ray_auth_mode)
    except Exception as error:  # a CliError, or a Ray half gone
        print(f"warning: cannot reach Ray ({error}); stopping the processes only",
              file=sys.stderr)
        return []
    try:
        brokers = [str(broker_id) for actor in cluster_actor_names(recorded.name)
                   if (broker_id := broker_id_of(actor)) is not None]
        try:
            check_zookeeper(recorded.zk)
            cluster = Cluster.connect(recorded.zk, recorded.name,
                                      ray_address=recorded.ray_address,
                                      zk_credentials=_credentials(recorded))
        except Exception as error:
            print(f"warning: cannot reach ZooKeeper ({error}); killing the brokers",
                  file=sys.stderr)
            kill_cluster_actors(recorded.name)
            return brokers
        try:
            wait_with_spinner("stopping the brokers", cluster.shutdown, announce=True)
        except Exception as error:
            print(f"warning: the brokers did not all stop gracefully ({error}); killing them",
                  file=sys.stderr)
            kill_cluster_actors(recorded.name)
        finally:
            cluster.close()
        return brokers
    finally:
        if ray.is_initialized():
            ray.shutdown()
