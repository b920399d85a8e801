"""Wan 2.2 Animate through the executor on tiny files: UNETLoader (a tiny Animate network in the
release's key layout, tests/fixtures/wan_animate1_files.py, stored bf16) + the Wan templates' tiny
umT5, Wan 2.1 VAE and CLIP vision -> WanAnimateToVideo (reference image, pose and face videos) ->
KSampler -> TrimVideoLatent -> VAEDecode, then a second chunk continuing from the decoded frames
(`continue_motion`, the first chunk's `video_frame_offset`). The network is checked to receive the
pose latents and the face pixels, the continued chunk its known frames in the mask channels."""
from __future__ import annotations

import uuid
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

from comfy_core.families.wan.animate import AnimateWanModel
from graph.executor import Executor
from graph.registry import Registry
from graph.validation import validate_prompt
from nodes import register_builtin_nodes
from nodes.environment import Environment
from tests.fixtures.template_models import provide_files
from tests.fixtures.wan_animate1_files import tiny_animate_state_dict
from tests.fixtures.wan_template_models import IMAGE_WIDTH, TEXT_WIDTH

UNET = "wan2.2_animate_14B_bf16.safetensors"
SIZE, LENGTH = 32, 5


def _chunk(prefix: str, continue_from: list | None, offset: list | int) -> dict:
    inputs = {"positive": ["5", 0], "negative": ["6", 0], "vae": ["3", 0], "width": SIZE, "height": SIZE,
              "length": LENGTH, "batch_size": 1, "continue_motion_max_frames": 1, "video_frame_offset": offset,
              "clip_vision_output": ["12", 0], "reference_image": ["7", 0], "pose_video": ["9", 0],
              "face_video": ["10", 0]}
    if continue_from is not None:
        inputs["continue_motion"] = continue_from
    return {f"{prefix}1": {"class_type": "WanAnimateToVideo", "inputs": inputs},
            f"{prefix}2": {"class_type": "KSampler", "inputs": {
                "model": ["1", 0], "seed": 3, "steps": 1, "cfg": 1.0, "sampler_name": "euler", "scheduler": "simple",
                "positive": [f"{prefix}1", 0], "negative": [f"{prefix}1", 1], "latent_image": [f"{prefix}1", 2],
                "denoise": 1.0}},
            f"{prefix}3": {"class_type": "TrimVideoLatent",
                           "inputs": {"samples": [f"{prefix}2", 0], "trim_amount": [f"{prefix}1", 3]}},
            f"{prefix}4": {"class_type": "VAEDecode", "inputs": {"samples": [f"{prefix}3", 0], "vae": ["3", 0]}},
            f"{prefix}5": {"class_type": "PreviewImage", "inputs": {"images": [f"{prefix}4", 0]}}}


def prompt() -> dict:
    def image(color: int, batch: int) -> dict:
        return {"class_type": "EmptyImage", "inputs": {"width": SIZE, "height": SIZE, "batch_size": batch,
                                                       "color": color}}

    graph = {
        "1": {"class_type": "UNETLoader", "inputs": {"unet_name": UNET, "weight_dtype": "default"}},
        "2": {"class_type": "CLIPLoader", "inputs": {"clip_name": "umt5_xxl_fp8_e4m3fn_scaled.safetensors",
                                                     "type": "wan", "device": "default"}},
        "3": {"class_type": "VAELoader", "inputs": {"vae_name": "wan_2.1_vae.safetensors"}},
        "4": {"class_type": "CLIPVisionLoader", "inputs": {"clip_name": "clip_vision_h.safetensors"}},
        "5": {"class_type": "CLIPTextEncode", "inputs": {"clip": ["2", 0], "text": "a dancer on a stage"}},
        "6": {"class_type": "CLIPTextEncode", "inputs": {"clip": ["2", 0], "text": ""}},
        "7": image(0x808080, 1), "9": image(0x2040F0, 9), "10": image(0xE0B090, 9),
        "12": {"class_type": "CLIPVisionEncode",
               "inputs": {"clip_vision": ["4", 0], "image": ["7", 0], "crop": "none"}},
    }
    graph.update(_chunk("2", None, 0))
    graph.update(_chunk("3", ["24", 0], ["21", 5]))  # the extension: the first chunk's frames and offset
    return graph


