"""Fixtures of the node tests."""
from __future__ import annotations

import pytest


@pytest.fixture
def comfy_nodes(tmp_path):
    """ComfyUI's `nodes` module as packs see it: a compat session over the built-in nodes, as
    every host installs one (the names come from compat/node_facades.py), active for the test."""
    import compat
    import nodes
    from graph.registry import Registry
    from nodes.environment import Environment

    registry = Registry()
    nodes.register_builtin_nodes(registry)
    session = compat.install(Environment.rooted_at(tmp_path), registry)
    with session.activate():
        yield nodes
