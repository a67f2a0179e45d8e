"""What a user (or an intruder) tries from the bed's client node against the secured
deployment (tests/harness/test_deployment.py): each probe is one quick attempt, printed as one
line of JSON, so that the test reads what happened rather than an exit code.

`python -m tests.harness.bed_probes <probe> [arguments]`, run on the client node:
- `sasl-round-trip BOOTSTRAP CA USER PASSWORD TOPIC`: confluent-kafka over SASL_SSL with
  SCRAM-SHA-512 produces records and reads them back in a group;
- `sasl-wrong-password BOOTSTRAP CA USER PASSWORD`: the same client asks for metadata with a
  wrong password; the errors it reported, and how long that took;
- `plaintext-kafka BOOTSTRAP`: a PLAINTEXT Kafka client asks for metadata;
- `tcp HOST PORT`: whether a TCP connection opens;
- `data-port-address TOPIC PARTITION`: as an operator's Ray driver (the login's token and
  TLS), where the partition's leader's replica host has its data port, and whether over TLS;
- `data-port HOST PORT`: a plaintext connection writes a request's worth of bytes and waits
  for anything back;
- `zookeeper-plain HOSTS`: kazoo without TLS tries to open a session;
- `placement TOPIC`: as an operator's Ray driver, the Ray node of each broker and of the
  replica host holding each of the topic's replicas (from the GCS's actor table).
"""

from __future__ import annotations

import json
import socket
import sys
import time
import uuid
from typing import Any

# Every probe gives up within this: a refusal must come quickly, and a door that only times
# out is reported as such.
PROBE_TIMEOUT_S = 8.0


def sasl_config(bootstrap: str, ca: str, user: str, password: str) -> dict[str, Any]:
    return {"bootstrap.servers": bootstrap, "security.protocol": "SASL_SSL",
            "ssl.ca.location": ca, "sasl.mechanism": "SCRAM-SHA-512",
            "sasl.username": user, "sasl.password": password}


def sasl_round_trip(bootstrap: str, ca: str, user: str, password: str,
                    topic: str) -> dict[str, Any]:
    from confluent_kafka import Consumer, Producer

    config = sasl_config(bootstrap, ca, user, password)
    values = [f"secured-{i}".encode() for i in range(20)]
    errors: list[str] = []
    producer = Producer({**config, "acks": "all"})
    for value in values:
        producer.produce(topic, value, on_delivery=lambda error, _message: (
            errors.append(str(error)) if error is not None else None))
    left = producer.flush(30)
    consumer = Consumer({**config, "group.id": f"{topic}-group",
                         "auto.offset.reset": "earliest"})
    consumer.subscribe([topic])
    read: list[bytes] = []
    deadline = time.monotonic() + 60
    while len(read) < len(values) and time.monotonic() < deadline:
        message = consumer.poll(0.5)
        if message is None:
            continue
        if message.error() is not None:
            errors.append(str(message.error()))
            continue
        read.append(message.value())
    consumer.close()
    return {"produced": len(values) - left, "delivery_errors": errors,
            "read_back": sorted(read) == sorted(values)}


def sasl_wrong_password(bootstrap: str, ca: str, user: str, password: str) -> dict[str, Any]:
    """The errors the client reports until the first authentication failure (or the probe
    gives up), how long that took, and whether metadata was served after it."""
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient

    reported: list[tuple[float, str, str]] = []
    started = time.monotonic()
    admin = AdminClient({**sasl_config(bootstrap, ca, user, password),
                         "error_cb": lambda error: reported.append(
                             (time.monotonic() - started, error.name(), error.str()))})
    while time.monotonic() - started < PROBE_TIMEOUT_S:
        admin.poll(0.1)
        if any(name == "_AUTHENTICATION" for _, name, _ in reported):
            break
    failed_after = next((at for at, name, _ in reported if name == "_AUTHENTICATION"), None)
    try:
        admin.list_topics(timeout=2)
        served = True
    except KafkaException:
        served = False
    return {"served": served, "authentication_failed_after_s": failed_after,
            "errors": [f"{name}: {text}" for _, name, text in reported][:5]}


def plaintext_kafka(bootstrap: str) -> dict[str, Any]:
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap, "security.protocol": "PLAINTEXT"})
    try:
        metadata = admin.list_topics(timeout=PROBE_TIMEOUT_S)
    except KafkaException as error:
        return {"served": False, "error": str(error)}
    return {"served": True, "brokers": len(metadata.brokers)}


