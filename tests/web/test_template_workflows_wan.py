"""ComfyUI's official Wan 2.1 / 2.2 workflow templates (ComfyUI 0.3.64's `comfyui-workflow-templates`
package) run through `main.py run`'s headless path on tiny random files with the real key layouts
and storage (tests/fixtures/wan_template_models.py: scaled-fp8 diffusion models and umT5, the
Wan 2.1 / 2.2 VAEs, `clip_vision_h`, lightx2v-style LoRAs, input videos), and the saved videos are
decoded back with PyAV.

The graphs run as the templates wire them (loaders, samplers, expert switching through
KSamplerAdvanced, LoRAs, VACE trimming, video saving); only the video size is made small: every
`width` / `height` input becomes 64 and every `length` 9 frames (the templates' 480p-720p,
33-121 frames take minutes per template on two CPU cores even with tiny networks, most of it in
attention over 14k-75k tokens). `--full-size` runs them at the templates' own sizes. The default
run takes four that cover the paths (Wan 2.1 t2v, Wan 2.2 A14B i2v with two experts and LoRAs,
Wan 2.2 TI2V-5B with its own VAE, VACE video-to-video from a loaded video); all of them:
`pytest tests/web/test_template_workflows_wan.py --all-templates`.
"""
from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from graph.editor_workflow import editor_to_prompt
from tests.fixtures.template_models import NO_TEMPLATES, TEMPLATES, provide_files
from web.config import ServerConfig
from web.headless import run_workflow

pytestmark = pytest.mark.skipif(not TEMPLATES.is_dir(), reason=NO_TEMPLATES)

OBJECT_INFO = Path(__file__).resolve().parents[1] / "data" / "comfyui_0.3.64_object_info.json"
SMALL_SIDE, SMALL_LENGTH = 64, 9

# The pinned package's Wan templates that run here, and what each covers.
WAN_TEMPLATES = (
    "text_to_video_wan",               # Wan 2.1 t2v 1.3B fp16, umT5 scaled fp8, uni_pc, SaveVideo
    "image_to_video_wan",              # Wan 2.1 i2v 14B, clip_vision_h, WanImageToVideo
    "wan2.1_flf2v_720_f16",            # first-last-frame: two CLIP-vision embeddings, emb_pos
    "wan2.1_fun_control",              # Fun control: Canny video, CFGZeroStar, SkipLayerGuidanceDiT
    "wan2.1_fun_inp",                  # Fun inpaint, UNetTemporalAttentionMultiply
    "video_wan2_2_14B_t2v",            # A14B high/low-noise experts (KSamplerAdvanced), lightx2v LoRAs
    "video_wan2_2_14B_i2v",            # A14B i2v (36 channels, no image embedding)
    "video_wan2_2_14B_flf2v",          # A14B first-last-frame
    "video_wan2_2_14B_fun_inpaint",    # A14B Fun inpaint
    "video_wan2_2_14B_fun_control",    # Wan22FunControlToVideo, LoadVideo + GetVideoComponents
    "video_wan2_2_14B_fun_camera",     # WanCameraEmbedding / WanCameraImageToVideo (2.2)
    "video_wan2.1_fun_camera_v1.1_1.3B",  # camera control (2.1), SaveAnimatedWEBP
    "video_wan2_2_5B_ti2v",            # TI2V-5B: 48-channel latents, Wan 2.2 VAE, noise mask
    "video_wan2_2_5B_fun_control",     # Wan 2.2 Fun 5B control (148 channels in, ref_conv), Canny video
    "video_wan2_2_5B_fun_inpaint",     # Wan 2.2 Fun 5B inpaint (100 channels in)
    "video_wan_vace_14B_t2v",          # VACE t2v, LoraLoader, TrimVideoLatent
    "video_wan_vace_14B_ref2v",        # VACE reference image
    "video_wan_vace_14B_v2v",          # VACE control video from LoadVideo
    "video_wan_vace_flf2v",            # VACE first-last-frame
    "video_wan_vace_inpainting",       # VACE inpainting of a loaded video
    "video_wan_vace_outpainting",      # VACE outpainting, ImagePadForOutpaint
    "video_wan_ati",                   # WanTrackToVideo
    "video_wan2_2_14B_s2v",            # S2V: wav2vec2 AudioEncoderLoader / Encode, WanSoundImageToVideo (+ Extend)
    "video_humo",                      # HuMo 17B fp8: Whisper large-v3 AudioEncoderLoader / Encode, WanHuMoImageToVideo
)
# Wan-family templates without "wan" in their names.
OTHER_WAN_NAMES = ("video_humo",)
DEFAULT_TEMPLATES = ("text_to_video_wan", "video_wan2_2_14B_i2v", "video_wan2_2_5B_ti2v", "video_wan_vace_14B_v2v")

# Template -> why it does not run here (not run).
NOT_RUNNING = {
    "video_wan2_2_14B_animate": "Wan Animate and the pose / SAM2 custom nodes it uses are not here",
    "video_wan2.1_alpha_t2v_14B": "Wan-Alpha's RGB / alpha VAE pair is not written here",
    "video_wan2.1_fun_camera_v1.1_14B": "the same graph as the 1.3B camera template (covered there)",
    "video_wan2_2_14B_t2v (2)": "a duplicate of video_wan2_2_14B_t2v in the package",
}


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "name" in metafunc.fixturenames:
        all_templates = metafunc.config.getoption("--all-templates")
        metafunc.parametrize("name", WAN_TEMPLATES if all_templates else DEFAULT_TEMPLATES)


