"""ComfyUI's official Flux.1 and SD3.5 workflow templates (ComfyUI 0.3.64's `comfyui-workflow-templates`
package) run unchanged through `main.py run`, on tiny random files with the real key layouts and
dtypes standing in for the checkpoints, split diffusion models, text encoders, VAEs, ControlNets,
style and CLIP vision models they name (tests/fixtures/template_models.py, `DIT_WRITERS`).

The templates sample at 1024x1024 (Kontext at its ~1 megapixel preferred sizes; Canny / Depth /
Fill at the input image's size): on the CPU the tiny VAE at that size and the 4096-token attention
take seconds per template, so the default run takes three that cover the paths: a single-file
fp8 checkpoint (flux_schnell, 4 steps), split files with Kontext's reference latents, a
concatenated-channel model (Fill dev). All of them: `pytest tests/web/test_template_workflows_dit.py
--all-templates`.

`NOT_RUNNING` lists the templates that do not run here yet, with why; each is run and must fail
for that reason (so a fix shows up as a failure, and the entry moves to `DIT_TEMPLATES`).
"""
from __future__ import annotations

import io
import json
import shutil
from pathlib import Path

import pytest

from graph.editor_workflow import EditorWorkflowError, editor_to_prompt
from tests.fixtures.template_models import NO_TEMPLATES, TEMPLATES, provide_files
from web.config import ServerConfig
from web.headless import run_workflow

pytestmark = pytest.mark.skipif(not TEMPLATES.is_dir(), reason=NO_TEMPLATES)

OBJECT_INFO = Path(__file__).resolve().parents[1] / "data" / "comfyui_0.3.64_object_info.json"

# The pinned package's Flux / SD3.5 templates that run (index.json "models": Flux, SD3.5), with
# what each covers and its wall time in a --all-templates run on the 2-core development machine
# (load average ~7: shared; a quiet machine takes about half):
DIT_TEMPLATES = (
    "flux_schnell",                          # 14 s: CheckpointLoaderSimple, fp8 single file, 4 steps
    "flux_dev_checkpoint_example",           # 17 s: fp8 single file, FluxGuidance, 20 steps
    "flux_schnell_full_text_to_image",       # 12 s: UNETLoader / DualCLIPLoader / VAELoader, CLIPTextEncodeFlux
    "flux_dev_full_text_to_image",           # 19 s: bf16 split diffusion model, 20 steps
    "flux1_krea_dev",                        # 18 s: a "_fp8_scaled" diffusion model (scaled fp8, kept at fp8)
    "flux_kontext_dev_basic",                # 35 s: ReferenceLatent, FluxKontextImageScale, LoadImageOutput, fp8 T5
    "flux_canny_model_example",              # 1 s: Canny dev (32 channels in), at the input image's size
    "flux_fill_inpaint_example",             # 0.5 s: Fill dev (96 channels in), DifferentialDiffusion
    "flux_depth_lora_example",               # Flux dev + BFL's depth LoRA (img_in widened to 128 inputs)
    "flux_fill_outpaint_example",            # 8 s: Fill dev, ImagePadForOutpaint
    "flux_redux_model_example",              # 16 s: SigLIP CLIPVisionEncode, Redux StyleModelApply, SamplerCustomAdvanced
    "sd3.5_simple_example",                  # 37 s: SD3.5 large single file, cfg 4, sgm_uniform
    "sd3.5_large_canny_controlnet_example",  # 90 s: SAI SD3.5 ControlNet (canny), ControlNetApplyAdvanced
    "sd3.5_large_blur",                      # 82 s: SAI SD3.5 ControlNet (blur)
    "sd3.5_large_depth",                     # 66 s: SAI SD3.5 ControlNet (depth)
    "image_flux.1_fill_dev_OneReward",       # subgraphs; a LoRA named without its model, written for Flux
    "image_chroma_text_to_image",            # Chroma (split files), SamplerCustomAdvanced, T5TokenizerOptions
    "flux1_dev_uso_reference_image_gen",     # subgraphs: ModelPatchLoader (USO projector), USOStyleReference, EasyCache
)
# Checkpoint, split files with Kontext's reference latents, and a concatenated-channel model.
DEFAULT_TEMPLATES = ("flux_schnell", "flux_kontext_dev_basic", "flux_fill_inpaint_example")

