"""Node expansion helpers: `ExecutionBlocker` and a small graph builder.

A node may return `{"result": (...), "expand": subgraph}`; `subgraph` is API-format
(`{new_id: {"class_type", "inputs", "override_display_id"?}}`) and `result` entries may be links
into it. This follows ComfyUI's `comfy_execution/graph_utils.py` behaviour (described in
reference/comfyui-contract.md §4.3); the compat layer aliases ComfyUI's names onto these.
"""
from __future__ import annotations

from typing import Any

from graph.context import expansion_prefix
from graph.errors import DuplicateNodeError


class ExecutionBlocker:
    """An output value that blocks every consumer (per list element).

    With a message, each blocked consumer reports an `execution_error` of type
    `ExecutionBlocked` (the prompt continues); with `None` it blocks silently. Output nodes
    that receive a blocker do nothing.
    """

    __slots__ = ("message",)

    def __init__(self, message: str | None) -> None:
        self.message = message

    def __repr__(self) -> str:
        return f"ExecutionBlocker({self.message!r})"


class NodeRef:
    """One node inside a `GraphBuilder`."""

    def __init__(self, node_id: str, class_type: str, inputs: dict) -> None:
        self.id = node_id
        self.class_type = class_type
        self.inputs = inputs
        self.override_display_id: str | None = None

    def out(self, index: int) -> list:
        """A link to output `index` of this node."""
        return [self.id, index]

    def set_input(self, name: str, value: Any) -> None:
        if value is None:
            self.inputs.pop(name, None)
        else:
            self.inputs[name] = value

    def get_input(self, name: str) -> Any:
        return self.inputs.get(name)

    def set_override_display_id(self, display_id: str) -> None:
        self.override_display_id = display_id

    def serialize(self) -> dict:
        node = {"class_type": self.class_type, "inputs": dict(self.inputs)}
        if self.override_display_id is not None:
            node["override_display_id"] = self.override_display_id
        return node


class GraphBuilder:
    """Builds an expansion subgraph with deterministic ids.

    Without an explicit `prefix`, ids are `"{parent}.{call_index}.{graph_index}.{n}"` (n from 1),
    the prefix coming from `graph.context.expansion_prefix()` that the executor sets around each
    node call; outside a node call the prefix is empty.
    """

    def __init__(self, prefix: str | None = None) -> None:
        if prefix is None:
            current = expansion_prefix()
            prefix = current.allocate() if current is not None else ""
        self.prefix = prefix
        self.nodes: dict[str, NodeRef] = {}
        self._next = 1

    def node(self, class_type: str, id: str | None = None, **inputs: Any) -> NodeRef:  # noqa: A002
        if id is None:
            id = str(self._next)
            self._next += 1
        node_id = self.prefix + id
        if node_id in self.nodes:
            raise DuplicateNodeError(f"GraphBuilder: node id {node_id!r} is already used in this subgraph")
        ref = NodeRef(node_id, class_type, {k: v for k, v in inputs.items() if v is not None})
        self.nodes[node_id] = ref
        return ref

    def lookup_node(self, node_id: str) -> NodeRef | None:
        return self.nodes.get(self.prefix + node_id)

    def remove_node(self, node_id: str) -> None:
        self.nodes.pop(self.prefix + node_id, None)

    def finalize(self) -> dict:
        return {node_id: ref.serialize() for node_id, ref in self.nodes.items()}
