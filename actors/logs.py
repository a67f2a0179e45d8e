"""Quiet by default: what of Ray's, Spark's and kazoo's logging reaches a user's terminal.

`RAFKA_LOG_LEVEL` (a `logging` level name; `error` unless set) is the one switch. At the default
a user sees rafka's own output, its progress bars and errors; `warning` adds the libraries'
warnings, and `info` (or `debug`) shows everything they would print by themselves, the actors'
lines included (Ray forwards them to the driver).

Where rafka itself caused a warning it is fixed at the cause (see `pipelines/topics.py`, which
converts Spark frames through RayDP directly). What is left comes from RayDP reaching into
internals its pinned versions deprecate (`ray.worker.global_worker`, `DataFrame.sql_ctx`): those
two messages are dropped at the default level, since a user can do nothing about them.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import tempfile
import warnings
from collections.abc import Iterator
from pathlib import Path

LEVEL_VARIABLE = "RAFKA_LOG_LEVEL"
DEFAULT_LEVEL = "error"

# RayDP 1.6.5's own deprecated accesses: nothing a user can act on.
_RAYDP_DEPRECATIONS = ("`ray.worker.global_worker` is a private attribute",)


def log_level() -> int:
    """The level from RAFKA_LOG_LEVEL; a name `logging` does not know is an error."""
    name = os.environ.get(LEVEL_VARIABLE, DEFAULT_LEVEL).strip().upper()
    level = logging.getLevelName(name)
    if not isinstance(level, int):
        raise ValueError(f"{LEVEL_VARIABLE}={name.lower()!r}: use debug, info, warning or error")
    return level


def quiet() -> bool:
    """Whether the libraries' chatter is hidden (any level above info)."""
    return log_level() > logging.INFO


def quiet_ray() -> dict[str, object]:
    """Before `ray.init`: set Ray's loggers to the level and return the `ray.init` arguments that
    go with it (forward the actors' lines only when asked)."""
    level = log_level()
    if quiet():
        ray_logger = logging.getLogger("ray")
        if not any(isinstance(f, _DropMessages) for f in ray_logger.filters):
            ray_logger.addFilter(_DropMessages(_RAYDP_DEPRECATIONS))
        warnings.filterwarnings("ignore", message="DataFrame.sql_ctx is an internal property")
    return {"logging_level": level, "log_to_driver": not quiet()}


def log_actor_lines() -> None:
    """In a broker's or replica host's process: rafka's lines at RAFKA_LOG_LEVEL, when that is
    info or debug, to the process's stderr (Ray's `worker-*.err`, forwarded to the driver that
    asks for it), with their time. Without a handler Python prints only warnings and errors
    (its last-resort handler), without a time, and a post-mortem has no info lines to read."""
    level = log_level()
    logger = logging.getLogger("rafka")
    if level > logging.INFO or logger.handlers:
        return
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    logger.addHandler(handler)
    logger.setLevel(level)


def quiet_ray_data() -> None:
    """Ray Data prints a banner per dataset it runs ("Running Dataset ..."): only when asked."""
    from ray.data import DataContext

    DataContext.get_current().enable_progress_bars = not quiet()
    logging.getLogger("ray.data").setLevel(log_level())


def spark_log4j_config() -> str:
    """A log4j2 config of the level, for Spark's JVMs (RayDP's `spark.log4j.config.file.name`
    and `spark.ray.log4j.config.file.name`): with RayDP's own, Spark prints its defaults' banner
    and WARN lines, and RayDP's app master complains that it found none."""
    level = {logging.DEBUG: "debug", logging.INFO: "info", logging.WARNING: "warn"}.get(
        log_level(), "error")
    path = Path(tempfile.gettempdir()) / f"rafka-log4j2-{level}.properties"
    if not path.exists():
        path.write_text(
            "status = error\n"
            f"rootLogger.level = {level}\n"
            "rootLogger.appenderRef.stderr.ref = console\n"
            "appender.console.type = Console\n"
            "appender.console.name = console\n"
            "appender.console.target = SYSTEM_ERR\n"
            "appender.console.layout.type = PatternLayout\n"
            "appender.console.layout.pattern = %d{yy/MM/dd HH:mm:ss} %p %c{1}: %m%n%ex\n"
            # Spark sets the shell's level from this logger, and says so unless it is given.
            "logger.repl.name = org.apache.spark.repl.Main\n"
            f"logger.repl.level = {level}\n"
        )
    return f"file:{path}"


@contextlib.contextmanager
def jvm_stderr_to_file(name: str) -> Iterator[Path | None]:
    """While quiet, point this process's stderr (fd 2) at a log file while a JVM starts: the JVM
    inherits it, so its native Ray core's start-up lines, which nothing else silences, land
    there rather than on the terminal. Yields the file (None when not quiet)."""
    if not quiet():
        yield None
        return
    path = Path(tempfile.gettempdir()) / f"rafka-{name}-{os.getpid()}.log"
    sys.stderr.flush()
    saved = os.dup(2)
    with open(path, "ab") as log:
        os.dup2(log.fileno(), 2)
    try:
        yield path
    finally:
        sys.stderr.flush()
        os.dup2(saved, 2)
        os.close(saved)


class _DropMessages(logging.Filter):
    def __init__(self, fragments: tuple[str, ...]) -> None:
        super().__init__()
        self.fragments = fragments

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        return not any(fragment in message for fragment in self.fragments)
