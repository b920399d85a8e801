"""ComfyUI's `comfy_execution.utils`: which node is running, as packs ask it
(`get_executing_context()`, which `comfy_api.latest` also uses for progress).

The answer is the running node's context of the executor (graph/context.py): its prompt id, node
id and list index. `CurrentNodeContext(prompt_id, node_id, list_index)` sets an answer for a
block of code (ComfyUI's executor sets it around each node call; a pack running work for a node
on another thread sets it so), which wins over the executor's while it is in force.
"""
from __future__ import annotations

import contextvars
from typing import Any, NamedTuple, Optional

from graph.context import current


class ExecutionContext(NamedTuple):
    """The running node: its prompt, its node id, its index in a list being mapped (or None)."""

    prompt_id: str
    node_id: str
    list_index: Optional[int]


# Set by CurrentNodeContext; empty while the executor's own context answers.
current_executing_context: contextvars.ContextVar[Optional[ExecutionContext]] = contextvars.ContextVar(
    "current_executing_context", default=None)


def get_executing_context() -> Optional[ExecutionContext]:
    """The running node's context, or None outside a node call."""
    set_here = current_executing_context.get(None)
    if set_here is not None:
        return set_here
    ctx = current()
    if ctx is None:
        return None
    return ExecutionContext(ctx.prompt_id, ctx.node_id, ctx.list_index)


class CurrentNodeContext:
    """`with CurrentNodeContext(prompt_id, node_id, list_index):` the executing context inside."""

    def __init__(self, prompt_id: str, node_id: str, list_index: Optional[int] = None) -> None:
        self.context = ExecutionContext(prompt_id, node_id, list_index)
        self.token: Any = None

    def __enter__(self) -> "CurrentNodeContext":
        self.token = current_executing_context.set(self.context)
        return self

    def __exit__(self, *exc: Any) -> None:
        if self.token is not None:
            current_executing_context.reset(self.token)
            self.token = None
