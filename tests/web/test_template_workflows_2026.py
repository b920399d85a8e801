"""The newest official template package (`comfyui-workflow-templates-json`, 0.1.123 when this was
written): every local-model template whose nodes all exist here (bench/template_coverage.py's
"covered") runs headless through `main.py run` on tiny files (tests/fixtures/template_models.py),
subgraph templates included, or is listed with why it does not.

The package is not a dependency: it is found installed, or as the wheel bench/template_coverage.py
fetches into ~/.cache/comfy-engine/templates/ (run it once), or at
`COMFY_ENGINE_NEWEST_TEMPLATES=<wheel or folder>`; without it these tests are skipped.

Image templates run as saved (the editor workflow itself goes to `main.py run`, which converts
it); video templates (Wan, SVD) and the SDXL ones are converted first and made small as in
test_template_workflows_wan.py (64 px, 9 frames), then run as API prompts. The default run takes a few that cover the paths; all
of them: `pytest tests/web/test_template_workflows_2026.py --all-templates`.
"""
from __future__ import annotations

import importlib.util
import io
import json
import os
import shutil
import sys
from pathlib import Path

import pytest

from graph.editor_workflow import editor_to_prompt
from tests.fixtures.template_models import provide_files
from web.config import ServerConfig
from web.headless import run_workflow

ROOT = Path(__file__).resolve().parents[2]


