"""`rafka zookeeper start|run|stop|status`: one member of a ZooKeeper ensemble on this machine.
`rafka zookeeper credentials`: the file of the credentials that guard a cluster's znodes.

Run `start` on each of 3 (or 5) machines with the same --servers and each its own --id; the
ensemble serves once a majority is up. The member runs from the ZooKeeper jars inside pyspark
and outlives the command (a JVM in a session of its own, its PID recorded in its data dir, as
`rafka up` leaves its embedded server); `stop` stops it by that PID. The ensemble's connection
string, which `start` prints, is what `rafka up --zk` and `Cluster.start(zk=...)` take.

`run` takes the same options and becomes the member instead (the command is replaced by its
JVM, with the same PID), for a supervisor to keep running: cluster.yaml runs
`rafka supervise start zookeeper -- rafka zookeeper run ...`, which starts the member again
whenever it dies. Such a member records its supervisor in its data dir, and `stop` stops the
supervisor, so that the member stays stopped.

`credentials --generate` writes a random `user:password` (mode 0600) that `rafka up` then
protects the cluster's znodes with (digest ACLs, Kafka's `zookeeper.set.acl=true`); every machine
whose commands change the cluster needs a copy (docs/zookeeper.md).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
from pathlib import Path
from typing import Any

from rafka.cli.commands import state as cluster_state
from rafka.cli.commands.arguments import add_command
from rafka.cli.commands.errors import EXIT_USAGE, CliError
from rafka.cli.commands.output import echo, table
from rafka.cli.commands.progress import wait_with_spinner
from rafka.cli.commands.supervise import stop_supervisor
from rafka.cli.supervisor import (
    SupervisedFiles,
    is_supervisor,
    supervisor_of_this_process,
    write_atomically,
)
from rafka.common.waiting import wait_until
from rafka.coordination.embedded import (
    ZooKeeperAddress,
    find_java,
    is_embedded_server,
    pyspark_jars,
    recorded_pid,
    stop_recorded_server,
)
from rafka.coordination.ensemble import (
    DEFAULT_CLIENT_PORT,
    DEFAULT_INIT_LIMIT,
    DEFAULT_SYNC_LIMIT,
    DEFAULT_TICK_TIME_MS,
    QUORUM_MODES,
    Ensemble,
    EnsembleMember,
    EnsembleServer,
    InvalidEnsembleError,
    ensemble_modes,
    parse_config,
    server_mode,
    serving,
    validate_server_id,
)
from rafka.coordination.errors import (
    InvalidZooKeeperAddressError,
    ZooKeeperStartError,
    ZooKeeperTlsConfigError,
)
from rafka.coordination.security import (
    CREDENTIALS_FILE_ENV,
    DEFAULT_USER,
    generate_credentials,
    load_credentials_file,
    write_credentials_file,
)
from rafka.coordination.zookeeper_tls import (
    CLIENT_ENABLE_ENV,
    KEYSTORE_ENV,
    TRUSTSTORE_ENV,
    server_tls,
)

MEMBER_DIR = "zookeeper-member"
# In a member's data dir, while `rafka zookeeper run` runs under `rafka supervise`: which one.
SUPERVISOR_FILE = "zookeeper.supervisor"


def default_zookeeper_data_dir() -> Path:
    """Where this machine's member keeps its data: $RAFKA_HOME/zookeeper-member."""
    return cluster_state.rafka_home() / MEMBER_DIR


def register(commands: argparse._SubParsersAction) -> None:
    parser = add_command(
        commands, "zookeeper", doc=__doc__,
        help="run one member of a ZooKeeper ensemble here: start, run, stop, status",
    )
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)

    start = actions.add_parser("start", help="start this machine's member, detached")
    _add_member_options(start)
    start.add_argument("--wait", type=float, default=0.0, metavar="SECONDS",
                       help="wait this long for the member to join a quorum, and fail if it "
                            "has none by then (default 0: return once it listens; the other "
                            "members may not be started yet)")
    start.set_defaults(run=_start)

    run = actions.add_parser(
        "run", help="run this machine's member in the foreground, for `rafka supervise`",
        description="Become this machine's member: the command is replaced by the member's JVM "
                    "(the same PID), which runs until it is stopped or dies, its output "
                    "appended to zookeeper.log in its data dir. For a supervisor to keep "
                    "running: `rafka supervise start zookeeper -- rafka zookeeper run "
                    "--id auto --servers ...`; `rafka zookeeper stop` then stops both.")
    _add_member_options(run)
    run.set_defaults(run=_run)

    stop = actions.add_parser("stop", help="stop this machine's member (and the supervisor "
                                           "that keeps it running, if any)")
    _add_data_dir(stop)
    stop.add_argument("--timeout", type=float, default=30.0,
                      help="seconds to let it stop before it is killed (default 30)")
    stop.set_defaults(run=_stop)
    _register_status_and_credentials(actions)


