"""wanBlockSwap (today's ComfyUI, comfy_extras/nodes_nop.py): a deprecated no-op kept so old
workflows run; its MODEL goes on unchanged."""
from __future__ import annotations

from graph.registry import Registry
from nodes import register_builtin_nodes
from nodes.nop_nodes import wan_block_swap


def test_passes_the_model_on_unchanged():
    model = object()
    assert wan_block_swap(model)[0] is model


def test_registered_as_a_deprecated_node_without_category():
    registry = Registry()
    register_builtin_nodes(registry)
    spec = registry.get("wanBlockSwap")
    assert spec.deprecated and spec.category == "" and [o.type for o in spec.outputs] == ["MODEL"]
