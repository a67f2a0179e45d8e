"""Which node a detached broker is pinned to (`actors/broker_nodes.py`), on node lists made by
hand as `ray.nodes()` gives them."""

from __future__ import annotations

from typing import Any

from rafka.actors.broker_nodes import choose_node, node_resource


def node(address: str, alive: bool = True, **resources: float) -> dict[str, Any]:
    return {"NodeManagerAddress": address, "Alive": alive,
            "Resources": {"CPU": 2.0, f"node:{address}": 1.0, **resources}}


def test_a_broker_goes_to_the_first_node_with_room_for_it() -> None:
    nodes = [node("10.0.0.3", rafka_broker=1), node("10.0.0.1", rafka_broker=1),
             node("10.0.0.2"), node("10.0.0.4", alive=False, rafka_broker=1)]
    wanted = {"rafka_broker": 1}
    assert choose_node(nodes, wanted, taken={}) == "10.0.0.1"
    assert choose_node(nodes, wanted, taken={"10.0.0.1": 1}) == "10.0.0.3"
    # No other node offers the resource (10.0.0.2 does not, 10.0.0.4 is dead): wait for one.
    assert choose_node(nodes, wanted, taken={"10.0.0.1": 1, "10.0.0.3": 1}) is None


def test_a_node_offering_several_units_holds_as_many_brokers() -> None:
    nodes = [node("10.0.0.1", rafka_broker=3)]
    wanted = {"rafka_broker": 1}
    assert choose_node(nodes, wanted, taken={"10.0.0.1": 2}) == "10.0.0.1"
    assert choose_node(nodes, wanted, taken={"10.0.0.1": 3}) is None


def test_without_resources_to_ask_for_any_node_has_room() -> None:
    assert choose_node([node("10.0.0.2"), node("10.0.0.1")], {}, taken={"10.0.0.1": 5}) \
        == "10.0.0.1"


def test_the_pin_is_a_sliver_of_the_nodes_own_resource() -> None:
    (name, amount), = node_resource("10.0.0.7").items()
    assert name == "node:10.0.0.7"
    assert 0 < amount < 1
