"""The nodes of ComfyUI's nodes_images, nodes_latent, nodes_rebatch, nodes_string,
nodes_primitive, nodes_preview_any and ConditioningSetAreaPercentageVideo: all present, and
their /object_info entries equal ComfyUI 0.3.64's (tests/data) field for field.

The one difference left is not ours to fix here: ComfyUI's V3 nodes without a display name
report `display_name: null`, which a native declaration cannot express (NodeSpec fills in the
node name, which is what ComfyUI's editor shows for null).
"""
from __future__ import annotations

import re

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


def test_object_info_equals_comfyuis_but_for_null_display_names(tmp_path):
    registry = Registry()
    register_builtin_nodes(registry)
    theirs = _theirs()
    ours = {name: entry for name, entry in registry.object_info(Environment.rooted_at(tmp_path)).items()
            if name in theirs}
    found = differences(ours, theirs)
    null_display = re.compile(r"^(\w+)\.display_name: ours '(\w+)', ComfyUI None$")
    for name, lines in found.items():
        for line in lines:
            match = null_display.match(line)
            assert match and match.group(1) == match.group(2) == name, line
    assert sorted(found) == sorted(name for name, entry in theirs.items() if entry["display_name"] is None)
