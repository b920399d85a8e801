"""Typed exceptions raised by the graph engine.

Each carries the facts a user needs (node id, class, input, expected and received) in its
message; none of them is ever swallowed to "correct" bad input.
"""
from __future__ import annotations


class GraphError(Exception):
    """Base class of every error the engine raises on purpose."""


class DuplicateNodeTypeError(GraphError):
    """A node type id is registered twice (or a pack tried to override a built-in name)."""


class UnknownNodeTypeError(GraphError, KeyError):
    """A class_type that the registry does not know."""

    def __str__(self) -> str:  # KeyError would quote the whole message
        return str(self.args[0]) if self.args else ""


class NodeDefinitionError(GraphError, TypeError):
    """A node declaration (V1 class or spec) is malformed."""


class DuplicateNodeError(GraphError):
    """An expansion tried to add a node id that already exists in the prompt (ComfyUI's name)."""


class DependencyCycleError(GraphError):
    """Nodes depend on each other in a cycle (created at run time by expansion)."""


class NodeInputError(GraphError):
    """A node asked (through check_lazy_status) for an input that is not connected."""


class NodeOutputError(GraphError):
    """A node returned something that does not match its declared outputs."""
