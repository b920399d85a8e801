"""The running node's context: which prompt and node, progress reporting, interrupts.

The executor sets a `NodeContext` in a `ContextVar` around every node call (and around each
list-mapped call). Node code reaches it with `current()`; there is no process-wide state, so
concurrent prompts never see each other's context.

`env` is whatever the host (server, command line, test) passed to the executor: the engine never
looks inside it. The built-in nodes use it for model folders, the output folder and so on.

Expansion ids (ComfyUI's `GraphBuilder.set_default_prefix` protocol): right before each call of
a node's function (once per list element), in the task that makes the call (the prompt's own
thread and event loop, see graph/executor.py), the executor

1. sets `ExpansionPrefix(unique_id, call_index, graph_index=0)` in a context variable, read with
   `expansion_prefix()`; `graph.expansion.GraphBuilder` allocates its default id prefix
   `"{unique_id}.{call_index}.{graph_index}."` from it, so expanded ids are deterministic per
   (parent node, list index) and expanded subgraphs hit the cache on the next run;
2. calls every hook given as `Executor(..., before_node_call=[hook])` with
   `hook(unique_id, call_index, graph_index)`; the compat layer registers ComfyUI's
   `GraphBuilder.set_default_prefix` there. Each async call runs in its own task with its own
   copy of the context, so a hook that stores the prefix in a context variable is safe when
   async nodes overlap; a class-level attribute (ComfyUI's way) is only safe for sync calls.
"""
from __future__ import annotations

import contextvars
from dataclasses import dataclass, field
from typing import Any, Callable


class InterruptedError_(Exception):
    """Raised inside a node when its prompt was interrupted (ComfyUI's InterruptProcessingException)."""


# The public name; the trailing underscore above only avoids shadowing the builtin in this module.
Interrupted = InterruptedError_


@dataclass
class NodeContext:
    prompt_id: str
    node_id: str  # the real (possibly expanded) node id being executed
    display_node_id: str
    list_index: int | None
    env: Any
    # report(value, max, preview) -> None; preview is ("JPEG"|"PNG", PIL.Image, max_size) or None
    report: Callable[[float, float, Any], None] = field(repr=False, default=lambda v, m, p: None)
    is_interrupted: Callable[[], bool] = field(repr=False, default=lambda: False)
    # send(event_type, data): a custom event to the prompt's client (packs' send_sync)
    send: Callable[[str, Any], None] = field(repr=False, default=lambda t, d: None)
    class_type: str | None = None  # the running node's type, for errors that name it

    def check_interrupt(self) -> None:
        if self.is_interrupted():
            raise Interrupted(f"prompt {self.prompt_id} interrupted")

    def progress(self, value: float, total: float, preview: Any = None) -> None:
        """Report progress (and optionally a preview image); raises `Interrupted` if asked to stop."""
        self.check_interrupt()
        self.report(value, total, preview)


_current: contextvars.ContextVar[NodeContext | None] = contextvars.ContextVar("graph_node_context", default=None)


def current() -> NodeContext | None:
    """The context of the node running in this task/thread, or None outside the executor."""
    return _current.get()


def set_current(ctx: NodeContext | None) -> contextvars.Token:
    return _current.set(ctx)


def reset_current(token: contextvars.Token) -> None:
    _current.reset(token)


@dataclass
class ExpansionPrefix:
    """Where default expansion ids come from for the node call running in this context."""

    unique_id: str
    call_index: int
    graph_index: int = 0

    def allocate(self) -> str:
        """The next default prefix, `"{unique_id}.{call_index}.{graph_index}."`."""
        prefix = f"{self.unique_id}.{self.call_index}.{self.graph_index}."
        self.graph_index += 1
        return prefix


_prefix: contextvars.ContextVar[ExpansionPrefix | None] = contextvars.ContextVar("graph_expansion_prefix", default=None)


def expansion_prefix() -> ExpansionPrefix | None:
    """The expansion prefix of the node call running in this context, or None."""
    return _prefix.get()


def set_expansion_prefix(prefix: ExpansionPrefix | None) -> contextvars.Token:
    return _prefix.set(prefix)


def reset_expansion_prefix(token: contextvars.Token) -> None:
    _prefix.reset(token)
