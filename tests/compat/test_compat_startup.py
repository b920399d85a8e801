"""Loading packs keeps start-up torch-free: the example pack (loaded by default) and the ComfyUI
modules packs import at the top (`comfy.utils`, `comfy.model_management`, `comfy_api.latest`)
import torch only when a node runs, so the server answers /object_info without waiting for it.

This interpreter imported torch long ago, so the check runs in a fresh one."""
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
