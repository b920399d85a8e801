"""The official Ming-Image templates (image_ming_image_01_design_t2i, image_ming_image_01_design_image_edit,
in the installed comfyui-workflow-templates-json package) run headless on the tiny files of
tests/fixtures/template_models_ming.py, made small as tests/web/test_template_workflows_2026.py makes
text-generation templates small (`shrink_2026`: TextGenerate's 4096 tokens cut to 24 on the tiny
random prompt expander, the edit's 1024 px canvas to 64 px). Like that module's RUNNING list they run
with `--all-templates` (each ~20 s on the shared 2-core machine); the file kinds are checked always."""
from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from tests.fixtures.template_models_ming import WRITERS_MING, file_kind_ming

TEMPLATES = ("image_ming_image_01_design_t2i", "image_ming_image_01_design_image_edit")


@pytest.mark.parametrize(("folder", "name", "kind"), [
    ("diffusion_models", "ming_image_0.1_design_int8_convrot.safetensors", "unet_ming_image"),
    ("text_encoders", "ming_image_0.1_ling_mini_2.0_int8_convrot.safetensors", "ming_image_text_encoder"),
    ("vae", "ming_image_vae_bf16.safetensors", "vae_ming_image"),
    ("text_encoders", "qwen3.8_27b_w4a8.safetensors", "qwen38_27b_prompt_expander"),
    ("text_encoders", "qwen_3_4b.safetensors", None),
])
def test_ming_file_kinds(folder: str, name: str, kind: str | None) -> None:
    assert file_kind_ming(folder, name) == kind
    assert kind is None or kind in WRITERS_MING


@pytest.mark.parametrize("name", TEMPLATES)
async def test_the_ming_template_runs_on_tiny_files(name: str, tmp_path: Path, request) -> None:
    if not request.config.getoption("--all-templates"):
        pytest.skip("a whole template run (~20 s): pytest --all-templates")
    from graph.editor_workflow import editor_to_prompt
    from tests.fixtures.template_models import LOADER_INPUTS, provide_files
    from tests.web.test_template_workflows_2026 import NEWEST, coverage_tool, shrink_2026
    from web.config import ServerConfig
    from web.headless import run_workflow

    if NEWEST is None or not (NEWEST / f"{name}.json").is_file():
        pytest.skip("the comfyui-workflow-templates-json package with the Ming-Image templates is not installed")
    prompt = shrink_2026(editor_to_prompt(json.loads((NEWEST / f"{name}.json").read_text()),
                                          coverage_tool.builtin_object_info()))
    for node in prompt.values():  # Ming's files first; provide_files writes the rest (input images)
        for input_name, value in node["inputs"].items():
            folder = LOADER_INPUTS.get((node["class_type"], input_name))
            kind = file_kind_ming(folder, value) if folder and isinstance(value, str) else None
            target = tmp_path / "models" / str(folder) / str(value)
            if kind is not None and not target.exists():
                WRITERS_MING[kind](target)
    provide_files(prompt, tmp_path)
    path = tmp_path / f"{name}.api.json"
    path.write_text(json.dumps(prompt))
    out, err = io.StringIO(), io.StringIO()
    code = await run_workflow(ServerConfig(base_dir=tmp_path, output_dir=tmp_path / "output"), path, out=out, err=err)
    assert code == 0, err.getvalue()[-3000:]
    written = [line.split(" ", 1)[1] for line in out.getvalue().splitlines() if line.startswith("wrote ")]
    assert written and all(Path(p).is_file() for p in written)
    log = out.getvalue() + err.getvalue()  # the nodes run, listed as they start
    assert "CLIPLoader" in log and ("TextEncodeMingImageEdit" in log) == name.endswith("edit")