@pytest.fixture(scope="module")
def comfy_object_info(tmp_path_factory) -> dict:
    """ComfyUI 0.3.64's recorded definitions, which the templates' widgets are read against; the
    nodes that record lacks (the audio encoders and LoadAudio S2V uses) from ours."""
    from graph.registry import Registry
    from nodes import register_builtin_nodes
    from nodes.environment import Environment

    registry = Registry()
    register_builtin_nodes(registry)
    ours = json.loads(json.dumps(registry.object_info(Environment.rooted_at(tmp_path_factory.mktemp("defs")))))
    return {**ours, **json.loads(OBJECT_INFO.read_text())}


def _fed_inputs(prompt: dict, node_id: str) -> set[str]:
    """The input names that `node_id`'s outputs feed."""
    return {name for node in prompt.values() for name, value in node.get("inputs", {}).items()
            if isinstance(value, list) and len(value) == 2 and str(value[0]) == node_id}


def shrink(prompt: dict) -> dict:
    """Every width / height input (or primitive feeding one) at `SMALL_SIDE`, every length at
    `SMALL_LENGTH` frames."""
    small = {"width": SMALL_SIDE, "height": SMALL_SIDE, "length": SMALL_LENGTH}
    for node_id, node in prompt.items():
        inputs = node.get("inputs", {})
        for name, value in small.items():
            if isinstance(inputs.get(name), int) and inputs[name] > value:
                inputs[name] = value
        if node["class_type"] in ("PrimitiveInt", "PrimitiveNode") and isinstance(inputs.get("value"), int):
            fed = _fed_inputs(prompt, node_id) & set(small)
            if fed:
                inputs["value"] = min(inputs["value"], small[fed.pop()])
    return prompt


async def _run(name: str, base_dir: Path, object_info: dict, full_size: bool) -> tuple[int, str, str]:
    prompt = editor_to_prompt(json.loads((TEMPLATES / f"{name}.json").read_text()), object_info)
    if not full_size:
        prompt = shrink(prompt)
    provide_files(prompt, base_dir)
    path = base_dir / f"{name}.api.json"
    path.write_text(json.dumps(prompt))
    out, err = io.StringIO(), io.StringIO()
    code = await run_workflow(ServerConfig(base_dir=base_dir, output_dir=base_dir / "output"), path, out=out, err=err)
    return code, out.getvalue(), err.getvalue()


def _frames(path: Path) -> tuple[int, int, int]:
    import av

    with av.open(str(path)) as container:
        stream = container.streams.video[0]
        count = sum(1 for _ in container.decode(stream))
        return count, stream.codec_context.width, stream.codec_context.height


async def test_template_runs(name: str, tmp_path: Path, comfy_object_info: dict, request: pytest.FixtureRequest) -> None:
    full_size = request.config.getoption("--full-size")
    code, out, err = await _run(name, tmp_path, comfy_object_info, full_size)
    assert code == 0, err[-3000:]
    written = [Path(line.split(" ", 1)[1]) for line in out.splitlines() if line.startswith("wrote ")]
    assert written and all(p.is_file() for p in written)
    videos = [p for p in written if p.suffix in (".mp4", ".webm")]
    for video in videos:  # each saved video plays: PyAV decodes every frame of it
        count, width, height = _frames(video)
        assert count >= 1 and width > 0 and height > 0
        if not full_size:
            assert count <= SMALL_LENGTH + 4  # VACE's reference frame is trimmed, not added


def test_every_wan_template_is_listed() -> None:
    names = {p.stem for p in TEMPLATES.glob("*.json")
             if ("wan" in p.stem.lower() or p.stem in OTHER_WAN_NAMES) and not p.stem.startswith("api_")}
    assert names == set(WAN_TEMPLATES) | set(NOT_RUNNING)


@pytest.mark.parametrize("folder, file_name, kind", [
    ("diffusion_models", "wan2.1_t2v_1.3B_fp16.safetensors", "unet_wan_t2v_fp16"),
    ("diffusion_models", "wan2.1_i2v_480p_14B_fp16.safetensors", "unet_wan_i2v_fp16"),
    ("diffusion_models", "wan2.2_i2v_high_noise_14B_fp8_scaled.safetensors", "unet_wan_a14b_i2v_scaled"),
    ("diffusion_models", "wan2.2_ti2v_5B_fp16.safetensors", "unet_wan_ti2v_fp16"),
    ("diffusion_models", "wan2.1_vace_14B_fp16.safetensors", "unet_wan_vace_fp16"),
    ("diffusion_models", "wan2.1_fun_control_1.3B_bf16.safetensors", "unet_wan_fun_control_bf16"),
    ("diffusion_models", "wan2.2_fun_camera_high_noise_14B_fp8_scaled.safetensors", "unet_wan_camera_22_scaled"),
    ("text_encoders", "umt5_xxl_fp8_e4m3fn_scaled.safetensors", "umt5_scaled"),
    ("vae", "wan2.2_vae.safetensors", "vae_wan22"),
    ("loras", "wan2.2_t2v_lightx2v_4steps_lora_v1.1_high_noise.safetensors", "lora_wan"),
    ("diffusion_models", "wan2.2_s2v_14B_fp8_scaled.safetensors", "unet_wan_s2v_scaled"),
    ("audio_encoders", "wav2vec2_large_english_fp16.safetensors", "audio_encoder_wav2vec2_large"),
    ("diffusion_models", "humo_17B_fp8_e4m3fn.safetensors", "unet_humo_17b_fp8"),
    ("audio_encoders", "whisper_large_v3_fp16.safetensors", "audio_encoder_whisper"),
])
def test_file_kinds(folder: str, file_name: str, kind: str) -> None:
    from tests.fixtures.template_models import file_kind

    assert file_kind(folder, file_name) == kind
