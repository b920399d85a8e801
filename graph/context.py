"""The running node's context: which prompt and node, progress reporting, interrupts.

The executor sets a `NodeContext` in a `ContextVar` around every node call (and around each
list-mapped call). Node code reaches it with `current()`; there is no process-wide state, so
concurrent prompts never see each other's context.

`env` is whatever the host (server, command line, test) passed to the executor: the engine never
looks inside it. The built-in nodes use it for model folders, the output folder and so on.
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
