"""What packs find when they import (compat/startup.py): the modules ComfyUI has imported by then
(ComfyUI-nunchaku reads `sys.modules["folder_paths"]`; Long-CLIP uses `packaging.version` after
`import packaging`), and every custom-node folder as a place of the `custom_nodes` package
(packs import themselves as `custom_nodes.<pack>`), also from a `--base-directory` folder. Run as
`main.py --quick-test-for-ci` in a fresh process, as a user starts it."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

PROBE = '''
import sys

folder_paths = sys.modules["folder_paths"]  # ComfyUI-nunchaku's way
import packaging

PACKAGING = str(packaging.version.parse("1.2.3"))  # Long-CLIP's way
from custom_nodes.startup_probe.helper import ANSWER  # SaveImageWithMetaData's way


class StartupProbe:
    CATEGORY = "probe"
    RETURN_TYPES = ("INT",)
    FUNCTION = "run"

    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {}}

    def run(self):
        return (ANSWER,)


print("STARTUP-PROBE", folder_paths.get_folder_paths("checkpoints") != [], PACKAGING, ANSWER, flush=True)
NODE_CLASS_MAPPINGS = {"StartupProbe": StartupProbe}
'''


def test_packs_find_comfyuis_startup_modules_and_the_custom_nodes_package(tmp_path):
    pack = tmp_path / "custom_nodes" / "startup_probe"
    pack.mkdir(parents=True)
    (pack / "__init__.py").write_text(PROBE)
    (pack / "helper.py").write_text("ANSWER = 42\n")
    done = subprocess.run([sys.executable, "main.py", "--cpu", "--quick-test-for-ci", "--base-directory", str(tmp_path)],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    out = done.stdout + done.stderr
    assert done.returncode == 0, out[-3000:]
    assert "STARTUP-PROBE True 1.2.3 42" in out, out[-3000:]
    assert "IMPORT FAILED" not in out, out[-3000:]