@pytest.fixture
def env(tmp_path: Path) -> Environment:
    environment = Environment.rooted_at(tmp_path)
    environment.ensure_dirs()
    return environment


async def test_two_animate_chunks_run_through_the_executor(env, tmp_path, monkeypatch):
    graph = prompt()
    unet = tmp_path / "models" / "diffusion_models" / UNET
    unet.parent.mkdir(parents=True, exist_ok=True)
    state = tiny_animate_state_dict(seed=5, num_layers=5, text_dim=TEXT_WIDTH, image_dim=IMAGE_WIDTH,
                                    dtype=torch.bfloat16)
    save_file({k: v.contiguous() for k, v in state.items()}, str(unet))
    written = provide_files(graph, tmp_path)
    assert ("vae", "vae_wan21") in written
    seen: list[dict] = []
    forward = AnimateWanModel.forward

    def spy(self, x, timestep, context, *args, **kwargs):
        pose, faces = kwargs.get("pose_latents"), kwargs.get("face_pixel_values")
        seen.append(dict(x=tuple(x.shape), pose=None if pose is None else tuple(pose.shape),
                         faces=None if faces is None else tuple(faces.shape),
                         known=x[0, 16:20].mean(dim=(0, 2, 3)).tolist()))
        return forward(self, x, timestep, context, *args, **kwargs)

    monkeypatch.setattr(AnimateWanModel, "forward", spy)
    registry = Registry()
    register_builtin_nodes(registry)
    checked = await validate_prompt(graph, registry, env=env)
    assert checked.ok, checked.node_errors
    outcome = await Executor(registry, env=env).execute(graph, str(uuid.uuid4()), outputs=checked.outputs)
    assert outcome.status == "success", outcome.error
    latent_frames = (LENGTH - 1) // 4 + 1
    assert len(seen) == 2  # one step per chunk, cfg 1 (the positive only)
    for call in seen:
        assert call["x"] == (1, 36, 1 + latent_frames, SIZE // 8, SIZE // 8)  # the reference frame in front
        assert call["pose"] == (1, 16, latent_frames, SIZE // 8, SIZE // 8)
        assert call["faces"] == (1, 3, LENGTH, 512, 512)
    # the mask channels: the reference frame known, and in the extension the continued frame's latent
    assert [call["known"] for call in seen] == [[1.0, 0.0, 0.0], [1.0, 1.0, 0.0]]
    for prefix in ("2", "3"):
        records = outcome.ui_outputs[f"{prefix}5"]["images"]
        assert len(records) == LENGTH and all(r["filename"].endswith(".png") for r in records)


def test_the_file_loads_as_comfy_wan22_animate(tmp_path):
    from comfy_core.split.diffusion_model import load_diffusion_model
    from compat.mp_model_base import WAN21, WAN22_Animate  # ComfyUI's classes, as packs check them
    from compat.mp_supported_models import our_config_class

    path = tmp_path / UNET
    save_file({k: v.contiguous() for k, v in tiny_animate_state_dict(seed=2, dtype=torch.bfloat16).items()},
              str(path))
    model = load_diffusion_model(path)
    assert model.model.family.name == "wan22_animate"
    assert isinstance(model.model, WAN22_Animate) and isinstance(model.model, WAN21)
    assert isinstance(model.model.diffusion_model, AnimateWanModel)
    config_class = our_config_class("WAN22_Animate")
    assert config_class is model.model.family.supported_model and config_class.unet_config["model_type"] == "animate"
