"""The error of bad image input (a batch of the wrong shape, a file name leading out of its
folder, ...): names the node, the input, what was expected and received."""
from __future__ import annotations


class ImageInputError(ValueError):
    """Bad input to an image operation; `node` is the node (or helper) that was given it."""

    def __init__(self, node: str, input_name: str, expected: str, received: str) -> None:
        super().__init__(f"{node}: input '{input_name}' expected {expected}, received {received}")
        self.node = node
        self.input_name = input_name