def _add_member_options(parser: argparse.ArgumentParser) -> None:
    """The options of `start` and `run`: which member, of which ensemble, how it runs."""
    parser.add_argument("--id", required=True, dest="server_id", metavar="N|auto",
                        help="this member's id (its myid, 1 to 255): its place in --servers; "
                             "'auto': the one server in --servers that is an address of this "
                             "machine (the same command on every machine)")
    parser.add_argument("--servers", required=True, metavar="LIST",
                        help="every member, in id order: host:quorumPort:electionPort,... "
                             "(e.g. zk1:2888:3888,zk2:2888:3888,zk3:2888:3888); a member's "
                             "own client port may follow as ';PORT' (quote it)")
    parser.add_argument("--client-port", type=int, default=DEFAULT_CLIENT_PORT,
                        help=f"the client port of members that name none "
                             f"(default {DEFAULT_CLIENT_PORT})")
    parser.add_argument("--host", metavar="ADDRESS",
                        help="the address this member's client port binds (default: its host in "
                             "--servers; 0.0.0.0 for every interface)")
    parser.add_argument("--secure-client-port", type=int, metavar="PORT",
                        help="also serve clients over mutual TLS on this port, at the member's "
                             "address in --servers, from the PEM files of "
                             f"{KEYSTORE_ENV} and {TRUSTSTORE_ENV} (docs/security.md)")
    _add_data_dir(parser)
    parser.add_argument("--tick-time-ms", type=int, default=DEFAULT_TICK_TIME_MS,
                        help=f"ZooKeeper's tickTime (default {DEFAULT_TICK_TIME_MS})")
    parser.add_argument("--init-limit", type=int, default=DEFAULT_INIT_LIMIT,
                        help=f"ticks a follower may take to sync with the leader "
                             f"(default {DEFAULT_INIT_LIMIT})")
    parser.add_argument("--sync-limit", type=int, default=DEFAULT_SYNC_LIMIT,
                        help=f"ticks a follower may lag before it is dropped "
                             f"(default {DEFAULT_SYNC_LIMIT})")
    parser.add_argument("--heap-mb", type=int, default=256, help="the JVM's heap (default 256)")


def _add_data_dir(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--data-dir", type=Path,
                        help="the member's data dir (default: $RAFKA_HOME/zookeeper-member, "
                             "$RAFKA_HOME defaulting to ~/.rafka)")


def _register_status_and_credentials(actions: argparse._SubParsersAction) -> None:
    status = actions.add_parser("status", help="every member's mode (leader, follower, ...)")
    _add_data_dir(status)
    status.add_argument("--zk", "--zookeeper", dest="zk", metavar="HOST:PORT,...",
                        help="ask these servers instead of the member in --data-dir")
    status.add_argument("--wait", type=float, default=0.0, metavar="SECONDS",
                        help="wait up to this long for the ensemble to serve (a majority up), "
                             "e.g. before `rafka up --zk` on a machine that starts first")
    status.add_argument("--format", choices=("text", "json"), default="text")
    status.set_defaults(run=_status)

    credentials = actions.add_parser(
        "credentials", help="generate (--generate) or check the file of a cluster's ZooKeeper "
                            "credentials")
    credentials.add_argument("--generate", action="store_true",
                             help="write new random credentials (mode 0600)")
    credentials.add_argument("--file", type=Path,
                             help=f"the credentials file (default: ${CREDENTIALS_FILE_ENV}, "
                                  f"else $RAFKA_HOME/zookeeper-credentials)")
    credentials.add_argument("--user", default=DEFAULT_USER,
                             help=f"the digest user of new credentials (default {DEFAULT_USER})")
    credentials.add_argument("--force", action="store_true",
                             help="with --generate, replace an existing file (a cluster "
                                  "started with the old one refuses the new)")
    credentials.set_defaults(run=_credentials)


