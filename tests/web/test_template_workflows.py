"""ComfyUI's official SD1.x / SD2.x / SDXL workflow templates and `OTHER_TEMPLATES` (ComfyUI
0.3.64's `comfyui-workflow-templates` 0.1.95, tests/fixtures/template_models.TEMPLATES) run
unchanged through `main.py run`, on tiny random files standing in for the checkpoints, LoRAs,
ControlNets, upscale models, ... they name."""
from __future__ import annotations

import io
import json
import shutil
from pathlib import Path

import pytest

from graph.editor_workflow import editor_to_prompt
from tests.fixtures.template_models import NO_TEMPLATES, TEMPLATES, provide_files
from web.config import ServerConfig
from web.headless import run_workflow

pytestmark = pytest.mark.skipif(not TEMPLATES.is_dir(), reason=NO_TEMPLATES)

OBJECT_INFO = Path(__file__).resolve().parents[1] / "data" / "comfyui_0.3.64_object_info.json"

# The pinned package's SD1.x / SD2.x / SDXL templates (index.json "models": SD1.5, SDXL, SD2 files).
SD_TEMPLATES = (
    "default", "image2image", "lora", "lora_multiple", "inpaint_example", "inpaint_model_outpainting",
    "embedding_example", "gligen_textbox_example", "area_composition",
    "area_composition_square_area_for_subject", "hiresfix_latent_workflow", "esrgan_example",
    "hiresfix_esrgan_workflow", "latent_upscale_different_prompt_model", "controlnet_example",
    "2_pass_pose_worship", "depth_controlnet", "depth_t2i_adapter", "mixing_controlnets",
    "sdxl_simple_example", "sdxl_refiner_prompt_example", "sdxl_revision_text_prompts",
    "sdxl_revision_zero_positive", "sdxlturbo_example",
)
# The ones the default run covers (each a few seconds to half a minute on 2 cores, one per path:
# LoRA, img2img, outpainting, latent and model upscaling, two models, SDXL Turbo); the others take
# from a minute (lora_multiple, embedding_example, hiresfix_esrgan_workflow: paths these cover) to
# minutes each on the CPU (1-megapixel passes, full-resolution attention in the GLIGEN and
# inpainting fixtures): `pytest tests/web/test_template_workflows.py --all-templates`.
# The pinned package's other local-model templates that run here (with --all-templates only):
# Stable Audio Open (comfy_core/families/stable_audio; 47.6 s of audio, 50 steps: ~50 s on 2 cores).
OTHER_TEMPLATES = ("audio_stable_audio_example",)
DEFAULT_TEMPLATES = (
    "default", "image2image", "lora", "inpaint_model_outpainting", "hiresfix_latent_workflow", "esrgan_example",
    "latent_upscale_different_prompt_model", "sdxlturbo_example",
)


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "name" in metafunc.fixturenames:
        names = SD_TEMPLATES + OTHER_TEMPLATES if metafunc.config.getoption("--all-templates") else DEFAULT_TEMPLATES
        metafunc.parametrize("name", names)


@pytest.fixture(scope="module")
def comfy_object_info() -> dict:
    return json.loads(OBJECT_INFO.read_text())


AUDIO_NODES = ("EmptyLatentAudio", "VAEDecodeAudio", "VAEEncodeAudio", "SaveAudio", "LoadAudio")


def with_audio_nodes(recorded: dict) -> dict:
    """0.3.64's node definitions plus ours of the audio nodes its record lacks (it was made without
    torchaudio), for OTHER_TEMPLATES' conversion."""
    import tempfile

    from graph.registry import Registry
    from nodes import register_builtin_nodes
    from nodes.environment import Environment

    registry = Registry()
    register_builtin_nodes(registry)
    with tempfile.TemporaryDirectory() as base:
        ours = registry.object_info(Environment.rooted_at(base))
    return {**{name: ours[name] for name in AUDIO_NODES if name in ours}, **recorded}


async def test_template_runs_unchanged(name: str, tmp_path: Path, comfy_object_info: dict) -> None:
    workflow = json.loads((TEMPLATES / f"{name}.json").read_text())
    if name in OTHER_TEMPLATES:
        comfy_object_info = with_audio_nodes(comfy_object_info)
    provide_files(editor_to_prompt(workflow, comfy_object_info), tmp_path)
    path = tmp_path / f"{name}.json"
    shutil.copyfile(TEMPLATES / f"{name}.json", path)
    out, err = io.StringIO(), io.StringIO()
    code = await run_workflow(ServerConfig(base_dir=tmp_path, output_dir=tmp_path / "output"), path, out=out, err=err)
    assert code == 0, err.getvalue()[-3000:]
    written = [line.split(" ", 1)[1] for line in out.getvalue().splitlines() if line.startswith("wrote ")]
    assert written and all(Path(p).is_file() for p in written)
