"""What of each write gap the fault schedule does not explain.

With `min.insync.replicas=2` of 3, a partition takes no writes while two of its three brokers
are out, as in Kafka: a nemesis that keeps faults on two nodes at once for a minute stops every
partition for that minute, however fast the cluster recovers. So a write gap alone says as much
about the schedule as about rafka. What the cluster owes is the rest: the stretches of a gap in
which enough nodes had no fault in place (`quorate`), which it spends detecting a fault,
electing, and bringing a healed node back (booting it, Ray restarting its broker, catching up).
`unexplained_write_gaps` measures the longest such stretch per partition: the bound the bed's
nemesis asserts on recovery, beside the plain gaps it reports.
"""

from __future__ import annotations

from collections.abc import Iterable
from itertools import pairwise

from .checker import Fault, History, write_marks


def short_of_nodes(faults: Iterable[Fault], nodes: int, needed: int
                   ) -> list[tuple[float, float]]:
    """The stretches (from, to) in which fewer than `needed` of `nodes` nodes had no fault in
    place. A fault counts from its injection to its heal, on its `node`; two faults on one
    node count once."""
    edges: list[tuple[float, int, str]] = []
    for fault in faults:
        if not fault.node:
            raise ValueError(f"a fault with no node: {fault}")
        edges += [(fault.at, 1, fault.node), (fault.healed, -1, fault.node)]
    stretches: list[tuple[float, float]] = []
    faulty: dict[str, int] = {}
    short_since: float | None = None
    edges.sort()
    for index, (at, change, node) in enumerate(edges):
        faulty[node] = faulty.get(node, 0) + change
        if index + 1 < len(edges) and edges[index + 1][0] == at:
            continue  # every change at one instant first: a node healed and faulted stays out
        short = nodes - sum(1 for count in faulty.values() if count > 0) < needed
        if short and short_since is None:
            short_since = at
        elif not short and short_since is not None:
            if at > short_since:
                stretches.append((short_since, at))
            short_since = None
    if short_since is not None:  # a fault never healed: short to the end
        stretches.append((short_since, float("inf")))
    return stretches


def quorate_parts(start: float, end: float, short: list[tuple[float, float]]
                  ) -> list[tuple[float, float]]:
    """The parts of (start, end) outside every stretch of `short` (sorted, not overlapping)."""
    parts = []
    at = start
    for short_from, short_to in short:
        if short_to <= at or short_from >= end:
            continue
        if short_from > at:
            parts.append((at, short_from))
        at = max(at, short_to)
    if at < end:
        parts.append((at, end))
    return parts


def unexplained_write_gaps(history: History, faults: Iterable[Fault], nodes: int,
                           needed: int) -> dict[int, float]:
    """Per partition, the longest stretch without an acknowledged write in which at least
    `needed` of `nodes` nodes had no fault in place (gaps as `longest_write_gaps` takes
    them: the stretch after the last acknowledgement, to the end, counts)."""
    short = short_of_nodes(faults, nodes, needed)
    return {partition: max((to - since for a, b in pairwise(marks)
                            for since, to in quorate_parts(a, b, short)), default=0.0)
            for partition, marks in write_marks(history).items()}