def _data_dir(args: argparse.Namespace) -> Path:
    return (args.data_dir or default_zookeeper_data_dir()).expanduser().resolve()


def _member(args: argparse.Namespace, *, detached: bool) -> EnsembleMember:
    """The member `start` or `run` runs, checked: its options, its TLS files, Java, and a data
    dir that no running member or supervisor holds."""
    try:
        ensemble = Ensemble.parse(args.servers, client_port=args.client_port)
        server = _server_of(ensemble, args.server_id)
    except InvalidEnsembleError as error:
        raise CliError(str(error), EXIT_USAGE) from None
    for option, value in (("--tick-time-ms", args.tick_time_ms), ("--init-limit", args.init_limit),
                          ("--sync-limit", args.sync_limit), ("--heap-mb", args.heap_mb)):
        if value < 1:
            raise CliError(f"{option} must be at least 1, got {value}", EXIT_USAGE)
    for warning in ensemble.warnings():
        print(f"warning: {warning}", file=sys.stderr)
    data_dir = _data_dir(args)
    holder = member_supervisor(data_dir)
    mine = None if detached else supervisor_of_this_process()
    if holder is not None and holder != mine:
        raise CliError(f"a ZooKeeper member is running from {data_dir} already, kept running "
                       f"by `rafka supervise` as {holder.name}: stop it with `rafka zookeeper "
                       f"stop --data-dir {data_dir}`, or give this one another --data-dir")
    if not detached:
        # Before any refusal: `stop` must find the supervisor of a run that fails, too.
        _record_supervisor(data_dir, mine)
    pid = recorded_pid(data_dir)
    if pid is not None and is_embedded_server(pid, data_dir):
        raise CliError(f"a ZooKeeper member is running from {data_dir} already (pid {pid}): "
                       f"stop it with `rafka zookeeper stop --data-dir {data_dir}`, or give "
                       f"this one another --data-dir")
    tls = None
    if args.secure_client_port is not None:
        try:
            tls = server_tls()
        except ZooKeeperTlsConfigError as error:
            raise CliError(str(error), EXIT_USAGE) from None
    find_java()
    pyspark_jars()
    data_dir.mkdir(parents=True, exist_ok=True)
    # Detached, it must outlive this command: no parent-death signal, a session of its own.
    # Run in place, it goes with its supervisor, which gave it a session already.
    return EnsembleMember(data_dir, ensemble, server.id, host=args.host,
                          tick_time_ms=args.tick_time_ms, init_limit=args.init_limit,
                          sync_limit=args.sync_limit, heap_mb=args.heap_mb,
                          die_with_parent=not detached, new_session=detached,
                          tls=tls, secure_port=args.secure_client_port)


def _start(args: argparse.Namespace) -> int:
    member = _member(args, detached=True)
    ensemble, server, data_dir = member.ensemble, member.server, member.data_dir
    tls = member.tls
    wait_with_spinner(f"starting ZooKeeper member {server.id}",
                      lambda: member.start(wait_for_quorum=False), announce=True)
    member.detach()
    mode = member.mode()
    if args.wait > 0 and mode not in QUORUM_MODES:
        try:
            mode = wait_with_spinner("waiting for a quorum",
                                     lambda: member.wait_for_quorum(args.wait), announce=True)
        except ZooKeeperStartError:
            raise CliError(
                f"ZooKeeper member {server.id} is running (pid {member.pid}) but found no "
                f"quorum within {args.wait:g} s: a majority ({ensemble.majority} of "
                f"{len(ensemble.servers)}) must be started and reach each other's quorum and "
                f"election ports; see `rafka zookeeper status` and its log {member.log_path}"
            ) from None
    host, port = member.host, server.client_port
    lines = [
        f"started ZooKeeper member {server.id} of {len(ensemble.servers)} (pid "
        f"{member.pid}), clients at {host}:{port}: "
        + (mode if mode in QUORUM_MODES else
           f"waiting for a quorum ({ensemble.majority} of {len(ensemble.servers)} members up)"),
        f"  connect string  {ensemble.connect_string}   (rafka up --zk ...)",
        *([f"  over TLS        {member.secure_address} (every member's secure port in the "
           f"connect string, and {CLIENT_ENABLE_ENV}=true)"] if tls else []),
        f"  data dir        {data_dir}",
        f"stop it with: rafka zookeeper stop --data-dir {data_dir}",
    ]
    echo("\n".join(lines))
    return 0


