"""The SCAIL-2 part of the `video_wan21_scail2_character_replacement` templates through the executor on the
templates' tiny files (tests/fixtures/template_models_wan_scail.py and the Wan templates' umT5, VAE, CLIP
vision and LoRAs): UNETLoader + LoRAs -> WanSCAILToVideo (replacement mode, hand-made colour masks in place
of SAM 3's tracks) -> KSampler -> VAEDecode, then the template's extension chunk continuing from the
decoded frames (`previous_frames`, `video_frame_offset`). The network is checked to receive every SCAIL-2
input; the int8 ConvRot release loads as the same family."""
from __future__ import annotations

import asyncio
import json
import uuid
from pathlib import Path

import pytest
import torch

from comfy_core.families.wan.scail import WanSCAILModel
from graph.executor import Executor
from graph.registry import Registry
from graph.validation import validate_prompt
from nodes import register_builtin_nodes
from nodes.environment import Environment
from tests.fixtures.template_models import provide_files

UNET = "wan2.1_14B_SCAIL_2_fp16.safetensors"
SIZE, LENGTH = 64, 5
BLUE, RED, GREY = 0x0000FF, 0xFF0000, 0x808080


def _image(color: int, batch: int) -> dict:
    return {"class_type": "EmptyImage", "inputs": {"width": SIZE, "height": SIZE, "batch_size": batch, "color": color}}


def _chunk(ids: dict, prefix: str, previous: list | None = None, offset: list | int = 0) -> dict:
    """WanSCAILToVideo -> KSampler -> VAEDecode of one chunk, node ids prefixed."""
    inputs = {"positive": [ids["pos"], 0], "negative": [ids["neg"], 0], "vae": [ids["vae"], 0], "width": SIZE,
              "height": SIZE, "length": LENGTH, "batch_size": 1, "pose_strength": 1.0, "pose_start": 0.0,
              "pose_end": 1.0, "video_frame_offset": offset, "previous_frame_count": 5, "replacement_mode": True,
              "pose_video": [ids["pose"], 0], "pose_video_mask": [ids["pose_mask"], 0],
              "reference_image": [ids["ref"], 0], "reference_image_mask": [ids["ref_mask"], 0],
              "clip_vision_output": [ids["clip_vision"], 0]}
    if previous is not None:
        inputs["previous_frames"] = previous
    return {f"{prefix}1": {"class_type": "WanSCAILToVideo", "inputs": inputs},
            f"{prefix}2": {"class_type": "KSampler", "inputs": {
                "model": [ids["model"], 0], "seed": 7, "steps": 2, "cfg": 2.0, "sampler_name": "euler",
                "scheduler": "simple", "positive": [f"{prefix}1", 0], "negative": [f"{prefix}1", 1],
                "latent_image": [f"{prefix}1", 2], "denoise": 1.0}},
            f"{prefix}3": {"class_type": "VAEDecode", "inputs": {"samples": [f"{prefix}2", 0], "vae": [ids["vae"], 0]}},
            f"{prefix}4": {"class_type": "PreviewImage", "inputs": {"images": [f"{prefix}3", 0]}}}


def prompt() -> dict:
    ids = dict(model="11", pos="5", neg="6", vae="3", pose="9", pose_mask="10", ref="7", ref_mask="8", clip_vision="12")
    graph = {
        "1": {"class_type": "UNETLoader", "inputs": {"unet_name": UNET, "weight_dtype": "default"}},
        "11": {"class_type": "LoraLoaderModelOnly", "inputs": {
            "model": ["1", 0], "lora_name": "wan2.1_SCAIL_2_DPO_lora_bf16.safetensors", "strength_model": 1.0}},
        "2": {"class_type": "CLIPLoader", "inputs": {"clip_name": "umt5_xxl_fp8_e4m3fn_scaled.safetensors",
                                                     "type": "wan", "device": "default"}},
        "3": {"class_type": "VAELoader", "inputs": {"vae_name": "Wan2_1_VAE_bf16.safetensors"}},
        "4": {"class_type": "CLIPVisionLoader", "inputs": {"clip_name": "clip_vision_h.safetensors"}},
        "5": {"class_type": "CLIPTextEncode", "inputs": {"clip": ["2", 0], "text": "a dancer on a hill"}},
        "6": {"class_type": "CLIPTextEncode", "inputs": {"clip": ["2", 0], "text": ""}},
        "7": _image(GREY, 1), "8": _image(RED, 1), "9": _image(GREY, 9), "10": _image(BLUE, 9),
        "12": {"class_type": "CLIPVisionEncode",
               "inputs": {"clip_vision": ["4", 0], "image": ["7", 0], "crop": "none"}},
    }
    graph.update(_chunk(ids, "2", None, 0))
    graph.update(_chunk(ids, "3", ["23", 0], ["21", 3]))  # the extension: the first chunk's frames and offset
    return graph


