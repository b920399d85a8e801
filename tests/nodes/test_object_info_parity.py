"""Every node ComfyUI 0.3.64 also has is declared as ComfyUI declares it: display name, category,
python module, outputs and each input's section, order, type, combo, default, range, step and
tooltip, compared with ComfyUI's own /object_info (tests/data, dumped from ComfyUI 0.3.64).
`bench/object_info_parity.py` prints the same comparison, with the nodes still missing."""
from __future__ import annotations

from graph.registry import Registry
from nodes import register_builtin_nodes
from nodes.environment import Environment
from tests.fixtures.object_info_parity import comfyui_object_info, differences


def test_every_node_comfyui_also_has_is_declared_as_comfyui_declares_it(tmp_path):
    registry = Registry()
    register_builtin_nodes(registry)
    ours = registry.object_info(Environment.rooted_at(tmp_path))
    theirs = comfyui_object_info()
    assert len(set(ours) & set(theirs)) >= 117
    assert differences(ours, theirs) == {}


def test_a_null_display_name_is_reported_as_comfyui_reports_it(tmp_path):
    registry = Registry()
    register_builtin_nodes(registry)
    info = registry.object_info(Environment.rooted_at(tmp_path))
    assert info["LatentAdd"]["display_name"] is None and registry.get("LatentAdd").display_name == "LatentAdd"
    assert info["KSampler"]["display_name"] == "KSampler"
