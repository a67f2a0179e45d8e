"""The embedded ZooKeeper server and ZooKeeper connection strings.

`Cluster.start()` with no ensemble runs one ZooKeeper server itself. Its jars ship inside pyspark
(`pyspark/jars/zookeeper-3.6.*.jar`), so nothing beyond `pip install` and a Java runtime, which
Spark needs anyway, is required. The server binds 127.0.0.1 on a free port and keeps its data and
its log under a directory it is given. `rafka.coordination.ensemble` runs the same server as one
member of an ensemble (`EnsembleMember`, a subclass: the process handling is this one).
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import importlib.util
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import NoReturn

import psutil

from rafka.common.waiting import wait_until
from rafka.coordination.errors import (
    InvalidZooKeeperAddressError,
    JavaNotFoundError,
    ZooKeeperPortInUseError,
    ZooKeeperServerError,
    ZooKeeperStartError,
)
from rafka.coordination.zookeeper_tls import ZooKeeperTls

_HOST_PORT = re.compile(r"^(?P<host>[A-Za-z0-9.\-]+|\[[0-9A-Fa-f:]+\]):(?P<port>\d{1,5})$")
_CHROOT = re.compile(r"^(/[A-Za-z0-9._\-]+)+$")

SERVER_MAIN = "org.apache.zookeeper.server.ZooKeeperServerMain"
# An ensemble member's main class (rafka.coordination.ensemble); named here, beside the
# standalone one, because a recorded server is recognised by either.
QUORUM_MAIN = "org.apache.zookeeper.server.quorum.QuorumPeerMain"


@dataclass(frozen=True)
class ZooKeeperAddress:
    """A parsed ZooKeeper connection string, `host:port[,host:port...][/chroot]`."""

    hosts: tuple[tuple[str, int], ...]
    chroot: str = ""

    @classmethod
    def parse(cls, text: str) -> ZooKeeperAddress:
        if not isinstance(text, str) or not text.strip():
            raise InvalidZooKeeperAddressError(
                f"ZooKeeper address must be a non-empty string like 'host:2181[/chroot]', "
                f"got {text!r}"
            )
        text = text.strip()
        servers, slash, chroot = text.partition("/")
        chroot = slash + chroot if slash else ""
        hosts = []
        for part in servers.split(","):
            match = _HOST_PORT.match(part.strip())
            if not match or not 0 < int(match["port"]) < 65536:
                raise InvalidZooKeeperAddressError(
                    f"ZooKeeper address {text!r}: {part!r} is not 'host:port' "
                    f"(expected 'host:port[,host:port...][/chroot]')"
                )
            hosts.append((match["host"], int(match["port"])))
        if chroot:
            validate_chroot(chroot)
        return cls(tuple(hosts), chroot.rstrip("/"))

    @property
    def servers(self) -> str:
        """The `host:port,...` part, without the chroot."""
        return ",".join(f"{host}:{port}" for host, port in self.hosts)

    def child(self, path: str) -> ZooKeeperAddress:
        """The same ensemble with `path` appended to the chroot."""
        chroot = f"{self.chroot}/{path.strip('/')}"
        validate_chroot(chroot)
        return ZooKeeperAddress(self.hosts, chroot)

    def __str__(self) -> str:
        return self.servers + self.chroot


def validate_chroot(chroot: str) -> str:
    """Reject a chroot that is not an absolute path of `[A-Za-z0-9._-]` names."""
    if not _CHROOT.match(chroot) or any(part in (".", "..") for part in chroot.split("/")):
        raise InvalidZooKeeperAddressError(
            f"ZooKeeper chroot {chroot!r} must be an absolute path of names made of "
            f"[A-Za-z0-9._-], such as '/rafka/prod' ('.' and '..' are not allowed)"
        )
    return chroot


def pyspark_jars() -> Path:
    """The folder of jars inside the installed pyspark, which holds ZooKeeper's."""
    spec = importlib.util.find_spec("pyspark")
    if spec is None or not spec.submodule_search_locations:
        raise ZooKeeperStartError(
            "pyspark is not installed, and the embedded ZooKeeper runs from its jars: "
            "pip install rafka (which pins pyspark), or pass an existing ensemble's address"
        )
    jars = Path(next(iter(spec.submodule_search_locations))) / "jars"
    if not any(jars.glob("zookeeper-3.*.jar")):
        raise ZooKeeperStartError(f"no zookeeper-3.*.jar in {jars}: reinstall pyspark 3.5")
    return jars