def _run(args: argparse.Namespace) -> int:
    member = _member(args, detached=False)
    supervisor = supervisor_of_this_process()
    kept = f", kept running by `rafka supervise` as {supervisor.name}" if supervisor else ""
    echo(f"running ZooKeeper member {member.id} of {len(member.ensemble.servers)} in the "
         f"foreground (pid {os.getpid()}{kept}), clients at {member.host}:"
         f"{member.server.client_port}, connect string {member.ensemble.connect_string}; "
         f"its log: {member.log_path}")
    member.exec_in_place()


def _record_supervisor(data_dir: Path, supervisor: SupervisedFiles | None) -> None:
    """Name the member's supervisor in its data dir: what `stop` stops for good, rather than
    the JVM alone, which would come back."""
    record = data_dir / SUPERVISOR_FILE
    if supervisor is None:
        record.unlink(missing_ok=True)
        return
    data_dir.mkdir(parents=True, exist_ok=True)
    write_atomically(record, json.dumps({"name": supervisor.name,
                                         "folder": str(supervisor.folder)}) + "\n")


def member_supervisor(data_dir: Path) -> SupervisedFiles | None:
    """The running supervisor that keeps the member of `data_dir` running, if any."""
    try:
        record = json.loads((data_dir / SUPERVISOR_FILE).read_text())
        files = SupervisedFiles(Path(record["folder"]), str(record["name"]))
    except (FileNotFoundError, ValueError, KeyError, TypeError):
        return None
    pid = files.recorded_pid()
    return files if pid is not None and is_supervisor(pid, files) else None


def _server_of(ensemble: Ensemble, server_id: str) -> EnsembleServer:
    if server_id.strip().lower() == "auto":
        try:
            return ensemble.local_server()
        except InvalidEnsembleError as error:
            raise InvalidEnsembleError(f"--id auto: {error} with --id N") from None
    try:
        number = int(server_id)
    except ValueError:
        raise InvalidEnsembleError(f"--id takes a number from 1 to 255 or 'auto', got "
                                   f"{server_id!r}") from None
    return ensemble.server(validate_server_id(number))


def _stop(args: argparse.Namespace) -> int:
    data_dir = _data_dir(args)
    member_id = _member_id(data_dir)
    what = f"ZooKeeper member {member_id}" if member_id else "ZooKeeper"
    supervisor = member_supervisor(data_dir)
    supervised_pid = None
    if supervisor is not None:
        # The supervisor first: the member alone would be started again.
        supervised_pid = _live_member_pid(data_dir)
        if supervised_pid != supervisor.read_state().get("command_pid"):
            supervised_pid = None  # a member started otherwise, stopped below
        supervisor_pid = stop_supervisor(supervisor, args.timeout)
        (data_dir / SUPERVISOR_FILE).unlink(missing_ok=True)
        if supervisor_pid is not None and supervised_pid is not None:
            echo(f"stopped {what} (pid {supervised_pid}) and its supervisor {supervisor.name} "
                 f"(pid {supervisor_pid}): it stays stopped")
        elif supervisor_pid is not None:
            echo(f"stopped the supervisor {supervisor.name} (pid {supervisor_pid}) of {what}, "
                 f"which was between runs: it stays stopped")
    # A member started detached (before it was supervised, say), or left by a supervisor killed.
    pid = stop_recorded_server(data_dir, args.timeout)
    if pid is not None:
        echo(f"stopped {what} (pid {pid})")
    elif supervisor is None:
        print(f"no ZooKeeper member is running from {data_dir}; nothing to stop",
              file=sys.stderr)
    return 0


