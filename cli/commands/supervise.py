"""`rafka supervise start|stop|status`: keep a command running on this machine, as systemd's
Restart=always does.

`start NAME -- COMMAND [ARG...]` leaves a supervisor running (a detached process of its own,
rafka.cli.supervisor) that runs COMMAND and, whenever it exits, for whatever reason, runs it
again after a backoff: 1 s, doubled after each quick exit up to 30 s, 1 s again after a run of a
minute or more. cluster.yaml keeps each node's `ray start --block` running so (a node whose
raylet Ray killed, as it fences a node it declared dead, comes back by itself), and each node's
ZooKeeper member (`rafka zookeeper run`). `stop NAME` stops the supervisor and COMMAND's whole
process group; `status` lists them. Their PIDs, states and logs are in $RAFKA_HOME/supervised,
named after NAME.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shlex
import shutil
import signal
import subprocess
import sys
from pathlib import Path

from rafka.cli.commands import state as cluster_state
from rafka.cli.commands.arguments import add_command
from rafka.cli.commands.errors import EXIT_USAGE, CliError
from rafka.cli.commands.output import echo, table
from rafka.cli.commands.progress import wait_with_spinner
from rafka.cli.supervisor import (
    DEFAULT_STOP_TIMEOUT_S,
    NAME_PATTERN,
    Backoff,
    SupervisedFiles,
    is_supervisor,
    known_names,
    supervisor_arguments,
)
from rafka.common.waiting import wait_until
from rafka.coordination.embedded import wait_for_exit

SUPERVISED_DIR = "supervised"
START_USAGE = "rafka supervise start [options] NAME -- COMMAND [ARG ...]"
# How long a new supervisor may take to record its PID (an interpreter starting on a busy node).
START_TIMEOUT_S = 15.0
# What `stop` adds to the command's timeout before it deems the supervisor hung.
STOP_MARGIN_S = 10.0


def supervised_folder() -> Path:
    """Where the supervisors keep their files: $RAFKA_HOME/supervised."""
    return (cluster_state.rafka_home() / SUPERVISED_DIR).expanduser().resolve()


def register(commands: argparse._SubParsersAction) -> None:
    parser = add_command(
        commands, "supervise", doc=__doc__,
        help="keep a command running here, restarted whenever it exits: start, stop, status",
    )
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)

    start = actions.add_parser(
        "start", help="start a detached supervisor that keeps COMMAND running",
        usage=START_USAGE,
        description="Start a detached supervisor of COMMAND and print its PID. COMMAND runs in "
                    "a process group of its own, in this directory, its output appended to "
                    "$RAFKA_HOME/supervised/NAME.log.",
    )
    _add_name(start)
    start.add_argument("command", nargs=argparse.REMAINDER, metavar="-- COMMAND [ARG ...]",
                       help="the command to keep running, after --")
    _add_start_options(start)
    start.set_defaults(run=_start)

    stop = actions.add_parser("stop", help="stop a supervisor and its command; it is no error "
                                           "if it is not running")
    _add_name(stop)
    stop.add_argument("--timeout", type=float, default=DEFAULT_STOP_TIMEOUT_S, metavar="SECONDS",
                      help="what COMMAND's process group gets between SIGTERM and SIGKILL "
                           f"(default {DEFAULT_STOP_TIMEOUT_S:g})")
    stop.set_defaults(run=_stop)

    status = actions.add_parser("status", help="each supervised NAME: running or stopped, its "
                                               "command's PID, its restarts")
    _add_name(status, nargs="?")
    status.set_defaults(run=_status)


def _add_start_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--stop-timeout", type=float, default=DEFAULT_STOP_TIMEOUT_S,
                        metavar="SECONDS",
                        help="what COMMAND's process group gets between SIGTERM and SIGKILL "
                             "when the supervisor gets a plain SIGTERM (`stop` says its own "
                             "--timeout), or when it outlives COMMAND "
                             f"(default {DEFAULT_STOP_TIMEOUT_S:g})")
    parser.add_argument("--initial-backoff", type=float, default=Backoff.initial_s,
                        metavar="SECONDS",
                        help=f"the delay before the first restart, doubled after each run "
                             f"shorter than {Backoff.reset_after_s:g} s "
                             f"(default {Backoff.initial_s:g})")
    parser.add_argument("--max-backoff", type=float, default=Backoff.maximum_s, metavar="SECONDS",
                        help=f"the longest delay before a restart (default {Backoff.maximum_s:g})")


def _add_name(parser: argparse.ArgumentParser, nargs: str | None = None) -> None:
    parser.add_argument("name", metavar="NAME", nargs=nargs,
                        help="what the supervised command is called on this machine: letters, "
                             "digits, '.', '_' and '-', a letter or digit first")


def _files(name: str) -> SupervisedFiles:
    if not NAME_PATTERN.fullmatch(name):
        raise CliError(f"NAME takes letters, digits, '.', '_' and '-', a letter or digit first; "
                       f"got {name!r}", EXIT_USAGE)
    return SupervisedFiles(supervised_folder(), name)


def _command(args: argparse.Namespace) -> list[str]:
    """COMMAND, and into `args` the options given between NAME and -- (argparse leaves all that
    follows NAME to COMMAND)."""
    words = args.command
    if words[:1] == ["--"]:
        words = words[1:]
    elif words[:1] and words[0].startswith("-") and "--" in words:
        split = words.index("--")
        options = argparse.ArgumentParser(prog="rafka supervise start", usage=START_USAGE,
                                          add_help=False)
        _add_start_options(options)
        options.parse_args(words[:split], namespace=args)
        words = words[split + 1:]
    if not words:
        raise CliError("no COMMAND: give it after NAME and --, e.g. "
                       "`rafka supervise start ray -- ray start --block --address=HEAD:6379`",
                       EXIT_USAGE)
    if words[0].startswith("-"):
        raise CliError(f"COMMAND cannot start with {words[0]!r}: give it after -- "
                       f"(rafka supervise start [options] NAME -- COMMAND ...)",
                       EXIT_USAGE)
    return words


def _start(args: argparse.Namespace) -> int:
    files = _files(args.name)
    command = _command(args)
    if args.stop_timeout < 0:
        raise CliError(f"--stop-timeout must be at least 0, got {args.stop_timeout:g}", EXIT_USAGE)
    try:
        backoff = Backoff(args.initial_backoff, args.max_backoff)
    except ValueError as error:
        raise CliError(f"--initial-backoff, --max-backoff: {error}", EXIT_USAGE) from None
    if shutil.which(command[0]) is None:
        raise CliError(f"{command[0]}: no such command (not on PATH, or not executable)")
    pid = files.recorded_pid()
    if pid is not None and is_supervisor(pid, files):
        raise CliError(f"{files.name} is supervised already (supervisor pid {pid}): stop it "
                       f"first with `rafka supervise stop {files.name}`")
    files.folder.mkdir(parents=True, exist_ok=True)
    for stale in (files.pid, files.stop_request):
        stale.unlink(missing_ok=True)
    # It must outlive this command: a session of its own, no terminal, nothing of ours open.
    with open(files.log, "ab") as log:
        supervisor = subprocess.Popen(
            supervisor_arguments(files, command, stop_timeout_s=args.stop_timeout,
                                 backoff=backoff),
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=log,
            start_new_session=True,
        )
    try:
        wait_until(lambda: supervisor.poll() is not None
                   or files.recorded_pid() == supervisor.pid,
                   START_TIMEOUT_S, "the supervisor to record its PID", interval_s=0.05)
    except TimeoutError:
        raise CliError(f"the supervisor of {files.name} (pid {supervisor.pid}) did not start "
                       f"within {START_TIMEOUT_S:g} s; see {files.log}") from None
    if supervisor.returncode is not None:
        raise CliError(f"the supervisor of {files.name} exited at once (exit code "
                       f"{supervisor.returncode}); see {files.log}")
    echo("\n".join([
        f"started the supervisor of {files.name} (pid {supervisor.pid}): {shlex.join(command)}",
        f"  log  {files.log}",
        f"stop it with: rafka supervise stop {files.name}",
    ]))
    return 0


def _stop(args: argparse.Namespace) -> int:
    files = _files(args.name)
    if args.timeout < 0:
        raise CliError(f"--timeout must be at least 0, got {args.timeout:g}", EXIT_USAGE)
    pid = stop_supervisor(files, args.timeout)
    if pid is None:
        print(f"{files.name} is not running; nothing to stop", file=sys.stderr)
        return 0
    echo(f"stopped {files.name} (supervisor pid {pid})")
    return 0


def stop_supervisor(files: SupervisedFiles, timeout_s: float) -> int | None:
    """Stop the supervisor of `files` and its command, which gets `timeout_s` between SIGTERM
    and SIGKILL; the supervisor's PID, or None if none was running."""
    pid = files.recorded_pid()
    if pid is None or not is_supervisor(pid, files):
        files.pid.unlink(missing_ok=True)  # stale: its PID may be some other process's now
        return None
    files.request_stop(timeout_s)
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    limit_s = timeout_s + STOP_MARGIN_S
    if not wait_with_spinner(f"stopping {files.name}", lambda: wait_for_exit(pid, limit_s)):
        _kill_hung_supervisor(pid, files)
        print(f"warning: the supervisor of {files.name} (pid {pid}) was still running "
              f"{limit_s:g} s after SIGTERM: killed it and its command's process group; see "
              f"{files.log}", file=sys.stderr)
    return pid


