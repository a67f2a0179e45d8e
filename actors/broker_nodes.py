"""Which Ray node a detached broker lives on, for good.

A broker's logs are on its node's disk, so Ray must restart it there and nowhere else. Asking
only for one unit of a resource every node offers once (`rafka_broker` in cluster.yaml) is not
enough: while two brokers are down, the first of their nodes back offers its unit to either,
and a broker started on the other's node would find an empty data directory under its id (on
the multi-node bed, whose nodes share one filesystem, every broker once started on every node).
So a detached broker also asks for a sliver of Ray's own `node:<address>` resource, which only
the node at that address has: the node is chosen once, when the broker is created, among those
with room for it (their broker resources, less the other brokers living there).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

# How much of its node's `node:<address>` resource (1 on every node) a broker asks for: enough
# to pin it there, and many such pins fit one node.
NODE_PIN = 0.001


def node_resource(address: str) -> dict[str, float]:
    """The resource that pins an actor to the node at `address`."""
    return {f"node:{address}": NODE_PIN}


def choose_node(nodes: Iterable[Mapping[str, Any]], resources: Mapping[str, float],
                taken: Mapping[str, int]) -> str | None:
    """The address of a node for a new broker: alive, with room for one more broker asking
    for `resources` beside the `taken` ones (brokers already living there, by address), as
    the node's total resources count it; the lowest address, so that brokers created in order
    go to nodes in order. None if no node has room yet."""
    fitting = sorted(
        address for node in nodes
        if node.get("Alive") and taken.get(address := str(node["NodeManagerAddress"]), 0)
        < _room(node.get("Resources", {}), resources))
    return fitting[0] if fitting else None


def _room(offered: Mapping[str, float], resources: Mapping[str, float]) -> float:
    """How many brokers asking for `resources` a node offering `offered` holds."""
    return min((offered.get(name, 0) // amount for name, amount in resources.items()
                if amount > 0), default=float("inf"))
