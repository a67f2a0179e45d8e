"""`rafka status`: the brokers, the controller, and every partition's leader and ISR."""

from __future__ import annotations

import argparse
import json
from typing import Any

import ray

from rafka.actors.cluster import Cluster
from rafka.cli.commands.connection import add_connection_options, connected
from rafka.cli.commands.output import echo, table


def register(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser(
        "status", help="brokers, controller, partitions with leader and ISR, under-replicated ones"
    )
    add_connection_options(parser)
    parser.add_argument("--format", choices=("text", "json"), default="text")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    with connected(args) as cluster:
        facts = gather(cluster)
    echo(json.dumps(facts, indent=2) if args.format == "json" else render(facts))
    return 0


def gather(cluster: Cluster) -> dict[str, Any]:
    partitions = []
    for topic in cluster.list_topics():
        description = cluster.describe_topic(topic)
        for entry in description["partitions"]:
            partitions.append({"topic": topic, **entry})
    under = [p for p in partitions if len(p["isr"]) < len(p["replicas"])]
    offline = [p for p in partitions if p["leader"] < 0]
    return {
        "cluster": cluster.name,
        "zookeeper": str(cluster.stack.zk_address),
        "ray": {"address": ray.get_runtime_context().gcs_address,
                "nodes": sum(1 for node in ray.nodes() if node["Alive"])},
        "brokers": cluster.brokers(),
        "controller": cluster.controller(),
        "partitions": partitions,
        "under_replicated": [f"{p['topic']}-{p['partition']}" for p in under],
        "offline": [f"{p['topic']}-{p['partition']}" for p in offline],
    }


def render(facts: dict[str, Any]) -> str:
    brokers = facts["brokers"]
    partitions = facts["partitions"]
    topics = sorted({p["topic"] for p in partitions})
    lines = [
        f"cluster      {facts['cluster']}",
        f"zookeeper    {facts['zookeeper']}",
        f"ray          {facts['ray']['address']} ({facts['ray']['nodes']} node(s))",
        f"brokers      {len(brokers)} live: "
        + (", ".join(f"{b['id']}@{b['host']}" for b in brokers) or "none"),
        f"controller   {'none' if facts['controller'] is None else facts['controller']}",
        "kafka        " + (", ".join(
            f"{b['id']}@{endpoint.split('://')[-1]}" for b in brokers
            for endpoint in b.get("endpoints", ())) or "not served (rafka up --kafka-port)"),
        f"topics       {len(topics)}, {len(partitions)} partition(s): "
        f"{len(facts['under_replicated'])} under-replicated, {len(facts['offline'])} offline",
    ]
    if partitions:
        lines += ["", table(
            ["TOPIC", "PARTITION", "LEADER", "REPLICAS", "ISR", "EPOCH", "HIGH-WATERMARK"],
            [[p["topic"], p["partition"], p["leader"] if p["leader"] >= 0 else "none",
              p["replicas"], p["isr"], p["leader_epoch"], p["high_watermark"]]
             for p in partitions])]
    lines += ["", "under-replicated partitions: "
              + (", ".join(facts["under_replicated"]) or "none")]
    if facts["offline"]:
        lines.append("offline partitions (no leader): " + ", ".join(facts["offline"]))
    return "\n".join(lines)
