"""kcat (Debian's package of librdkafka's command-line client), unmodified, against rafka's Kafka
listener: it produces keyed records with a header, rafka reads them, and it consumes in a group,
a second run of which reads only what came after the first one's commits."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from rafka import Cluster
from tests.support.kafka_clients import PARTITIONS, new_topic, produce_values, read_with_rafka

KCAT = shutil.which("kcat") or shutil.which("kafkacat")


def kcat(cluster: Cluster, *args: str, stdin: str | None = None) -> list[str]:
    if KCAT is None:
        pytest.fail("kcat is not installed: apt-get install kcat (.ci/run installs it)")
    result = subprocess.run([KCAT, "-b", cluster.bootstrap_servers(), *args], input=stdin,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    return result.stdout.splitlines()


def test_kcat_produces_keyed_records_with_headers(kafka_cluster: Cluster) -> None:
    topic = new_topic(kafka_cluster, "from-kcat")
    lines = [f"key-{i}:value-{i}" for i in range(12)]
    kcat(kafka_cluster, "-P", "-t", topic, "-K", ":", "-H", "source=kcat", "-X", "acks=all",
         stdin="\n".join(lines) + "\n")
    records = read_with_rafka(kafka_cluster, topic, len(lines))
    assert sorted((key, value) for _p, _o, key, value, _t, _h in records) == sorted(
        (f"key-{i}".encode(), f"value-{i}".encode()) for i in range(12))
    assert {tuple(map(tuple, headers)) for *_rest, headers in records} == {
        (("source", b"kcat"),)}


def test_kcat_consumes_in_a_group_and_resumes_from_its_commits(kafka_cluster: Cluster) -> None:
    topic = new_topic(kafka_cluster, "to-kcat")
    produce_values(kafka_cluster, topic, {f"first-{i}".encode() for i in range(9)})
    group = ["-G", "kcat-group", "-X", "auto.offset.reset=earliest", "-f", "%s\n"]
    first = kcat(kafka_cluster, *group, "-c", "9", topic)
    assert sorted(first) == sorted(f"first-{i}" for i in range(9))
    produce_values(kafka_cluster, topic, {f"next-{i}".encode() for i in range(PARTITIONS * 2)})
    second = kcat(kafka_cluster, *group, "-c", str(PARTITIONS * 2), topic)
    assert sorted(second) == sorted(f"next-{i}" for i in range(PARTITIONS * 2))