@pytest.fixture
def env(tmp_path: Path) -> Environment:
    environment = Environment.rooted_at(tmp_path)
    environment.ensure_dirs()
    return environment


async def test_the_scail2_chunks_run_through_the_executor(env, tmp_path, monkeypatch):
    graph = prompt()
    written = provide_files(graph, tmp_path)
    assert ("diffusion_models", "unet_wan_scail2_fp16") in written and ("loras", "lora_wan") in written
    seen: list[dict] = []
    original = WanSCAILModel.scail_forward_orig

    def spy(self, x, t, context, clip_fea, freqs, options, pose, reference, ref_mask, sam):
        seen.append(dict(x=x.shape, clip=clip_fea is not None, pose=None if pose is None else pose.shape,
                         reference=None if reference is None else reference.shape,
                         ref_mask=None if ref_mask is None else ref_mask.shape, sam=None if sam is None else sam.shape,
                         history=x[:, 16:].amax().item(), freqs=freqs.shape[1]))
        return original(self, x, t, context, clip_fea, freqs, options, pose, reference, ref_mask, sam)

    monkeypatch.setattr(WanSCAILModel, "scail_forward_orig", spy)
    registry = Registry()
    register_builtin_nodes(registry)
    checked = await validate_prompt(graph, registry, env=env)
    assert checked.ok, checked.node_errors
    outcome = await Executor(registry, env=env).execute(graph, str(uuid.uuid4()), outputs=checked.outputs)
    assert outcome.status == "success", outcome.error
    assert len(seen) == 4  # 2 steps x 2 chunks, cond and uncond batched together (cfg 2)
    latent_frames = (LENGTH - 1) // 4 + 1
    for call in seen:
        assert call["x"] == (2, 20, latent_frames, SIZE // 8, SIZE // 8) and call["clip"]
        assert call["pose"] == (2, 20, latent_frames, SIZE // 16, SIZE // 16)
        assert call["sam"] == (2, 28, latent_frames, SIZE // 16, SIZE // 16)
        assert call["reference"] == (2, 20, 1, SIZE // 8, SIZE // 8)
        assert call["ref_mask"] == (2, 28, 1 + latent_frames, SIZE // 8, SIZE // 8)
        video_tokens = (1 + latent_frames) * (SIZE // 16) ** 2
        assert call["freqs"] == video_tokens + latent_frames * (SIZE // 32) ** 2
    assert [c["history"] for c in seen] == [0.0, 0.0, 1.0, 1.0]  # the extension's anchored frames
    for prefix in ("2", "3"):
        records = outcome.ui_outputs[f"{prefix}4"]["images"]
        assert len(records) == LENGTH and all(r["filename"].endswith(".png") for r in records)


def test_the_int8_convrot_release_loads_as_scail2(tmp_path):
    from comfy_core.split.diffusion_model import load_diffusion_model
    from tests.fixtures.template_models_wan_scail import WRITERS_WAN_SCAIL

    path = tmp_path / "wan2.1_14B_SCAIL_2_int8_convrot.safetensors"
    WRITERS_WAN_SCAIL["unet_wan_scail2_int8_convrot"](path)
    model = load_diffusion_model(path)
    assert model.model.family.name == "wan21_scail2"
    from compat.mp_model_base import WAN21, WAN21_SCAIL, WAN21_SCAIL2  # ComfyUI's classes, as packs check them

    assert isinstance(model.model, WAN21_SCAIL2) and isinstance(model.model, WAN21_SCAIL)
    assert isinstance(model.model, WAN21)
    network = model.model.diffusion_model
    assert isinstance(network, WanSCAILModel) and network.patch_embedding_mask is not None
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        out = network(torch.randn(1, 20, 2, 8, 8, generator=g), torch.tensor([500.0]),
                      torch.randn(1, 4, 32, generator=g), pose_latents=torch.randn(1, 20, 2, 4, 4, generator=g),
                      sam_latents=torch.ones(1, 28, 2, 4, 4), reference_latent=torch.randn(1, 20, 1, 8, 8, generator=g),
                      ref_mask_latents=torch.zeros(1, 28, 3, 8, 8), ref_mask_flag=False)
    assert out.shape == (1, 16, 2, 8, 8) and torch.isfinite(out).all()


# -- the template's own graph, converted as the editor queues it ----------------------------------------

def _template() -> dict | None:
    import json
    import os

    import bench.template_coverage as coverage

    folder = coverage.newest_templates(os.environ.get("COMFY_ENGINE_NEWEST_TEMPLATES"), download=False)
    path = None if folder is None else Path(folder) / "video_wan21_scail2_character_replacement.json"
    return json.loads(path.read_text(encoding="utf-8")) if path is not None and path.is_file() else None


def test_the_templates_scail_nodes_convert_with_their_widgets(tmp_path):
    from graph.editor_workflow import editor_to_prompt

    workflow = _template()
    if workflow is None:
        pytest.skip("the newest comfyui-workflow-templates-json package is not unpacked here")
    registry = Registry()
    register_builtin_nodes(registry)
    assert "SAM3_VideoTrack" in registry.object_info(Environment.rooted_at(tmp_path))  # nodes/sam3_nodes.py
    env = Environment.rooted_at(tmp_path)
    env.ensure_dirs()
    node_defs = json.loads(json.dumps(registry.object_info(env)))
    prompt = editor_to_prompt(workflow, node_defs)
    by_type: dict[str, list[dict]] = {}
    for node in prompt.values():
        by_type.setdefault(node["class_type"], []).append(node["inputs"])
    assert len(by_type["WanSCAILToVideo"]) == 2 and len(by_type["SCAIL2ColoredMask"]) == 2
    for inputs in by_type["WanSCAILToVideo"]:
        assert inputs["batch_size"] == 1 and inputs["video_frame_offset"] == 0
        for name in ("pose_video", "pose_video_mask", "reference_image", "reference_image_mask", "clip_vision_output",
                     "positive", "negative", "vae", "width", "height", "length", "replacement_mode",
                     "previous_frame_count", "pose_strength", "pose_start", "pose_end"):
            assert name in inputs, name
    assert sum("previous_frames" in i for i in by_type["WanSCAILToVideo"]) == 1  # the extension chunk
    for inputs in by_type["SCAIL2ColoredMask"]:
        assert inputs["object_indices"] == "" and inputs["sort_by"] == "left_to_right"
        assert isinstance(inputs["ref_track_data"], list) and isinstance(inputs["driving_track_data"], list)
    assert len(by_type["SAM3_VideoTrack"]) == 4  # driving and reference, in each chunk: the real node's widgets
    for inputs in by_type["SAM3_VideoTrack"]:
        assert {"images", "model", "conditioning"} <= set(inputs) and "initial_mask" not in inputs
        assert (inputs["detection_threshold"], inputs["max_objects"], inputs["detect_interval"]) == (0.5, 4, 1)
    (color,) = by_type["ColorTransfer"]
    assert (color["method"], color["source_stats"], color["strength"]) == ("reinhard_lab", "per_frame", 1.0)
    assert isinstance(color["image_target"], list) and isinstance(color["image_ref"], list)
    for inputs in by_type["UNETLoader"]:
        assert inputs["unet_name"] == UNET
    provide_files({k: v for k, v in prompt.items() if v["class_type"] != "CheckpointLoaderSimple"}, tmp_path)
    for path in (tmp_path / "models" / "checkpoints" / "sam3.1_multiplex_fp16.safetensors",
                 tmp_path / "input" / "driving_outdoor_dance.mp4", tmp_path / "input" / "reference_streetwear_character.png"):
        path.parent.mkdir(parents=True, exist_ok=True)
        if not path.exists():  # the loaders' combos list them; nothing reads them here
            path.write_bytes(b"")
    checked = asyncio.run(validate_prompt(prompt, registry, env=env))
    assert checked.ok, (checked.error, checked.node_errors)  # every SCAIL / ColorTransfer value is accepted
