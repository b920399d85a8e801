"""The nodes of ComfyUI's nodes_images, nodes_latent, nodes_rebatch, nodes_string,
nodes_primitive, nodes_preview_any and ConditioningSetAreaPercentageVideo: all present, and
all present (their entries' equality with ComfyUI's is tests/nodes/test_object_info_parity.py's).
"""
from __future__ import annotations

from graph.registry import Registry
from nodes import register_builtin_nodes
from nodes.environment import Environment
from tests.fixtures.object_info_parity import comfyui_object_info, differences

MODULES = {"comfy_extras.nodes_images", "comfy_extras.nodes_latent", "comfy_extras.nodes_rebatch",
           "comfy_extras.nodes_string", "comfy_extras.nodes_primitive", "comfy_extras.nodes_preview_any"}
EXTRA_NODES = {"ConditioningSetAreaPercentageVideo"}


def _theirs() -> dict:
    return {name: entry for name, entry in comfyui_object_info().items()
            if entry.get("python_module") in MODULES or name in EXTRA_NODES}


def test_every_node_of_these_modules_exists(tmp_path):
    registry = Registry()
    register_builtin_nodes(registry)
    theirs = _theirs()
    assert len(theirs) == 45
    assert sorted(set(theirs) - set(registry.object_info(Environment.rooted_at(tmp_path)))) == []
