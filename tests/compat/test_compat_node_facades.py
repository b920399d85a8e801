"""ComfyUI's names on `nodes` (compat/node_facades.py): built from the nodes' public specs, present
once a host installed the compat layer, and reached without `nodes` importing compat."""
from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

# Ours, with no ComfyUI counterpart: their facades use the default method name.
OUR_OWN_NODES = {"CLIPTextEncodeWeighted", "CLIPTextEncodeWeightedSDXL", "ApplyEmbedding",
                 "SetAttentionBackend", "SetVAEAttentionBackend"}


def test_every_comfyui_node_has_comfyuis_method_name_for_packs():
    # Packs call built-ins as `nodes.X().<FUNCTION>(...)`: each ComfyUI node needs ComfyUI's name.
    from compat.node_facades import COMFY_FUNCTION_NAMES
    from nodes import builtin_node_functions

    builtins = {fn.__node_spec__.node_id for fn in builtin_node_functions()}
    assert set(COMFY_FUNCTION_NAMES) <= builtins
    assert builtins - OUR_OWN_NODES == set(COMFY_FUNCTION_NAMES)


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