# Template -> (why it does not run, a fragment of the error it fails with).
NOT_RUNNING: dict[str, tuple[str, str]] = {}
# Templates the index tags Flux that are not Flux.1 / SD3.5 models this engine runs (not run here).
OUT_OF_SCOPE = {
    "api_bfl_flux_pro_t2i": "an API node (BFL's hosted Flux Pro)",
    "api_bfl_flux_1_kontext_pro_image": "an API node (BFL's hosted Kontext Pro)",
    "api_bfl_flux_1_kontext_max_image": "an API node (BFL's hosted Kontext Max)",
    "api_bfl_flux_1_kontext_multiple_images_input": "an API node (BFL's hosted Kontext)",
}


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    all_templates = metafunc.config.getoption("--all-templates")
    if "name" in metafunc.fixturenames:
        metafunc.parametrize("name", DIT_TEMPLATES if all_templates else DEFAULT_TEMPLATES)
    if "failing" in metafunc.fixturenames:
        metafunc.parametrize("failing", sorted(NOT_RUNNING))  # each fails within a second


@pytest.fixture(scope="module")
def comfy_object_info() -> dict:
    return json.loads(OBJECT_INFO.read_text())


async def _run(name: str, base_dir: Path, object_info: dict) -> tuple[int, str, str]:
    workflow = json.loads((TEMPLATES / f"{name}.json").read_text())
    try:
        provide_files(editor_to_prompt(workflow, object_info), base_dir)
    except EditorWorkflowError:
        pass  # run_workflow reports it the same way
    path = base_dir / f"{name}.json"
    shutil.copyfile(TEMPLATES / f"{name}.json", path)
    out, err = io.StringIO(), io.StringIO()
    code = await run_workflow(ServerConfig(base_dir=base_dir, output_dir=base_dir / "output"), path, out=out, err=err)
    return code, out.getvalue(), err.getvalue()


async def test_template_runs_unchanged(name: str, tmp_path: Path, comfy_object_info: dict) -> None:
    code, out, err = await _run(name, tmp_path, comfy_object_info)
    assert code == 0, err[-3000:]
    written = [line.split(" ", 1)[1] for line in out.splitlines() if line.startswith("wrote ")]
    assert written and all(Path(p).is_file() for p in written)


async def test_template_fails_for_the_listed_reason(failing: str, tmp_path: Path, comfy_object_info: dict) -> None:
    code, _out, err = await _run(failing, tmp_path, comfy_object_info)
    reason, fragment = NOT_RUNNING[failing]
    assert code != 0, f"{failing} runs now: move it from NOT_RUNNING to DIT_TEMPLATES ({reason})"
    assert fragment in err, err[-3000:]


def test_every_flux_and_sd35_template_is_listed() -> None:
    index = json.loads((TEMPLATES / "index.json").read_text())
    names = {t["name"] for category in index for t in category.get("templates", [])
             if set(t.get("models") or ()) & {"Flux", "SD3.5"}}
    assert names == set(DIT_TEMPLATES) | set(NOT_RUNNING) | set(OUT_OF_SCOPE)