def tcp(host: str, port: int) -> dict[str, Any]:
    try:
        socket.create_connection((host, port), timeout=PROBE_TIMEOUT_S).close()
    except ConnectionRefusedError:
        return {"connected": False, "error": "refused"}
    except OSError as error:
        return {"connected": False, "error": repr(error)}
    return {"connected": True}


def data_port(host: str, port: int) -> dict[str, Any]:
    """A client in the clear: a length-prefixed frame, as the port's own would start, then
    whatever comes back before the port closes or the probe gives up."""
    try:
        connection = socket.create_connection((host, port), timeout=PROBE_TIMEOUT_S)
    except OSError as error:
        return {"connected": False, "error": repr(error), "answer": ""}
    frame = b"\x00" * 32 + uuid.uuid4().bytes
    answer = b""
    outcome = "closed"
    try:
        connection.sendall(len(frame).to_bytes(4, "big") + frame)
        while chunk := connection.recv(4096):
            answer += chunk
    except TimeoutError:
        outcome = "silent"
    except OSError as error:  # reset by the port
        outcome = repr(error)
    finally:
        connection.close()
    return {"connected": True, "outcome": outcome, "answer": answer.hex()[:200]}


def operators_cluster() -> Any:
    """The deployed cluster, connected to as an operator's driver on the client node is."""
    import os
    from pathlib import Path

    from rafka import Cluster
    from rafka.coordination.security import load_credentials_file

    return Cluster.connect(os.environ["RAFKA_ZK"], "rafka", ray_address="auto",
                           zk_credentials=load_credentials_file(
                               Path.home() / ".rafka" / "zookeeper-credentials"))


def data_port_address(topic: str, partition: str) -> dict[str, Any]:
    import ray

    from tests.support.replicas import ReplicaOnHost

    cluster = operators_cluster()
    leader = ReplicaOnHost(cluster, topic, int(partition))
    host, port, _token, tls = ray.get(leader.host.data_port_address.remote(), timeout=60)
    return {"host": host, "port": port, "tls": tls is not None}


def placement(topic: str) -> dict[str, Any]:
    import ray

    from rafka.actors.naming import broker_name, replica_host_name
    from rafka.coordination.registration import read_brokers

    cluster = operators_cluster()

    def node_of(name: str) -> str:
        handle = ray.get_actor(name, namespace=cluster.namespace)
        # The GCS's actor table: Ray's state API would need the dashboard.
        return ray._private.state.actors(handle._actor_id.hex())["Address"]["NodeID"]

    brokers = read_brokers(cluster.store)
    # A new topic's replica hosts are made as its replicas are assigned: give them a moment.
    deadline = time.monotonic() + 30
    while True:
        try:
            replicas = {
                f"{topic}-{state['partition']}-{broker}": node_of(replica_host_name(
                    broker, topic, state["partition"], brokers[broker].replica_hosts))
                for state in cluster.describe_topic(topic)["partitions"]
                for broker in state["replicas"]}
            break
        except ValueError:  # ray.get_actor: no such actor yet
            if time.monotonic() > deadline:
                raise
            time.sleep(1)
    return {"brokers": {str(broker): node_of(broker_name(broker)) for broker in brokers},
            "replicas": replicas}


def zookeeper_plain(hosts: str) -> dict[str, Any]:
    from kazoo.client import KazooClient

    client = KazooClient(hosts=hosts, timeout=PROBE_TIMEOUT_S, connection_retry={"max_tries": 1})
    try:
        client.start(timeout=PROBE_TIMEOUT_S)
    except Exception as error:  # kazoo's timeout, or a refused connection
        client.stop()
        return {"session": False, "error": repr(error)}
    client.stop()
    return {"session": True}


def main() -> None:
    probe, *args = sys.argv[1:]
    if probe == "sasl-round-trip":
        found = sasl_round_trip(*args)
    elif probe == "sasl-wrong-password":
        found = sasl_wrong_password(*args)
    elif probe == "plaintext-kafka":
        found = plaintext_kafka(*args)
    elif probe == "tcp":
        found = tcp(args[0], int(args[1]))
    elif probe == "data-port-address":
        found = data_port_address(*args)
    elif probe == "data-port":
        found = data_port(args[0], int(args[1]))
    elif probe == "zookeeper-plain":
        found = zookeeper_plain(*args)
    elif probe == "placement":
        found = placement(*args)
    else:
        raise SystemExit(f"no probe {probe!r}")
    print(json.dumps(found))


if __name__ == "__main__":
    main()
