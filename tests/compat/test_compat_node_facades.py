"""ComfyUI's names on `nodes` (compat/node_facades.py): built from the nodes' public specs, present
once a host installed the compat layer, and reached without `nodes` importing compat."""
from __future__ import annotations

import subprocess

import pytest
import sys
import textwrap
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

# Ours, with no ComfyUI counterpart: their facades use the default method name.
OUR_OWN_NODES = {"CLIPTextEncodeWeighted", "CLIPTextEncodeWeightedSDXL", "ApplyEmbedding", "CheckpointLoaderTyped",
                 "SetAttentionBackend", "SetVAEAttentionBackend"}


def test_every_comfyui_node_has_comfyuis_method_name_for_packs(session):
    # Packs call built-ins as `nodes.X().<FUNCTION>(...)` (V1) or `X.execute(...)` (V3): each of
    # ComfyUI's nodes needs ComfyUI's FUNCTION, recorded from ComfyUI 0.3.64's classes (today's
    # where it declares the node V3 now: compat/comfy_node_functions_2026.json).
    from compat.node_facades import V3_FUNCTION, class_for, comfy_function_name, comfy_function_names
    from nodes import builtin_node_functions

    names = comfy_function_names()
    specs = {fn.__node_spec__.node_id: fn.__node_spec__ for fn in builtin_node_functions()}
    assert set(specs) - set(names) == OUR_OWN_NODES  # every other built-in is one of ComfyUI's nodes
    for node_id, spec in specs.items():
        cls = class_for(spec)
        assert cls.FUNCTION == comfy_function_name(node_id), node_id
        assert callable(getattr(cls, cls.FUNCTION)), node_id
        if cls.FUNCTION == V3_FUNCTION:
            assert callable(cls.execute), node_id


def test_comfy_extras_modules_hold_their_nodes_and_v3_nodes_answer_a_node_output(session):
    import importlib

    import torch

    nodes_mask = importlib.import_module("comfy_extras.nodes_mask")
    assert "GrowMask" in nodes_mask.NODE_CLASS_MAPPINGS and nodes_mask.GrowMask.__module__ == "comfy_extras.nodes_mask"
    from comfy_extras.nodes_mask import GrowMask, SolidMask  # noqa: F401 (as packs import them)

    assert GrowMask.FUNCTION == "EXECUTE_NORMALIZED"  # V3 today; expand_mask is its alias
    assert GrowMask().expand_mask(torch.zeros(1, 5, 5), expand=1, tapered_corners=True)[0].shape == (1, 5, 5)
    from comfy_extras.nodes_latent import LatentAdd  # a V3 node there: `execute` answers a NodeOutput

    one = {"samples": torch.ones(1, 4, 2, 2)}
    out = LatentAdd.execute(one, one)
    assert type(out).__name__ == "NodeOutput" and torch.equal(out.result[0]["samples"], torch.full((1, 4, 2, 2), 2.0))
    assert torch.equal(LatentAdd.EXECUTE_NORMALIZED(one, one)[0]["samples"], out.result[0]["samples"])
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module("comfy_extras.nodes_not_a_module")


def test_the_names_come_with_the_import_hook_and_nodes_never_imports_compat(tmp_path):
    code = textwrap.dedent(f"""
        import sys
        import nodes
        from graph.registry import Registry
        from nodes.environment import Environment

        try:
            nodes.KSampler
        except AttributeError as exc:
            print("before:", "compat.install" in str(exc))
        nodes.register_builtin_nodes(Registry())
        print("compat imported by nodes:", any(m == "compat" or m.startswith("compat.") for m in sys.modules))
        import compat
        compat.install(Environment.rooted_at({str(tmp_path)!r}), Registry())
        print("after:", nodes.KSampler.FUNCTION, nodes.KSampler is nodes.KSampler, nodes.MAX_RESOLUTION)
    """)
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True)
    assert out.stdout.splitlines() == ["before: True", "compat imported by nodes: False", "after: sample True 16384"]
