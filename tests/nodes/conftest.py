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


@pytest.fixture
def in_node():
    """`with in_node("KSampler", "3"):` runs its body as the executor runs node 3 of type
    KSampler (the context its input errors take the node's id and type from)."""
    from tests.nodes.node_context import running_node

    return running_node


@pytest.fixture(scope="module")
def sd1_with_prompts(tiny_sd1_ckpt):
    """The tiny SD1 MODEL with a positive ("a red cube") and an empty negative conditioning."""
    from types import SimpleNamespace

    from comfy_core.loading import load_checkpoint
    from nodes.conditioning import clip_text_encode

    model, clip, _ = load_checkpoint(tiny_sd1_ckpt, output_vae=False)
    return SimpleNamespace(model=model, positive=clip_text_encode("a red cube", clip)[0],
                           negative=clip_text_encode("", clip)[0])