def _live_member_pid(data_dir: Path) -> int | None:
    pid = recorded_pid(data_dir)
    return pid if pid is not None and is_embedded_server(pid, data_dir) else None


def _status(args: argparse.Namespace) -> int:
    member_id: int | None = None
    pid: int | None = None
    supervisor: SupervisedFiles | None = None
    if args.zk:
        try:
            address = ZooKeeperAddress.parse(args.zk)
        except InvalidZooKeeperAddressError as error:
            raise CliError(str(error), EXIT_USAGE) from None
        ids: list[int | None] = [None] * len(address.hosts)
    else:
        data_dir = _data_dir(args)
        ensemble = _recorded_ensemble(data_dir)
        address = ensemble.connect_string
        ids = list(ensemble.ids)
        member_id = _member_id(data_dir)
        pid = _live_member_pid(data_dir)
        supervisor = member_supervisor(data_dir)
    if args.wait > 0:
        with contextlib.suppress(TimeoutError):
            wait_until(lambda: serving(ensemble_modes(address).values()), args.wait,
                       "the ensemble to serve", interval_s=1.0)
    rows: list[dict[str, Any]] = [
            {"id": server_id, "address": f"{host}:{port}", "mode": server_mode(host, port),
             "this": server_id is not None and server_id == member_id}
            for server_id, (host, port) in zip(ids, address.hosts, strict=True)]
    up = sum(1 for row in rows if serving([row["mode"]]))
    quorum = up > 0
    if args.format == "json":
        echo(json.dumps({"member": member_id, "pid": pid,
                         "supervisor": supervisor.name if supervisor else None,
                         "servers": rows, "serving": quorum, "connect_string": str(address)},
                        indent=2))
    else:
        lines = []
        if member_id is not None:
            running = f"pid {pid}" if pid else "not running"
            kept = f", kept running by `rafka supervise` as {supervisor.name}" if supervisor else ""
            lines.append(f"this machine's member: {member_id} ({running}{kept})")
        lines.append(table(["ID", "ADDRESS", "MODE", ""],
                           [[row["id"], row["address"], row["mode"],
                             "<- this member" if row["this"] else ""] for row in rows]))
        lines.append(f"{'serving' if quorum else 'NOT serving'}: {up} of {len(rows)} servers "
                     f"serve clients; connect string {address}")
        echo("\n".join(lines))
    if not quorum:
        raise CliError(f"no server of {address} serves: a majority of the ensemble must be up")
    return 0


def _credentials(args: argparse.Namespace) -> int:
    path = Path(args.file or os.environ.get(CREDENTIALS_FILE_ENV)
                or cluster_state.default_zk_credentials_file()).expanduser()
    if not args.generate:
        user = load_credentials_file(path).user
        echo(f"{path}: ZooKeeper credentials of user {user!r}, readable by its owner only")
        return 0
    try:
        credentials = generate_credentials(args.user)
    except ValueError as error:
        raise CliError(f"--user: {error}", EXIT_USAGE) from None
    try:
        write_credentials_file(path, credentials, overwrite=args.force)
    except FileExistsError:
        raise CliError(f"{path} exists already: a cluster may be using it, so it is left as it "
                       f"is; give another --file, or --force to replace it") from None
    echo(f"wrote new ZooKeeper credentials of user {credentials.user!r} to {path} (mode 0600): "
         f"`rafka up` protects the cluster's znodes with them; copy the file (mode 0600) to "
         f"each machine whose commands change the cluster")
    return 0


def _recorded_ensemble(data_dir: Path) -> Ensemble:
    """The ensemble of the member whose zoo.cfg is in `data_dir`."""
    try:
        text = (data_dir / "zoo.cfg").read_text()
    except FileNotFoundError:
        raise CliError(f"no ZooKeeper member was started from {data_dir} (no zoo.cfg): start "
                       f"one with `rafka zookeeper start`, or give --data-dir or --zk") from None
    try:
        return Ensemble.from_settings(parse_config(text))
    except InvalidEnsembleError as error:
        raise CliError(f"{data_dir / 'zoo.cfg'}: {error}") from None


def _member_id(data_dir: Path) -> int | None:
    try:
        return int((data_dir / "data" / "myid").read_text().strip())
    except (FileNotFoundError, ValueError):
        return None
