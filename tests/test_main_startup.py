"""Start-up: the server registers its nodes and answers /object_info without importing torch;
packs' prestartup scripts run before torch or any node module; `python main.py` loads the
runtime in the background once it listens, and runs prompts after that.

Each check needs a fresh interpreter (this one imported torch long ago), so they run
subprocesses."""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
import textwrap
import time
import urllib.request
from pathlib import Path

from tests.web.web_harness import spawn_server
from tests.web.web_test_pack import srv_prompt

# client-chosen prompt ids are UUIDs (POST /prompt refuses anything else)
FIRST = "0b9e1c3a-5d7f-4e2a-9c1b-00000000f125"

REPO = Path(__file__).resolve().parents[1]
PACK = REPO / "tests" / "web" / "web_test_pack"
NODE_THEME_PREFIX = "nodes."


def _fresh(code: str) -> dict:
    """Run `code` in a new interpreter at the repository root; it prints one JSON object."""
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], cwd=REPO, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_state_registry_and_object_info_import_no_torch(tmp_path):
    shutil.copytree(PACK, tmp_path / "custom_nodes" / "web_test_pack")
    result = _fresh(f"""
        import json, sys
        from main import build_serve_parser, config_from_args
        from web.app import create_app
        from web.bootstrap import build_state

        argv = ["--base-directory", {str(tmp_path)!r}, "--bf16-unet", "--fp32-vae"]
        state = build_state(config_from_args(build_serve_parser().parse_args(argv), argv))
        info = state.registry.object_info(state.env)
        create_app(state)
        print(json.dumps({{"torch": "torch" in sys.modules, "memory": "comfy_core.memory" in sys.modules,
                          "samplers": info["KSampler"]["input"]["required"]["sampler_name"][0][:2],
                          "pack": "SrvConst" in info, "types": len(info)}}))
    """)
    assert result["torch"] is False and result["memory"] is False
    assert result["samplers"] == ["euler", "euler_cfg_pp"] and result["pack"] and result["types"] > 20


def test_prestartup_scripts_run_before_torch_and_the_node_modules(tmp_path):
    pack = tmp_path / "custom_nodes" / "early_pack"
    pack.mkdir(parents=True)
    (pack / "__init__.py").write_text("NODE_CLASS_MAPPINGS = {}\n")
    record = tmp_path / "prestartup.json"
    (pack / "prestartup_script.py").write_text(textwrap.dedent(f"""
        import json, sys
        themes = sorted(m for m in sys.modules if m.startswith({NODE_THEME_PREFIX!r})
                        and not m.startswith(("nodes._", "nodes.environment")))
        with open({str(record)!r}, "w") as f:
            json.dump({{"torch": "torch" in sys.modules, "node_modules": themes}}, f)
    """))
    result = _fresh(f"""
        import json
        from pathlib import Path
        from compat.session import active
        from web.bootstrap import build_state
        from web.config import ServerConfig

        state = build_state(ServerConfig(base_dir=Path({str(tmp_path)!r})))
        print(json.dumps({{"prestartup": [r.name for r in active().prestartup],
                          "registered": "KSampler" in state.registry}}))
    """)
    assert result == {"prestartup": ["early_pack"], "registered": True}  # ran once, nodes registered after
    assert json.loads(record.read_text()) == {"torch": False, "node_modules": []}


def _get(url: str) -> dict:
    with urllib.request.urlopen(url, timeout=30) as resp:
        return json.loads(resp.read())


def test_main_serves_first_then_loads_torch_before_running_prompts(tmp_path):
    shutil.copytree(PACK, tmp_path / "custom_nodes" / "web_test_pack")
    server = spawn_server(tmp_path)
    try:
        assert "KSampler" in _get(f"{server.url}/object_info")
        body = json.dumps({"prompt": srv_prompt(7, prefix="first"), "prompt_id": FIRST}).encode()
        request = urllib.request.Request(f"{server.url}/prompt", data=body,
                                         headers={"Content-Type": "application/json"})
        urllib.request.urlopen(request, timeout=30).close()
        while not _get(f"{server.url}/history/{FIRST}"):  # bounded by the test timeout
            time.sleep(0.05)
        # The test pack's nodes never import torch: the background warm-up did, before the
        # queue worker took the prompt (the rest of the runtime loads while the queue is idle).
        assert _get(f"{server.url}/system_stats")["system"]["pytorch_version"] != ""
        log = server.log_path.read_text()
        assert "torch loaded in the background" in log
        assert log.index("torch loaded in the background") < log.index("Prompt executed")
    finally:
        server.stop()
    assert server.proc.returncode == 0
