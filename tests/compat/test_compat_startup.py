"""Loading packs keeps start-up torch-free: the example pack (loaded by default) and every module
of ComfyUI's import surface (compat/comfy_surface/, which packs import at the top) import torch
only when a node runs, so the server answers /object_info without waiting for it.

This interpreter imported torch long ago, so the checks run in a fresh one."""
from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_the_example_pack_loads_and_lists_its_nodes_without_torch(tmp_path):
    code = textwrap.dedent(f"""
        import json, sys
        from pathlib import Path
        from web.bootstrap import build_state
        from web.config import ServerConfig

        packs = Path({str(REPO / "custom_nodes")!r})
        state = build_state(ServerConfig(base_dir=Path({str(tmp_path)!r}), custom_node_dirs=(packs,)))
        info = state.registry.object_info(state.env)
        import comfy.model_management, comfy.utils, comfy_api.latest  # what packs import at the top
        print(json.dumps({{"packs": [[p.name, p.ok] for p in state.packs],
                          "nodes": sorted(n for n in info if n.startswith("Example")),
                          "torch": "torch" in sys.modules}}))
        state.store.close()
    """)
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["packs"] == [["example_pack", True]]
    assert result["nodes"] == ["ExampleImageStats", "ExampleInvertImage", "ExampleRepeatInvert", "ExampleSolidImage"]
    assert result["torch"] is False


def surface_modules() -> list[str]:
    """Every module the import hook serves: the files under `finder.SURFACE` whose top-level name
    is in `finder.TOP_LEVEL` (so a module added to the surface is checked without editing this)."""
    from compat.finder import SURFACE, TOP_LEVEL

    names = []
    for path in sorted(SURFACE.rglob("*.py")):
        parts = path.relative_to(SURFACE).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        if parts and parts[0] in TOP_LEVEL:
            names.append(".".join(parts))
    return names


def test_the_surface_enumeration_covers_every_top_level_name():
    from compat.finder import TOP_LEVEL

    names = surface_modules()
    assert {name.split(".")[0] for name in names} == set(TOP_LEVEL)
    assert {"comfy.sd", "comfy.samplers", "comfy.sample", "comfy.utils", "comfy_api.latest._io"} <= set(names)


def test_every_surface_module_imports_without_torch(tmp_path):
    modules = surface_modules()
    code = textwrap.dedent(f"""
        import importlib, json, sys
        from pathlib import Path
        import compat
        from graph.registry import Registry
        from nodes.environment import Environment

        env = Environment.rooted_at(Path({str(tmp_path)!r}))
        env.ensure_dirs()
        compat.install(env, Registry())
        pulled_torch = None  # the first module whose import loaded torch, to name it in the failure
        for name in {modules!r}:
            importlib.import_module(name)
            if pulled_torch is None and "torch" in sys.modules:
                pulled_torch = name
        import comfy.samplers
        print(json.dumps({{"pulled_torch": pulled_torch, "SAMPLERS": comfy.samplers.KSampler.SAMPLERS,
                          "SCHEDULERS": comfy.samplers.KSampler.SCHEDULERS,
                          "DISCARD": sorted(comfy.samplers.KSampler.DISCARD_PENULTIMATE_SIGMA_SAMPLERS),
                          "SAMPLER_NAMES": comfy.samplers.SAMPLER_NAMES,
                          "SCHEDULER_NAMES": comfy.samplers.SCHEDULER_NAMES,
                          "KSAMPLER_NAMES": comfy.samplers.KSAMPLER_NAMES}}))
    """)
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["pulled_torch"] is None

    # the name lists packs read at import time are comfy_core's own, even without torch
    from comfy_core.sampling.samplers.registry import SAMPLER_NAMES
    from comfy_core.sampling.schedulers import SCHEDULER_NAMES

    assert result["SAMPLERS"] == result["SAMPLER_NAMES"] == list(SAMPLER_NAMES)
    assert result["SCHEDULERS"] == result["SCHEDULER_NAMES"] == list(SCHEDULER_NAMES)
    assert result["KSAMPLER_NAMES"] == [n for n in SAMPLER_NAMES if n not in ("ddim", "uni_pc", "uni_pc_bh2")]
    assert result["DISCARD"] == ["dpm_2", "dpm_2_ancestral", "uni_pc", "uni_pc_bh2"]