def find_java() -> str:
    """The `java` executable: $JAVA_HOME/bin/java, else the one on PATH."""
    java_home = os.environ.get("JAVA_HOME")
    if java_home and os.access(Path(java_home, "bin", "java"), os.X_OK):
        return str(Path(java_home, "bin", "java"))
    java = shutil.which("java")
    if java is None:
        raise JavaNotFoundError(
            "no Java runtime found (checked $JAVA_HOME and PATH). The embedded ZooKeeper and "
            "Spark need Java 17: on Debian or Ubuntu, 'apt-get install default-jre-headless'; "
            "or set JAVA_HOME, or pass the address of an existing ZooKeeper ensemble"
        )
    return java


def render_config(settings: dict[str, object]) -> str:
    """zoo.cfg's text: one `key=value` line per setting, in order."""
    return "".join(f"{key}={value}\n" for key, value in settings.items())


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


def bind_problem(host: str, port: int, *, reuse_address: bool = False) -> str | None:
    """Why `host:port` cannot be bound here, or None if it can. With `reuse_address`, as a
    server that sets SO_REUSEADDR (ZooKeeper does) binds it: connections lingering in TIME_WAIT
    do not count."""
    host = host.strip("[]")
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        if reuse_address:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except socket.gaierror as error:
            return f"cannot resolve {host}: {error.strerror or error}"
        except OSError as error:
            return error.strerror or str(error)
    return None


def port_is_free(host: str, port: int, *, reuse_address: bool = False) -> bool:
    """Whether `port` can be bound (see `bind_problem`)."""
    return bind_problem(host, port, reuse_address=reuse_address) is None


def four_letter_word(host: str, port: int, word: str, timeout: float = 2.0) -> str:
    """Send one of ZooKeeper's four-letter admin commands and return the answer."""
    with socket.create_connection((host, port), timeout=timeout) as sock:
        sock.sendall(word.encode("ascii"))
        chunks = []
        while chunk := sock.recv(4096):
            chunks.append(chunk)
    return b"".join(chunks).decode("utf-8", "replace")


def _die_with_parent() -> None:
    """In the child before exec: ask Linux to SIGTERM it when the parent dies.

    Without this a ZooKeeper JVM outlives a driver that was SIGKILLed, and nothing stops it.
    """
    pr_set_pdeathsig = 1
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(pr_set_pdeathsig, signal.SIGTERM)


_LOG4J2 = """\
status = error
appender.console.type = Console
appender.console.name = console
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{ISO8601} %-5p [%t] %c{1} - %m%n
rootLogger.level = info
rootLogger.appenderRef.console.ref = console
"""