@pytest.mark.parametrize("folder, file_name, kind", [
    ("checkpoints", "flux1-dev-fp8.safetensors", "flux_dev_fp8"),
    ("checkpoints", "flux1-schnell-fp8.safetensors", "flux_schnell_fp8"),
    ("checkpoints", "sd3.5_large_fp8_scaled.safetensors", "sd35_fp8"),
    ("checkpoints", "sd3.5_medium.safetensors", "sd35_medium"),
    ("checkpoints", "sd3_medium_incl_clips.safetensors", "sd3"),
    ("diffusion_models", "flux1-dev-kontext_fp8_scaled.safetensors", "unet_flux_dev_fp8"),
    ("diffusion_models", "flux1-krea-dev_fp8_scaled.safetensors", "unet_flux_dev_fp8"),
    ("diffusion_models", "flux1-schnell.safetensors", "unet_flux_schnell"),
    ("diffusion_models", "flux1-fill-dev.safetensors", "unet_flux_fill"),
    ("diffusion_models", "flux1-canny-dev.safetensors", "unet_flux_control"),
    ("text_encoders", "t5xxl_fp8_e4m3fn_scaled.safetensors", "t5xxl_fp8"),
    ("text_encoders", "t5xxl_fp16.safetensors", "t5xxl"),
    ("text_encoders", "clip_g.safetensors", "clip_g"),
    ("vae", "ae.safetensors", "vae_flux"),
    ("vae", "vae-ft-mse-840000-ema-pruned.safetensors", "vae_sd1"),
    ("controlnet", "sd3.5_large_controlnet_depth.safetensors", "controlnet_sd35_depth"),
    ("loras", "flux1-depth-dev-lora.safetensors", "lora_flux_control"),
    ("style_models", "flux1-redux-dev.safetensors", "style_redux"),
    ("clip_vision", "sigclip_vision_patch14_384.safetensors", "clip_vision_siglip"),
    ("diffusion_models", "Chroma1-HD-fp8mixed.safetensors", "unet_chroma_fp8"),
    ("diffusion_models", "Chroma1-HD.safetensors", "unet_chroma"),
])
def test_file_kinds(folder: str, file_name: str, kind: str) -> None:
    from tests.fixtures.template_models import file_kind

    assert file_kind(folder, file_name) == kind


def _header_dtypes(path: Path) -> dict[str, str]:
    import struct

    with open(path, "rb") as f:
        header = json.loads(f.read(struct.unpack("<Q", f.read(8))[0]))
    return {k: v["dtype"] for k, v in header.items() if k != "__metadata__"}


def test_release_files_are_stored_in_the_release_dtypes(tmp_path: Path) -> None:
    from tests.fixtures.template_models import WRITERS

    def written(kind: str, name: str) -> dict[str, str]:
        WRITERS[kind](tmp_path / name)
        return _header_dtypes(tmp_path / name)

    fp8 = written("flux_dev_fp8", "flux1-dev-fp8.safetensors")
    parts = {prefix: {d for k, d in fp8.items() if k.startswith(prefix)}
             for prefix in ("model.diffusion_model.", "text_encoders.t5xxl.", "text_encoders.clip_l.", "vae.")}
    assert parts["model.diffusion_model."] == {"F8_E4M3"}  # biases and norm scales too
    assert parts["text_encoders.t5xxl."] == {"F8_E4M3"}
    assert parts["text_encoders.clip_l."] <= {"F16", "I64"}  # position_ids stay integers
    assert parts["vae."] == {"F32"}
    assert "model.diffusion_model.double_blocks.0.img_attn.norm.query_norm.scale" in fp8
    assert set(written("unet_flux_dev", "flux1-dev.safetensors").values()) == {"BF16"}
    assert set(written("t5xxl_fp8", "t5xxl_fp8_e4m3fn.safetensors").values()) == {"F8_E4M3"}
    assert set(written("vae_flux", "ae.safetensors").values()) == {"F32"}
    sd35 = written("sd35_fp8", "sd3.5_large_fp8_scaled.safetensors")
    assert not any(k.endswith(("scale_weight", "scaled_fp8")) for k in sd35)  # a plain fp8 file, see template_models
    assert {d for k, d in sd35.items() if k.startswith("model.diffusion_model.")} == {"F8_E4M3"}


def test_a_lora_named_without_its_model_follows_the_templates_flux_model(tmp_path: Path) -> None:
    prompt = {"1": {"class_type": "UNETLoader", "inputs": {"unet_name": "flux1-fill-dev.safetensors"}},
              "2": {"class_type": "LoraLoaderModelOnly", "inputs": {"lora_name": "removal_timestep_alpha-2-1740.safetensors"}}}
    assert ("loras", "lora_flux") in provide_files(prompt, tmp_path)
    keys = _header_dtypes(tmp_path / "models" / "loras" / "removal_timestep_alpha-2-1740.safetensors")
    assert "diffusion_model.double_blocks.0.img_attn.qkv.lora_up.weight" in keys
    sd1 = {"1": {"class_type": "CheckpointLoaderSimple", "inputs": {"ckpt_name": "v1-5.safetensors"}},
           "2": {"class_type": "LoraLoader", "inputs": {"lora_name": "style.safetensors"}}}
    assert ("loras", "lora_sd1") in provide_files(sd1, tmp_path / "sd1")
