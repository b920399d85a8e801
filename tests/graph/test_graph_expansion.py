"""Expansion details: GraphBuilder prefixes, display ids, unknown classes in a subgraph."""
from __future__ import annotations

import pytest

from graph.context import ExpansionPrefix, reset_expansion_prefix, set_expansion_prefix
from graph.errors import DuplicateNodeError
from graph.executor import Executor
from graph.expansion import GraphBuilder
from graph.native import Input, Output, node as native_node
from tests.graph.helpers import node, run_prompt


def test_graph_builder_prefixes():
    token = set_expansion_prefix(ExpansionPrefix("7", 2))
    try:
        first, second = GraphBuilder(), GraphBuilder()
    finally:
        reset_expansion_prefix(token)
    a = first.node("Add", a=1, b=None)
    assert a.id == "7.2.0.1" and a.inputs == {"a": 1} and a.out(0) == ["7.2.0.1", 0]
    assert second.node("Add").id == "7.2.1.1"
    explicit = GraphBuilder(prefix="p.")
    named = explicit.node("IntConst", id="x", value=3)
    named.set_override_display_id("9")
    named.set_input("value", None)
    assert explicit.finalize() == {"p.x": {"class_type": "IntConst", "inputs": {}, "override_display_id": "9"}}
    assert explicit.lookup_node("x") is named
    with pytest.raises(DuplicateNodeError):
        explicit.node("IntConst", id="x")
    assert GraphBuilder().prefix == ""  # outside a node call


def registry_with(registry, *fns):
    for fn in fns:
        registry.add_native(fn, builtin=False)
    return registry


async def test_override_display_id_and_two_builders_in_one_call(registry, recorder):
    @native_node("TwoGraphs", inputs=[Input("value", "INT")], outputs=[Output("INT")])
    def two_graphs(value):
        one, two = GraphBuilder(), GraphBuilder()
        first = one.node("Add", a=value, b=1)
        first.set_override_display_id("shown")
        second = two.node("Add", a=first.out(0), b=1)
        return {"result": (second.out(0),), "expand": {**one.finalize(), **two.finalize()}}

    registry_with(registry, two_graphs)
    prompt = {"1": node("IntConst", value=1), "t": node("TwoGraphs", value=["1", 0]),
              "o": node("FloatSink", value=["t", 0]), "shown": node("IntConst", value=0)}
    out = await run_prompt(Executor(registry), prompt, sink=recorder)
    assert out.ui_outputs["o"] == {"value": [3]}
    displays = {e["node"]: e["display_node"] for e in recorder.of("executing")}
    assert displays["t.0.0.1"] == "shown" and displays["t.0.1.1"] == "t"


async def test_unknown_class_in_a_subgraph_is_an_execution_error(registry):
    @native_node("BadExpand", inputs=[Input("value", "INT")], outputs=[Output("INT")])
    def bad_expand(value):
        return {"result": (["n", 0],), "expand": {"n": {"class_type": "NoSuchNode", "inputs": {}}}}

    registry_with(registry, bad_expand)
    prompt = {"1": node("IntConst", value=1), "b": node("BadExpand", value=["1", 0]), "o": node("FloatSink", value=["b", 0])}
    out = await run_prompt(Executor(registry), prompt)
    assert out.status == "error" and out.error["node_id"] == "b"
    assert out.error["exception_type"] == "graph.errors.UnknownNodeTypeError"