def _kill_hung_supervisor(pid: int, files: SupervisedFiles) -> None:
    command_pid = files.read_state().get("command_pid")
    if is_supervisor(pid, files):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        wait_for_exit(pid, 5.0)
    if isinstance(command_pid, int):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(command_pid, signal.SIGKILL)
    files.pid.unlink(missing_ok=True)


def _status(args: argparse.Namespace) -> int:
    folder = supervised_folder()
    names = known_names(folder)
    if args.name is not None:
        _files(args.name)
        if args.name not in names:
            raise CliError(f"nothing named {args.name} was supervised here ({folder}): start it "
                           f"with `rafka supervise start {args.name} -- COMMAND`")
        names = [args.name]
    if not names:
        print(f"nothing is supervised here ({folder})", file=sys.stderr)
        return 0
    rows = []
    for name in names:
        files = SupervisedFiles(folder, name)
        pid = files.recorded_pid()
        running = pid is not None and is_supervisor(pid, files)
        state = files.read_state()
        rows.append([name, pid if running else None, "running" if running else "stopped",
                     state.get("command_pid") if running else None, state.get("restarts", 0),
                     shlex.join(state.get("command") or [])])
    echo(table(["NAME", "SUPERVISOR PID", "STATE", "COMMAND PID", "RESTARTS", "COMMAND"], rows))
    if args.name is not None and rows[0][2] != "running":
        raise CliError(f"{args.name} is not running: start it again with "
                       f"`rafka supervise start {args.name} -- COMMAND`")
    return 0
