"""The one error type of the built-in nodes' input checks.

A node that receives an input it cannot use raises `NodeInputError(input_name, expected,
received)`. Which node it is comes from the running context (`graph.context.current()`: the node
id, and the node's class where the executor records it), so node functions never pass their own
names as string literals, and the message names the node the user sees in the editor:

    KSampler (node 3): input 'latent_image' expected a LATENT ({'samples': tensor}), received str

Outside the executor (a notebook calling a node function) the message starts at "input".
The executor reports it as ComfyUI's `execution_error` with the node id and type; a
`NodeInputError` is a `ValueError`, so callers catching that keep working.

comfy_core's image helpers (file naming, PNG writing) cannot know the node: they raise
`comfy_core.image.errors.ImageInputError` with the same three parts, and a node calls them inside
`image_input_errors()`, which re-raises it as a `NodeInputError`.
"""
from __future__ import annotations

from contextlib import contextmanager
from typing import Any, Iterator

from comfy_core.image.errors import ImageInputError
from graph.context import current


def describe(value: Any) -> str:
    """A short description of a received value: its type, and its shape when it has one."""
    shape = getattr(value, "shape", None)
    if shape is not None:
        return f"{type(value).__name__} of shape {list(shape)}"
    return type(value).__name__


class NodeInputError(ValueError):
    """Bad input to a built-in node: names the node (from the running context), the input, what
    was expected and what was received. `node_type` is for callers outside a node context."""

    def __init__(self, input_name: str, expected: str, received: str, *, node_type: str | None = None) -> None:
        ctx = current()
        self.node_id: str | None = ctx.node_id if ctx is not None else None
        self.node_type: str | None = node_type or (ctx.class_type if ctx is not None else None)
        self.input_name = input_name
        self.expected = expected
        self.received = received
        super().__init__(f"{self._where()}input {input_name!r} expected {expected}, received {received}")

    def _where(self) -> str:
        if self.node_type and self.node_id:
            return f"{self.node_type} (node {self.node_id}): "
        if self.node_type or self.node_id:
            return f"{self.node_type or 'node ' + str(self.node_id)}: "
        return ""


@contextmanager
def image_input_errors() -> Iterator[None]:
    """Re-raise comfy_core's `ImageInputError` (raised by the image helpers called inside) as a
    `NodeInputError` naming the running node, the input, what was expected and received."""
    try:
        yield
    except ImageInputError as exc:
        raise NodeInputError(exc.input_name, exc.expected, exc.received) from exc
