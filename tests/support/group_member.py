"""One confluent-kafka consumer of a group, in a process of its own so that a test can kill it:
`python -m tests.support.group_member BOOTSTRAP GROUP TOPIC PROTOCOL LOG [CONFIG]`, CONFIG a
JSON object of more consumer settings (a classic member's `partition.assignment.strategy`).

TOPIC may be a regular expression (`^...`). It appends a JSON line to LOG for every change of
what it owns (`assign`, `revoke`, `lost`, with the partitions, their topics and the wall-clock
time) and for every record it reads (`record`, with
partition, offset and value), flushed at once, so that what a killed member did is on disk. It
reads until its standard input closes or says `leave`, then closes the consumer, which leaves
the group.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from pathlib import Path
from typing import Any

import confluent_kafka


def logged_events(log: Path) -> list[dict[str, Any]]:
    """The events a member has logged so far (a line being written is left out)."""
    if not log.exists():
        return []
    return [json.loads(line) for line in log.read_text().splitlines() if line.endswith("}")]


def owned_partitions(events: list[dict[str, Any]]) -> set[int]:
    """The partitions a member owns after `events`."""
    owned: set[int] = set()
    for event in events:
        if event["event"] == "assign":
            owned |= set(event["partitions"])
        elif event["event"] in ("revoke", "lost"):
            owned -= set(event["partitions"])
    return owned


def main() -> None:
    bootstrap, group, topic, protocol, log_path = sys.argv[1:6]
    extra = json.loads(sys.argv[6]) if len(sys.argv) > 6 else {}
    log = open(log_path, "a", buffering=1)  # noqa: SIM115 (kept open for the process's life)

    def note(event: str, **fields: Any) -> None:
        log.write(json.dumps({"event": event, "time": time.time(), **fields}) + "\n")

    def partitions_of(partitions: list[confluent_kafka.TopicPartition]) -> list[int]:
        return sorted(tp.partition for tp in partitions)

    leaving = threading.Event()

    def watch_stdin() -> None:
        for line in sys.stdin:
            if line.strip() == "leave":
                break
        leaving.set()

    threading.Thread(target=watch_stdin, daemon=True).start()
    consumer = confluent_kafka.Consumer({
        "bootstrap.servers": bootstrap, "group.id": group, "group.protocol": protocol,
        "auto.offset.reset": "earliest", "enable.auto.commit": True,
        "auto.commit.interval.ms": 200, **extra})
    def noting(event: str) -> Any:
        return lambda consumer, parts: note(event, partitions=partitions_of(parts),
                                            topics=sorted({tp.topic for tp in parts}))

    consumer.subscribe([topic], on_assign=noting("assign"), on_revoke=noting("revoke"),
                       on_lost=noting("lost"))
    note("started")
    while not leaving.is_set():
        message = consumer.poll(0.1)
        if message is None:
            continue
        if message.error() is not None:
            note("error", error=str(message.error()))
            continue
        note("record", partition=message.partition(), offset=message.offset(),
             value=message.value().decode())
    consumer.close()
    note("closed")


if __name__ == "__main__":
    main()