class EmbeddedZooKeeper:
    """One standalone ZooKeeper server in a child JVM, stopped by its PID and nothing else.

    >>> with EmbeddedZooKeeper("/tmp/zk") as zk:
    ...     print(zk.address)          # 127.0.0.1:<free port>

    A subclass changes what runs through `main_class`, `label`, `_config` and `_serving`
    (`rafka.coordination.ensemble.EnsembleMember`); starting, stopping, killing and restarting
    by PID stay here.
    """

    main_class = SERVER_MAIN
    label = "the embedded ZooKeeper"

    def __init__(
        self,
        data_dir: str | os.PathLike[str],
        *,
        port: int | None = None,
        host: str = "127.0.0.1",
        tick_time_ms: int = 500,
        min_session_timeout_ms: int = 1000,
        max_session_timeout_ms: int = 60000,
        force_sync: bool = True,
        heap_mb: int = 256,
        start_timeout_s: float = 60.0,
        die_with_parent: bool = True,
        new_session: bool = False,
        tls: ZooKeeperTls | None = None,
        secure_port: int | None = None,
    ) -> None:
        self.data_dir = Path(data_dir).resolve()
        self.host = host
        self.requested_port = port
        self.port: int | None = None
        self.tick_time_ms = tick_time_ms
        self.min_session_timeout_ms = min_session_timeout_ms
        self.max_session_timeout_ms = max_session_timeout_ms
        self.force_sync = force_sync
        self.heap_mb = heap_mb
        self.start_timeout_s = start_timeout_s
        self.die_with_parent = die_with_parent
        # A server that outlives its starter (`rafka up`) runs in a session of its own, so that
        # Ctrl-C or a hang-up aimed at the starter's terminal does not reach the JVM.
        self.new_session = new_session
        # With `tls`, a secureClientPort beside the client port (`rafka.coordination.
        # zookeeper_tls`): `secure_port`, or a free one. The client port stays, for the
        # four-letter words that tell whether the server serves: bind it to 127.0.0.1 where
        # only the secure port may be reached from elsewhere.
        self.tls = tls
        self.secure_host = host
        self.requested_secure_port = secure_port
        self.secure_port: int | None = None
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def log_path(self) -> Path:
        return self.data_dir / "zookeeper.log"

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process else None

    @property
    def address(self) -> ZooKeeperAddress:
        if self.port is None:
            raise ZooKeeperStartError(f"{self.label} is not started")
        return ZooKeeperAddress(((self.host, self.port),))

    @property
    def secure_address(self) -> ZooKeeperAddress:
        """Where clients connect over TLS (a server started with `tls`)."""
        if self.secure_port is None:
            raise ZooKeeperStartError(f"{self.label} serves no secure client port")
        return ZooKeeperAddress(((self.secure_host, self.secure_port),))

    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    def start(self) -> EmbeddedZooKeeper:
        if self.running():
            return self
        if self.requested_port is not None:
            if not port_is_free(self.host, self.requested_port):
                raise ZooKeeperPortInUseError(
                    f"port {self.host}:{self.requested_port} is already in use: stop what holds "
                    f"it, choose another port, or leave the port out to get a free one"
                )
            return self._launch(self.requested_port)
        return self._launch(free_port(self.host))

    def restart(self, pause_s: float = 0.0, *, kill: bool = True) -> EmbeddedZooKeeper:
        """Stop the server and start it again on the same port and data dir after `pause_s`.

        By default it is SIGKILLed (by its PID), as a crash would take it: no clean shutdown,
        no final snapshot. Clients reconnect to the same address, and since a standalone server
        keeps its sessions in its data dir, sessions that do not time out meanwhile survive.
        """
        if self.port is None:
            raise ZooKeeperStartError(f"{self.label} was never started: start() it")
        port = self.port
        if kill:
            self.kill()
        else:
            self.stop()
        time.sleep(pause_s)
        # The killed server's connections linger in TIME_WAIT on this port; ZooKeeper binds
        # with SO_REUSEADDR, so only a listener of another process stops it.
        if not port_is_free(self.host, port, reuse_address=True):
            raise ZooKeeperPortInUseError(
                f"port {self.host}:{port} was taken while {self.label} was down: "
                f"it cannot come back on the same address"
            )
        return self._launch(port)

    def _command(self, config_path: Path) -> list[str]:
        """The server's JVM command line, from its zoo.cfg at `config_path`."""
        return [
            find_java(),
            f"-Xmx{self.heap_mb}m",
            "-XX:+UseSerialGC",
            f"-Dlog4j2.configurationFile={self.data_dir / 'log4j2.properties'}",
            "-Dzookeeper.admin.enableServer=false",
            "-cp",
            f"{pyspark_jars()}/*",
            self.main_class,
            str(config_path),
        ]

    def exec_in_place(self) -> NoReturn:
        """Become the server: this process is replaced by its JVM, on its requested port, with
        the same PID (recorded in the data dir, as `start` records its child's), its output
        appended to `log_path`. For a supervisor that keeps the server running (`rafka
        zookeeper run` under `rafka supervise`): its signals reach the JVM itself, and the
        JVM's exit is this process's. With `die_with_parent`, the JVM gets SIGTERM when its
        parent (the supervisor) dies, rather than hold the data dir its next supervisor
        needs."""
        if self.requested_port is None:
            raise ZooKeeperServerError(f"{self.label} run in place needs its port: its clients "
                                       f"must find it again after each restart")
        command = self._command(self._write_config(self.requested_port))
        (self.data_dir / PID_FILE).write_text(f"{os.getpid()}\n")
        sys.stdout.flush()
        sys.stderr.flush()
        log = os.open(self.log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        os.dup2(log, 1)
        os.dup2(log, 2)
        os.close(log)
        if self.die_with_parent:
            _die_with_parent()
        os.execv(command[0], command)

    def _launch(self, port: int) -> EmbeddedZooKeeper:
        command = self._command(self._write_config(port))
        with open(self.log_path, "ab") as log:
            self._process = subprocess.Popen(
                command,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                preexec_fn=_die_with_parent if self.die_with_parent else None,
                start_new_session=self.new_session,
            )
        self.port = port
        (self.data_dir / PID_FILE).write_text(f"{self._process.pid}\n")
        _running_servers.add(self)
        try:
            self._wait_until_serving()
        except BaseException:
            self.stop()
            raise
        return self

    def detach(self) -> int:
        """Leave the server running when this interpreter exits; return its PID.

        It is no longer stopped at exit (`stop()` still stops it). Another process stops it
        later with `stop_recorded_server(data_dir)`, by the PID recorded in its data dir.
        """
        if not self.running():
            raise ZooKeeperStartError(f"{self.label} is not running: start() it first")
        if self.die_with_parent:
            raise ZooKeeperServerError(
                "this server was started with die_with_parent=True, so it stops when this "
                "process exits anyway: create it with die_with_parent=False to detach it"
            )
        _running_servers.discard(self)
        assert self._process is not None
        return self._process.pid

    def _write_config(self, port: int) -> Path:
        if self.tls is not None and self.secure_port is None:
            self.secure_port = self.requested_secure_port or free_port(self.secure_host)
        (self.data_dir / "data").mkdir(parents=True, exist_ok=True)
        (self.data_dir / "log4j2.properties").write_text(_LOG4J2)
        path = self.data_dir / "zoo.cfg"
        settings = self._config(port)
        if self.tls is not None and self.secure_port is not None:
            settings.update(self.tls.server_settings(self.secure_port, self.secure_host))
        path.write_text(render_config(settings))
        return path

    def _config(self, port: int) -> dict[str, object]:
        """The settings of zoo.cfg, in order."""
        return {
            "tickTime": self.tick_time_ms,
            "minSessionTimeout": self.min_session_timeout_ms,
            "maxSessionTimeout": self.max_session_timeout_ms,
            "dataDir": self.data_dir / "data",
            "clientPort": port,
            "clientPortAddress": self.host,
            # Every actor of a local cluster connects from 127.0.0.1; the default cap is 60.
            "maxClientCnxns": 0,
            "admin.enableServer": "false",
            "4lw.commands.whitelist": "ruok,srvr,stat,mntr,cons",
            "forceSync": "yes" if self.force_sync else "no",
            "autopurge.snapRetainCount": 3,
            "autopurge.purgeInterval": 1,
        }

    def _serving(self, srvr_answer: str) -> bool:
        """Whether the answer to `srvr` says the server is ready (here: serving standalone)."""
        return "Mode: standalone" in srvr_answer

    def _ready(self, host: str, port: int) -> bool:
        """Whether the server on `host:port` is ready: by default, what `srvr` answers."""
        return self._serving(four_letter_word(host, port, "srvr"))

    def _wait_until_serving(self) -> None:
        assert self._process is not None and self.port is not None
        process, host, port = self._process, self.host, self.port

        def serving() -> bool:
            if process.poll() is not None:
                self._raise_start_failure(f"exited with code {process.returncode}")
            try:
                return self._ready(host, port)
            except OSError:
                return False

        try:
            wait_until(serving, self.start_timeout_s, "ZooKeeper to serve")
        except TimeoutError:
            self._raise_start_failure(f"did not answer within {self.start_timeout_s:.0f} s")

    def _raise_start_failure(self, what: str) -> None:
        tail = self.log_tail()
        if "Address already in use" in tail:
            raise ZooKeeperPortInUseError(
                f"{self.label} could not bind {self.host}:{self.port}: another process "
                f"took the port; start again (a free port is chosen each time) or choose one"
            )
        raise ZooKeeperStartError(
            f"{self.label} {what}; its log {self.log_path} ends with:\n{tail}"
        )

    def log_tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def kill(self) -> None:
        """SIGKILL the server (by its PID) and reap it: a crash, with no clean shutdown."""
        self._end(_kill_and_reap)

    def stop(self, timeout_s: float = 10.0) -> None:
        """Stop the server this object started (by its PID), SIGKILL if it will not go."""
        self._end(lambda process: _terminate_or_kill(process, timeout_s))

    def _end(self, halt: Callable[[subprocess.Popen[bytes]], None]) -> None:
        """Forget the server's process, `halt` it if it still runs, and remove its PID file."""
        process, self._process = self._process, None
        _running_servers.discard(self)
        if process is None:
            return
        if process.poll() is None:
            halt(process)
        with contextlib.suppress(FileNotFoundError):
            (self.data_dir / "zookeeper.pid").unlink()

    def __enter__(self) -> EmbeddedZooKeeper:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def __repr__(self) -> str:
        state = f"pid={self.pid} port={self.port}" if self.running() else "stopped"
        return f"{type(self).__name__}({str(self.data_dir)!r}, {state})"


def _kill_and_reap(process: subprocess.Popen[bytes]) -> None:
    process.kill()
    process.wait()


def _terminate_or_kill(process: subprocess.Popen[bytes], timeout_s: float) -> None:
    """SIGTERM, and SIGKILL if the process is still there after `timeout_s`."""
    process.terminate()
    try:
        process.wait(timeout_s)
    except subprocess.TimeoutExpired:
        _kill_and_reap(process)


_running_servers: weakref.WeakSet[EmbeddedZooKeeper] = weakref.WeakSet()


@atexit.register
def _stop_running_servers() -> None:
    for server in list(_running_servers):
        server.stop()


# --- Servers started by another process (`rafka up`), stopped by the PID in their data dir ---

PID_FILE = "zookeeper.pid"


def pid_alive(pid: int) -> bool:
    """Whether `pid` is a live process (a zombie, dead but not yet reaped, counts as gone)."""
    try:
        return psutil.Process(pid).status() not in (psutil.STATUS_ZOMBIE, psutil.STATUS_DEAD)
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return False


def process_arguments(pid: int) -> list[str]:
    """The command line of `pid` ([] if it is gone or unreadable)."""
    try:
        return psutil.Process(pid).cmdline()
    except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
        return []


def wait_for_exit(pid: int, timeout_s: float) -> bool:
    """Wait until `pid` is gone (it need not be our child); False if it is still alive."""
    try:
        return wait_until(lambda: not pid_alive(pid), timeout_s, f"process {pid} to exit",
                          interval_s=0.05)
    except TimeoutError:
        return False


def terminate_pid(pid: int, timeout_s: float = 10.0) -> None:
    """SIGTERM `pid`, then SIGKILL if it has not gone within `timeout_s`."""
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    if not wait_for_exit(pid, timeout_s):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        wait_for_exit(pid, 5.0)


def recorded_pid(data_dir: str | os.PathLike[str]) -> int | None:
    """The PID an embedded server recorded in `data_dir` when it started, if any."""
    try:
        return int(Path(data_dir, PID_FILE).read_text().strip())
    except (FileNotFoundError, ValueError):
        return None


def is_embedded_server(pid: int, data_dir: str | os.PathLike[str]) -> bool:
    """Whether `pid` is alive and is the embedded ZooKeeper serving from `data_dir`, standalone
    or as an ensemble member.

    A recorded PID may have been reused by an unrelated process since (after a reboot, say):
    its command line must name ZooKeeper's main class and this data dir's config file.
    """
    arguments = process_arguments(pid)
    config = str(Path(data_dir).resolve() / "zoo.cfg")
    main = SERVER_MAIN in arguments or QUORUM_MAIN in arguments
    return pid_alive(pid) and main and config in arguments


def stop_recorded_server(data_dir: str | os.PathLike[str], timeout_s: float = 10.0) -> int | None:
    """Stop the embedded server recorded in `data_dir` (started by any process); its PID.

    Only a process that really is that server is signalled; a stale PID file (the server is
    gone, or the PID now belongs to something else) is removed, and None is returned.
    """
    pid = recorded_pid(data_dir)
    stopped = None
    if pid is not None and is_embedded_server(pid, data_dir):
        terminate_pid(pid, timeout_s)
        stopped = pid
    with contextlib.suppress(FileNotFoundError):
        Path(data_dir, PID_FILE).unlink()
    return stopped
