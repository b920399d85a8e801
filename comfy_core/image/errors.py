"""The error of bad image input (a batch of the wrong shape, a file name leading out of its
folder, ...): names the input, what was expected and what was received.

It names no node: comfy_core knows nothing of the graph. The built-in nodes turn it into their
`nodes.errors.NodeInputError` (which adds the running node's id and type) at the node boundary.
"""
from __future__ import annotations


class ImageInputError(ValueError):
    """Bad input to an image operation: `input_name`, what was `expected`, what was `received`."""

    def __init__(self, input_name: str, expected: str, received: str) -> None:
        super().__init__(f"input {input_name!r} expected {expected}, received {received}")
        self.input_name = input_name
        self.expected = expected
        self.received = received
