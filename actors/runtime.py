"""Connecting to Ray the way every rafka process must: one job config, the JVM flags RayDP needs;
and the priority rafka's server actors run at."""

from __future__ import annotations

import logging
import os
from typing import Any

import ray
from ray.job_config import JobConfig
from ray.util import list_named_actors

from rafka.actors.logs import quiet_ray

log = logging.getLogger(__name__)

# The nice value of a server process: the machine's default, as a Kafka broker's JVM has.
SERVER_NICENESS = 0
# How long a client waits for a broker's or a host's answer through Ray before it reads
# ZooKeeper instead (a process whose GCS connection is half-open waits on Ray for minutes).
ZOOKEEPER_AFTER_S = 3.0

# Spark 3.5 on Java 17 needs these opens (Spark's own list, plus what Ray's Java serializer, FST,
# reflects over in RayDP's app master). `java.math` is a package of the `java.base` module.
_OPENS = [
    ("java.base", "java.lang"),
    ("java.base", "java.lang.invoke"),
    ("java.base", "java.lang.reflect"),
    ("java.base", "java.io"),
    ("java.base", "java.net"),
    ("java.base", "java.nio"),
    ("java.base", "java.math"),
    ("java.base", "java.text"),
    ("java.base", "java.time"),
    ("java.base", "java.util"),
    ("java.base", "java.util.concurrent"),
    ("java.base", "java.util.concurrent.atomic"),
    ("java.base", "java.util.regex"),
    ("java.base", "java.security"),
    ("java.base", "jdk.internal.misc"),
    ("java.base", "sun.nio.ch"),
    ("java.base", "sun.nio.cs"),
    ("java.base", "sun.nio.fs"),
    ("java.base", "sun.security.action"),
    ("java.base", "sun.util.calendar"),
    ("java.sql", "java.sql"),
]
JAVA17_OPTIONS: tuple[str, ...] = (
    *(f"--add-opens={module}/{package}=ALL-UNNAMED" for module, package in _OPENS),
    "-Djdk.reflect.useDirectMethodHandle=false",
    "-Dio.netty.tryReflectionSetAccessible=true",
)


def init_ray(address: str | None = None, *, namespace: str | None = None, **kwargs: Any) -> None:
    """Start a local Ray instance (or join the one at `address`, "auto" for the one `ray start`
    left here) unless this process is connected to Ray already.

    The job config carries the Java 17 flags, which RayDP's JVM workers read from it.
    """
    if ray.is_initialized():
        return
    # Without an address ray.init() joins any cluster that `ray start` left on this machine;
    # the embedded default is a Ray of our own, so ask for a local one explicitly.
    address = address or "local"
    kwargs.setdefault("include_dashboard", False)
    for option, value in quiet_ray().items():  # RAFKA_LOG_LEVEL: see actors/logs.py
        kwargs.setdefault(option, value)
    ray.init(
        address=address,
        namespace=namespace,
        job_config=JobConfig(jvm_options=list(JAVA17_OPTIONS)),
        **kwargs,
    )


def named_actors(namespace: str) -> list[str]:
    """The names of the named actors in a Ray namespace (a cluster's brokers and replica hosts),
    alive or being restarted; the one place rafka lists them."""
    return sorted(entry["name"] for entry in list_named_actors(all_namespaces=True)
                  if entry["namespace"] == namespace)


def run_at_server_priority() -> bool:
    """Give this actor's process (every thread of it) the CPU priority of a server; True if it
    has it.

    Ray starts its workers at nice 15, below the raylet and below any client on the machine.
    That suits tasks, not brokers and replica hosts: on two cores a Kafka client in the driver
    (librdkafka, whose threads poll while a request is out) took the CPU from the niced brokers,
    each produce request waited seconds for a core, and at nice 0 confluent-kafka's idempotent
    producer wrote several times as many records/s (docs/kafka-protocol.md, "How fast").
    Raising a priority needs CAP_SYS_NICE (root has it; a container may not): without it the
    process keeps Ray's niceness and says how to lift it.
    """
    # Linux keeps a nice value per thread, and Ray's threads were started before this call.
    threads = os.listdir("/proc/self/task") if os.path.isdir("/proc/self/task") else ["0"]
    for thread in map(int, threads):
        try:
            if os.getpriority(os.PRIO_PROCESS, thread) > SERVER_NICENESS:
                os.setpriority(os.PRIO_PROCESS, thread, SERVER_NICENESS)
        except ProcessLookupError:
            continue  # a thread that ended meanwhile
        except PermissionError:
            log.warning(
                "this server runs at Ray's worker niceness %d, below its clients: give the "
                "process CAP_SYS_NICE (docker run --cap-add SYS_NICE) or start Ray with "
                "RAY_worker_niceness=0", os.getpriority(os.PRIO_PROCESS, 0))
            return False
    return True