def _coverage_module():
    spec = importlib.util.spec_from_file_location("template_coverage", ROOT / "bench" / "template_coverage.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("template_coverage", module)  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return sys.modules["template_coverage"]


coverage_tool = _coverage_module()
NEWEST = coverage_tool.newest_templates(os.environ.get("COMFY_ENGINE_NEWEST_TEMPLATES"), download=False)
pytestmark = pytest.mark.skipif(NEWEST is None, reason="the newest comfyui-workflow-templates-json package is not "
                                "here: run bench/template_coverage.py once (it fetches the wheel)")

# The covered templates that run here, with what each adds (wall time of a run on the shared
# 2-core development machine, load ~4).
RUNNING = {
    "basic_datatype_conversion": "1 s: ComfyMathExpression, ComfyNumberConvert, PreviewAny (no model)",
    "basic_mask_operations_and_compositing": "4 s: mask nodes on a loaded image (no model)",
    "utility_image_stitch": "15 s: ImageStitch, ResizeImageMaskNode (no model)",
    "utility_interpolation_image_upscale": "7 s: ResizeImageMaskNode / image scaling (no model)",
    "utility-gan_upscaler": "37 s: UpscaleModelLoader (ESRGAN x4)",
    "flux_dev_checkpoint_example": "40 s: subgraph with legacy proxyWidgets, bf16 split files",
    "flux1_krea_dev": "44 s: subgraph, scaled-fp8 diffusion model",
    "flux_canny_model_example": "20 s: Canny dev (32 channels in)",
    "flux_dev_full_text_to_image": "33 s: subgraph, split files",
    "flux_fill_inpaint_example": "15 s: subgraph, Fill dev (96 channels in)",
    "flux_fill_outpaint_example": "23 s: Fill dev, ImagePadForOutpaint",
    "flux_kontext_dev_basic": "52 s: subgraph, Kontext reference latents",
    "flux_redux_model_example": "34 s: SigLIP, Redux",
    "flux_schnell": "26 s: fp8 single file",
    "flux_schnell_full_text_to_image": "24 s: split files",
    "image_flux.1_fill_dev_OneReward": "subgraphs, a Flux LoRA named without its model",
    "image_chroma_text_to_image": "88 s: Chroma split files, SamplerCustomAdvanced",
    "sd3.5_large_blur": "92 s: SD3.5 ControlNet (blur)",
    "sd3.5_large_canny_controlnet_example": "155 s: SD3.5 ControlNet (canny)",
    "sd3.5_simple_example": "79 s: SD3.5 large single file",
    "image_sdxl_simple": "SDXL base (made small: 250 s at its 1024 px)",
    "sdxl_refiner_prompt_example": "70 s small: SDXL base + refiner",
    "sdxl_revision_text_prompts": "91 s small: SDXL revision (CLIP vision G, unCLIPConditioning)",
    "sdxl_simple_example": "99 s small: SDXL base + refiner, KSamplerAdvanced",
    "sdxlturbo_example": "29 s small: SDXL Turbo, SDTurboScheduler",
    "txt_to_image_to_video": "206 s small: SDXL image, then SVD img2vid",
    "templates-6-key-frames": "129 s small: subgraphs, Wan 2.2 A14B i2v experts with lightx2v LoRAs, key frames",
    "text_to_video_wan": "13 s small: Wan 2.1 t2v",
    "image_to_video_wan": "28 s small: Wan 2.1 i2v, clip_vision_h",
    "video_wan2.1_fun_camera_v1.1_1.3B": "38 s small: camera control (2.1)",
    "video_wan2.1_fun_camera_v1.1_14B": "49 s small: camera control (2.1, 14B)",
    "video_wan2_2_14B_flf2v": "42 s small: A14B first-last-frame",
    "video_wan2_2_14B_fun_camera": "43 s small: WanCameraImageToVideo (2.2)",
    "video_wan2_2_14B_fun_control": "73 s small: Wan22FunControlToVideo",
    "video_wan2_2_14B_fun_inpaint": "36 s small: A14B Fun inpaint",
    "video_wan2_2_14B_i2v": "123 s small: subgraphs, A14B i2v experts",
    "video_wan2_2_14B_t2v": "67 s small: subgraphs, A14B t2v experts, lightx2v LoRAs",
    "video_wan2_2_5B_fun_control": "66 s small: Wan 2.2 Fun 5B control",
    "video_wan2_2_5B_fun_inpaint": "78 s small: Wan 2.2 Fun 5B inpaint",
    "video_wan2_2_5B_ti2v": "57 s small: TI2V-5B, Wan 2.2 VAE",
    "video_wan_ati": "64 s small: WanTrackToVideo",
    "video_wan_vace_14B_ref2v": "20 s small: VACE reference image",
    "video_wan_vace_14B_t2v": "14 s small: VACE t2v",
    "video_wan_vace_14B_v2v": "11-74 s small: VACE control video from LoadVideo",
    "video_wan_vace_outpainting": "28 s small: VACE outpainting",
    "video_wan_vace_flf2v": "56 s small: subgraphs (nested), VACE first-last frame, sizes and frame count "
                            "computed by ComfyMathExpression, ComfySwitchNode, BatchImagesNode",
    "wan2.1_flf2v_720_f16": "32 s small: first-last-frame, two CLIP-vision embeddings",
    "wan2.1_fun_control": "60 s small: Fun control, Canny video",
    "wan2.1_fun_inp": "33 s small: Fun inpaint",
}
# Templates whose outputs are text previews only (PreviewAny): they write no file.
TEXT_ONLY = ("basic_datatype_conversion",)
# The default run: no-model templates, a subgraph one, a split-files Wan one.
DEFAULT_TEMPLATES = ("basic_datatype_conversion", "basic_mask_operations_and_compositing",
                     "flux_fill_inpaint_example", "text_to_video_wan")

# Covered templates (all nodes exist) of model families this engine does not have (other issues):
# their loaders name files no family here reads, so there is nothing to write tiny files for.
_FAMILIES_NOT_HERE = {
    "Z-Image (Lumina 2 architecture, Qwen3-4B text encoder)": (
        "basic_switch_node", "image_z_image", "image_z_image_int8", "image_z_image_turbo",
        "image_z_image_turbo_int8", "utility_z_image_turbo_2k_upscaler.app"),
    "Lumina Image 2.0 (the NetaYume checkpoint, Gemma 2 text encoder; its file is written as an SD1 "
    "checkpoint, so it fails on 16-channel latents)": ("image_netayume_lumina_t2i",),
    "Qwen-Image (Qwen2.5-VL 7B text encoder, its own VAE)": (
        "image_qwen_Image_2512", "image_qwen_Image_2512_controlnet", "image_qwen_image",
        "image_qwen_image_2512_with_2steps_lora", "image_qwen_image_instantx_inpainting_controlnet",
        "image_qwen_image_union_control_lora", "template_qwen_Image_2512_360_lora",
        "template_qwen_image_illustration_lora", "template_sugar_coated_gummy_style_qwen"),
    "HunyuanVideo (LLaVA-Llama-3 text encoder)": ("hunyuan_video_text_to_video",),
    "Anima (Qwen3-0.6B text encoder, Qwen-Image VAE)": ("image_anima_base_v1", "image_anima_preview"),
    "Boogu Image (Qwen3-VL 8B text encoder)": ("image_boogu_image_0_1_turbo_t2i",),
    "Kandinsky 5 (Qwen2.5-VL 7B + CLIP-L)": ("image_kandinsky5_t2i",),
    "Lens (GPT-OSS 20B text encoder, Flux.2 VAE)": ("image_lens_t2i", "image_lens_turbo_t2i"),
    "LongCat-Image (Qwen2.5-VL 7B)": ("image_longcat_text_to_image",),
    "NewBie Image (Gemma 3 4B + Jina CLIP v2)": ("image_newbieimage_exp0_1-t2i",),
    "OmniGen2 (Qwen2.5-VL 3B)": ("image_omnigen2_image_edit", "image_omnigen2_t2i"),
    "Ovis-Image (Ovis 2.5 text encoder)": ("image_ovis_text_to_image",),
}
OUT_OF_SCOPE = {name: f"model family not written here: {family}"
                for family, names in _FAMILIES_NOT_HERE.items() for name in names}

# Covered templates of families that exist here that do not run yet: (why, a fragment of the error).
NOT_RUNNING: dict[str, tuple[str, str]] = {
    "video_wan2.1_alpha_t2v_14B": (
        "Wan-Alpha's RGB / alpha VAE pair is not a VAE written here (its files are written as SD1 VAEs, "
        "which refuse the Wan video latent); the rest of the graph runs", "expected an image latent"),
}


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "name" in metafunc.fixturenames:
        all_templates = metafunc.config.getoption("--all-templates")
        metafunc.parametrize("name", sorted(RUNNING) if all_templates else DEFAULT_TEMPLATES)
    if "failing" in metafunc.fixturenames:
        metafunc.parametrize("failing", sorted(NOT_RUNNING))


@pytest.fixture(scope="module")
def object_info() -> dict:
    return coverage_tool.builtin_object_info()


def _made_small(name: str) -> bool:
    """Video templates, and SDXL ones (minutes each at 1024 px on two cores)."""
    return any(part in name.lower() for part in ("wan", "video", "key-frames", "sdxl"))


def _reached_inputs(prompt: dict, node_id: str) -> set[str]:
    """The input names `node_id` feeds, directly or through ComfyMathExpression nodes (2026
    templates compute sizes and frame counts from a primitive: `(a // 16) * 16`, `a * 16 + 1`)."""
    names, pending, seen = set(), [node_id], set()
    while pending:
        current = pending.pop()
        seen.add(current)
        for other_id, node in prompt.items():
            for name, value in node.get("inputs", {}).items():
                if isinstance(value, list) and len(value) == 2 and str(value[0]) == current:
                    names.add(name)
                    if node["class_type"] == "ComfyMathExpression" and other_id not in seen:
                        pending.append(other_id)
    return names


def shrink_2026(prompt: dict) -> dict:
    """test_template_workflows_wan.py's `shrink`, and primitives that reach a width / height (64)
    or a length through math nodes (a count of seconds becomes 1, a frame count 9)."""
    from tests.web.test_template_workflows_wan import SMALL_LENGTH, SMALL_SIDE, _fed_inputs, shrink

    prompt = shrink(prompt)
    for node_id, node in prompt.items():
        value = node.get("inputs", {}).get("value")
        if node["class_type"] != "PrimitiveInt" or not isinstance(value, int):
            continue
        if _fed_inputs(prompt, node_id) & {"width", "height", "length"}:  # `shrink` did it
            continue
        reached = _reached_inputs(prompt, node_id)
        if reached & {"width", "height"}:
            node["inputs"]["value"] = min(value, SMALL_SIDE)
        elif "length" in reached:
            node["inputs"]["value"] = min(value, 1 if value <= 10 else SMALL_LENGTH)
    return prompt


async def _run(name: str, base_dir: Path, object_info: dict) -> tuple[int, str, str]:
    source = NEWEST / f"{name}.json"
    prompt = editor_to_prompt(json.loads(source.read_text()), object_info)
    if _made_small(name):
        prompt = shrink_2026(prompt)
        path = base_dir / f"{name}.api.json"
        path.write_text(json.dumps(prompt))
    else:
        path = base_dir / f"{name}.json"
        shutil.copyfile(source, path)
    provide_files(prompt, base_dir)
    out, err = io.StringIO(), io.StringIO()
    code = await run_workflow(ServerConfig(base_dir=base_dir, output_dir=base_dir / "output"), path, out=out, err=err)
    return code, out.getvalue(), err.getvalue()


async def test_template_runs(name: str, tmp_path: Path, object_info: dict) -> None:
    code, out, err = await _run(name, tmp_path, object_info)
    assert code == 0, err[-3000:]
    written = [line.split(" ", 1)[1] for line in out.splitlines() if line.startswith("wrote ")]
    assert all(Path(p).is_file() for p in written)
    assert written or name in TEXT_ONLY, out[-2000:]


async def test_template_fails_for_the_listed_reason(failing: str, tmp_path: Path, object_info: dict) -> None:
    try:
        code, _out, err = await _run(failing, tmp_path, object_info)
    except KeyError as exc:  # no tiny writer for one of its files
        code, err = 1, repr(exc)
    reason, fragment = NOT_RUNNING[failing]
    assert code != 0, f"{failing} runs now: move it from NOT_RUNNING to RUNNING ({reason})"
    assert fragment in err, err[-3000:]


def test_every_covered_template_is_listed(object_info: dict) -> None:
    covered = set(coverage_tool.coverage(NEWEST, object_info).covered)
    listed = set(RUNNING) | set(OUT_OF_SCOPE) | set(NOT_RUNNING)
    assert covered == listed, {"unlisted": sorted(covered - listed), "no longer covered": sorted(listed - covered)}
    assert not (set(RUNNING) & set(OUT_OF_SCOPE)) and not (set(RUNNING) & set(NOT_RUNNING))
