"""The README's demo, run as the README says: write a tiny checkpoint, then `main.py run`."""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from PIL import Image

REPO = Path(__file__).resolve().parent.parent
README = (REPO / "README.md").read_text(encoding="utf-8")


def _run(args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run([sys.executable, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=240)


def test_readme_names_the_demo_commands():
    assert "python -m tests.fixtures.checkpoints" in README
    assert "main.py run examples/text_to_image_api.json" in README


def test_demo_workflow_runs_from_the_command_line_on_a_generated_checkpoint(tmp_path: Path):
    made = _run(["-m", "tests.fixtures.checkpoints", str(tmp_path / "models" / "checkpoints")], cwd=REPO)
    assert made.returncode == 0, made.stderr
    assert (tmp_path / "models" / "checkpoints" / "tiny_sd1.safetensors").is_file()

    # As the README runs it: from the base folder, default output folder.
    ran = _run([str(REPO / "main.py"), "run", str(REPO / "examples" / "text_to_image_api.json")], cwd=tmp_path)
    assert ran.returncode == 0, ran.stdout + ran.stderr
    written = re.findall(r"wrote (\S+\.png)", ran.stdout)
    assert written == ["output/demo_00001_.png"], ran.stdout  # the line the README shows
    assert 'prints "wrote output/demo_00001_.png"' in README
    image = Image.open(tmp_path / written[0])
    assert image.size == (64, 64)
    assert '"KSampler"' in image.info["prompt"]  # the API prompt travels in the PNG
