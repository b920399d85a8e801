"""`comfy_execution.graph_utils` for packs: GraphBuilder with ComfyUI's default-prefix protocol.

ComfyUI (comfy_execution/graph_utils.py, reference §4.3): before each node call the executor
calls `GraphBuilder.set_default_prefix(unique_id, call_index, 0)`; a builder made without a
prefix then takes `"{root}.{call_index}.{graph_index}."` from `alloc_prefix()`, which counts
graph_index up, so expanded ids are deterministic per (node, list index) and expansions hit the
cache on the next run. ComfyUI keeps that state on the class; here it lives in a context
variable, set by the executor's `before_node_call` hook in the task that makes the call, so
overlapping async nodes do not share it. The builder itself is graph.expansion's, extended
with ComfyUI's remaining methods.
"""
from __future__ import annotations

import contextvars
from typing import Any

from graph.context import ExpansionPrefix
from graph.expansion import ExecutionBlocker, NodeRef
from graph.expansion import GraphBuilder as _EngineGraphBuilder
from graph.prompt import is_link as _is_link

Node = NodeRef


def is_link(obj: Any) -> bool:
    """Whether an input value is a link `[node_id, output_index]` (ComfyUI's `is_link(obj)`)."""
    return _is_link(obj)

_prefix: contextvars.ContextVar[ExpansionPrefix | None] = contextvars.ContextVar("comfy_graph_builder_prefix",
                                                                                 default=None)


class GraphBuilder(_EngineGraphBuilder):
    """ComfyUI's `GraphBuilder(prefix=None)`: `node`, `lookup_node`, `remove_node`,
    `replace_node_output`, `finalize`, and the class methods `set_default_prefix`/`alloc_prefix`."""

    def __init__(self, prefix: str | None = None) -> None:
        super().__init__(prefix if prefix is not None else self.alloc_prefix())

    @classmethod
    def set_default_prefix(cls, prefix_root: str, call_index: int, graph_index: int = 0) -> None:
        _prefix.set(ExpansionPrefix(str(prefix_root), int(call_index), int(graph_index)))

    @classmethod
    def alloc_prefix(cls, root: str | None = None, call_index: int | None = None,
                     graph_index: int | None = None) -> str:
        """`"{root}.{call_index}.{graph_index}."`, missing parts from the default (which then
        moves on to the next graph index)."""
        current = _prefix.get()
        if current is None:  # outside a node call: ComfyUI's class defaults
            current = ExpansionPrefix("", 0, 0)
            _prefix.set(current)
        root = current.unique_id if root is None else root
        call_index = current.call_index if call_index is None else call_index
        if graph_index is None:
            graph_index = current.graph_index
        current.graph_index += 1
        return f"{root}.{call_index}.{graph_index}."

    def node(self, class_type: str, id: str | None = None, **kwargs: Any) -> NodeRef:  # noqa: A002
        """A new node (an id already used in this builder returns that node, as ComfyUI does)."""
        if id is not None and self.prefix + id in self.nodes:
            return self.nodes[self.prefix + id]
        return super().node(class_type, id, **kwargs)

    def lookup_node(self, id: str) -> NodeRef | None:  # noqa: A002 - ComfyUI's parameter name
        """The node added with this id (without the prefix), or None."""
        return super().lookup_node(id)

    def remove_node(self, id: str) -> None:  # noqa: A002 - ComfyUI's parameter name
        """Drop the node added with this id (without the prefix); nothing when absent."""
        super().remove_node(id)

    def replace_node_output(self, node_id: str, index: int, new_value: Any) -> None:
        """Point every link to output `index` of `node_id` at `new_value` (None: unlink)."""
        target = self.prefix + node_id
        for ref in self.nodes.values():
            for key, value in list(ref.inputs.items()):
                if is_link(value) and value[0] == target and value[1] == index:
                    ref.set_input(key, new_value)


def add_graph_prefix(graph: dict, outputs: list, prefix: str) -> tuple[dict, list]:
    """ComfyUI's helper: the subgraph and output links with every node id prefixed."""
    new_graph: dict[str, dict] = {}
    for node_id, info in graph.items():
        inputs = {key: [prefix + value[0], value[1]] if is_link(value) else value
                  for key, value in info.get("inputs", {}).items()}
        new_graph[prefix + node_id] = {**info, "inputs": inputs}
    new_outputs = [[prefix + o[0], o[1]] if is_link(o) else o for o in outputs]
    return new_graph, new_outputs


__all__ = ["GraphBuilder", "Node", "ExecutionBlocker", "is_link", "add_graph_prefix"]
