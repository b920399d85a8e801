"""The API-format workflow ("prompt") and its run-time extension by node expansion.

A prompt is `{node_id: {"class_type": str, "inputs": {name: constant | [source_id, slot]},
"_meta": {...}}}`. `DynamicPrompt` wraps it with the *ephemeral* nodes that expansion adds
while it runs, each remembering its parent (the expanding node) and its display id. Method
names follow ComfyUI's `comfy_execution/graph.py: DynamicPrompt`, because packs receive this
object as the hidden `DYNPROMPT` input and call them.
"""
from __future__ import annotations

from typing import Any, Iterator


def is_link(value: Any) -> bool:
    """ComfyUI's link test: a list of length 2, a string first, an int (or float) second."""
    return (isinstance(value, list) and len(value) == 2 and isinstance(value[0], str)
            and isinstance(value[1], (int, float)) and not isinstance(value[1], bool))


class DynamicPrompt:
    """The original prompt plus nodes created by expansion during one execution."""

    def __init__(self, original_prompt: dict) -> None:
        self.original_prompt = original_prompt
        self.ephemeral_prompt: dict[str, dict] = {}
        self.ephemeral_parents: dict[str, str] = {}
        self.ephemeral_display: dict[str, str] = {}
        self._links: dict[str, tuple[tuple[str, str, int], ...]] = {}

    def get_node(self, node_id: str) -> dict:
        node = self.find_node(node_id)
        if node is None:
            raise KeyError(f"node {node_id!r} is not in the prompt")
        return node

    def find_node(self, node_id: str) -> dict | None:
        """The node, or None when there is no such node (ids never repeat between the two maps)."""
        node = self.original_prompt.get(node_id)
        return node if node is not None else self.ephemeral_prompt.get(node_id)

    def links(self, node_id: str) -> tuple[tuple[str, str, int], ...]:
        """`(input name, source id, slot)` of each linked input, in input order (memoised: the
        executor asks for them several times per node, and nodes do not change during a run)."""
        links = self._links.get(node_id)
        if links is None:
            inputs = self.get_node(node_id).get("inputs")
            links = self._links[node_id] = tuple(
                (name, value[0], int(value[1])) for name, value in inputs.items() if is_link(value)
            ) if isinstance(inputs, dict) else ()
        return links

    def has_node(self, node_id: str) -> bool:
        return node_id in self.original_prompt or node_id in self.ephemeral_prompt

    def add_ephemeral_node(self, node_id: str, node_info: dict, parent_id: str, display_id: str) -> None:
        self.ephemeral_prompt[node_id] = node_info
        self.ephemeral_parents[node_id] = parent_id
        self.ephemeral_display[node_id] = display_id

    def is_ephemeral(self, node_id: str) -> bool:
        return node_id in self.ephemeral_parents

    def get_real_node_id(self, node_id: str) -> str:
        """The top-level (non-ephemeral) ancestor of an expanded node, or the node itself."""
        while node_id in self.ephemeral_parents:
            node_id = self.ephemeral_parents[node_id]
        return node_id

    def get_parent_node_id(self, node_id: str) -> str | None:
        return self.ephemeral_parents.get(node_id)

    def get_display_node_id(self, node_id: str) -> str:
        while node_id in self.ephemeral_display:
            display = self.ephemeral_display[node_id]
            if display == node_id:
                break
            node_id = display
        return node_id

    def all_node_ids(self) -> set[str]:
        return set(self.original_prompt) | set(self.ephemeral_prompt)

    def get_original_prompt(self) -> dict:
        return self.original_prompt

    def __iter__(self) -> Iterator[str]:
        yield from self.original_prompt
        yield from self.ephemeral_prompt
