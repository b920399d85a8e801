"""comfy_extras.nodes_video_model: ImageOnlyCheckpointLoader, SVD_img2vid_Conditioning,
VideoLinearCFGGuidance, VideoTriangleCFGGuidance and ImageOnlyCheckpointSave -- ComfyUI's
/object_info entries, behaviour against values computed here, typed errors, and a whole img2vid
workflow (loader -> conditioning -> guidance -> KSampler -> VAEDecode) through the executor."""
from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
import torch
from PIL import Image
from safetensors import safe_open

from graph.context import NodeContext, reset_current, set_current
from graph.executor import Executor
from graph.native import Input, node
from graph.registry import Registry
from graph.validation import validate_prompt
from nodes import register_builtin_nodes
from nodes import video_model as vm
from nodes.environment import Environment
from nodes.errors import NodeInputError
from tests.fixtures.object_info_parity import comfyui_object_info, differences
from tests.fixtures.svd import write_tiny_svd_checkpoint

NODES = ("ImageOnlyCheckpointLoader", "ImageOnlyCheckpointSave", "SVD_img2vid_Conditioning",
         "VideoLinearCFGGuidance", "VideoTriangleCFGGuidance")
CAPTURED: dict[str, torch.Tensor] = {}


@node("TestCaptureFrames", inputs=[Input("images", "IMAGE")], output_node=True)
def capture_frames(images):
    CAPTURED["frames"] = images
    return {}


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    root = tmp_path_factory.mktemp("svd_nodes")
    environment = Environment.rooted_at(root)
    environment.ensure_dirs()
    write_tiny_svd_checkpoint(root / "models" / "checkpoints" / "svd.safetensors")
    pixels = (np.random.default_rng(0).random((40, 56, 3)) * 255).astype(np.uint8)
    Image.fromarray(pixels).save(root / "input" / "frame.png")
    return environment


@pytest.fixture
def running(env):
    token = set_current(NodeContext("p", "1", "1", None, env))
    yield env
    reset_current(token)


@pytest.fixture
def loaded(running):
    return vm.image_only_checkpoint_loader("svd.safetensors")


def test_object_info_matches_comfyui(tmp_path):
    registry = Registry()
    register_builtin_nodes(registry)
    ours = registry.object_info(Environment.rooted_at(tmp_path))
    theirs = comfyui_object_info()
    assert differences({n: ours[n] for n in NODES}, {n: theirs[n] for n in NODES}) == {}


def test_loader_returns_the_model_its_image_encoder_and_vae(loaded):
    model, clip_vision, vae = loaded
    assert model.model.family.name == "svd"
    assert clip_vision.config.layout == "open_clip" and clip_vision.config.prefix.startswith("conditioner.embedders.0.")
    assert type(vae.model).__name__ == "VideoAutoencoder"


def test_conditioning_is_the_image_embedding_and_latent(loaded):
    _, clip_vision, vae = loaded
    image = torch.rand(1, 40, 56, 3, generator=torch.Generator().manual_seed(4))
    positive, negative, latent = vm.svd_img2vid_conditioning(clip_vision, image, vae, 64, 48, 5, 40, 8, 0.0)
    embeds = clip_vision.encode_image(image).image_embeds
    torch.testing.assert_close(positive[0][0], embeds[None])  # [1, images, P]
    # The init image resized to 64x48 (centre crop to 4:3, then bilinear) and VAE-encoded.
    # 56x40 is wider than 4:3: round((56 - 56 * (4/3) / 1.4) / 2) = 1 column cut on each side.
    cropped = image[:, :, 1:55, :].movedim(-1, 1)
    resized = torch.nn.functional.interpolate(cropped, size=(48, 64), mode="bilinear").movedim(1, -1)
    torch.testing.assert_close(positive[0][1]["concat_latent_image"], vae.encode(resized))
    assert {k: positive[0][1][k] for k in ("motion_bucket_id", "fps", "augmentation_level")} == \
        {"motion_bucket_id": 40, "fps": 8, "augmentation_level": 0.0}
    assert torch.equal(negative[0][0], torch.zeros_like(positive[0][0]))
    assert torch.equal(negative[0][1]["concat_latent_image"], torch.zeros(1, 4, 6, 8))
    assert negative[0][1]["fps"] == 8
    assert torch.equal(latent["samples"], torch.zeros(5, 4, 6, 8))


def test_augmentation_adds_noise_before_encoding(loaded):
    _, clip_vision, vae = loaded
    image = torch.rand(1, 48, 64, 3, generator=torch.Generator().manual_seed(5))
    plain = vm.svd_img2vid_conditioning(clip_vision, image, vae, 64, 48, 2, 127, 6, 0.0)[0][0][1]
    noisy = vm.svd_img2vid_conditioning(clip_vision, image, vae, 64, 48, 2, 127, 6, 0.5)[0][0][1]
    assert (plain["concat_latent_image"] - noisy["concat_latent_image"]).abs().max() > 1e-3
    assert noisy["augmentation_level"] == 0.5


def test_conditioning_errors(loaded):
    _, clip_vision, vae = loaded
    image = torch.rand(1, 16, 16, 3)
    with pytest.raises(NodeInputError, match="clip_vision"):
        vm.svd_img2vid_conditioning(vae, image, vae, 64, 48, 2, 127, 6, 0.0)
    with pytest.raises(NodeInputError, match="init_image"):
        vm.svd_img2vid_conditioning(clip_vision, torch.rand(16, 16), vae, 64, 48, 2, 127, 6, 0.0)
    with pytest.raises(NodeInputError, match="video_frames"):
        vm.svd_img2vid_conditioning(clip_vision, image, vae, 64, 48, 0, 127, 6, 0.0)
    with pytest.raises(NodeInputError, match="augmentation_level"):
        vm.svd_img2vid_conditioning(clip_vision, image, vae, 64, 48, 2, 127, 6, -1.0)


def _cfg_args(frames: int, scale: float) -> dict:
    g = torch.Generator().manual_seed(6)
    return {"cond": torch.randn(frames, 4, 2, 2, generator=g), "uncond": torch.randn(frames, 4, 2, 2, generator=g),
            "cond_scale": scale}


@pytest.mark.parametrize("frames", [1, 5, 6])
def test_linear_guidance_scales_rise_over_the_frames(loaded, frames):
    model = loaded[0]
    (patched,) = vm.video_linear_cfg_guidance(model, 1.5)
    assert "sampler_cfg_function" not in model.model_options  # the input MODEL is unchanged
    args = _cfg_args(frames, 7.0)
    got = patched.model_options["sampler_cfg_function"](args)
    scales = [1.5 + (7.0 - 1.5) * i / (frames - 1) for i in range(frames)] if frames > 1 else [1.5]
    want = np.stack([args["uncond"][i].numpy() + s * (args["cond"][i] - args["uncond"][i]).numpy()
                     for i, s in enumerate(scales)])
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("scales", [[2.0], [2.0, 5.0, 8.0, 5.0, 2.0], [2.0, 4.4, 6.8, 6.8, 4.4, 2.0]])
def test_triangle_guidance_peaks_in_the_middle(loaded, scales):
    # min_cfg 2, cfg 8: u = i/(n-1), scale = 2 + 6 * (twice the distance of u to the nearest integer).
    (patched,) = vm.video_triangle_cfg_guidance(loaded[0], 2.0)
    frames = len(scales)
    args = _cfg_args(frames, 8.0)
    got = patched.model_options["sampler_cfg_function"](args)
    want = np.stack([args["uncond"][i].numpy() + s * (args["cond"][i] - args["uncond"][i]).numpy()
                     for i, s in enumerate(scales)])
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-5, atol=1e-5)


def test_guidance_errors(loaded):
    with pytest.raises(NodeInputError, match="model"):
        vm.video_linear_cfg_guidance("not a model", 1.0)
    with pytest.raises(NodeInputError, match="min_cfg"):
        vm.video_triangle_cfg_guidance(loaded[0], 101.0)


def test_cond_and_uncond_batched_give_what_each_gives_alone(loaded, running):
    """The model splits a batch of concatenated entries into one video per entry."""
    dm = loaded[0].model
    g = torch.Generator().manual_seed(7)
    x = torch.randn(6, 4, 6, 8, generator=g)
    ctx = torch.randn(6, 1, 64, generator=g)
    y = dm.encode_adm().repeat(6, 1)
    concat = torch.randn(6, 4, 6, 8, generator=g)
    sigma = torch.full((6,), 3.0)
    with torch.no_grad():
        both = dm.apply_model(x, sigma, ctx, y, {"cond_or_uncond": [0, 1]}, c_concat=concat)
        alone = [dm.apply_model(x[i:i + 3], sigma[:3], ctx[i:i + 3], y[:3], {"cond_or_uncond": [0]},
                                c_concat=concat[i:i + 3]) for i in (0, 3)]
    torch.testing.assert_close(both, torch.cat(alone), atol=1e-5, rtol=1e-5)


def _workflow(guidance: str | None, fps: int = 6) -> dict:
    model = ["10", 0] if guidance else ["1", 0]
    prompt = {
        "1": {"class_type": "ImageOnlyCheckpointLoader", "inputs": {"ckpt_name": "svd.safetensors"}},
        "2": {"class_type": "LoadImage", "inputs": {"image": "frame.png"}},
        "3": {"class_type": "SVD_img2vid_Conditioning",
              "inputs": {"clip_vision": ["1", 1], "init_image": ["2", 0], "vae": ["1", 2], "width": 64, "height": 48,
                         "video_frames": 4, "motion_bucket_id": 127, "fps": fps, "augmentation_level": 0.0}},
        "4": {"class_type": "KSampler", "inputs": {"model": model, "seed": 3, "steps": 2, "cfg": 3.0,
                                                   "sampler_name": "euler", "scheduler": "karras",
                                                   "positive": ["3", 0], "negative": ["3", 1],
                                                   "latent_image": ["3", 2], "denoise": 1.0}},
        "5": {"class_type": "VAEDecode", "inputs": {"samples": ["4", 0], "vae": ["1", 2]}},
        "6": {"class_type": "TestCaptureFrames", "inputs": {"images": ["5", 0]}},
    }
    if guidance:
        prompt["10"] = {"class_type": guidance, "inputs": {"model": ["1", 0], "min_cfg": 1.0}}
    return prompt


async def _run(env, prompt) -> torch.Tensor:
    registry = Registry()
    register_builtin_nodes(registry)
    registry.add_native(capture_frames)
    checked = await validate_prompt(prompt, registry, env=env)
    assert checked.ok, checked.node_errors
    outcome = await Executor(registry, env=env).execute(prompt, "p", outputs=checked.outputs)
    assert outcome.status == "success", outcome.messages
    return CAPTURED.pop("frames")


async def test_img2vid_workflow_gives_video_frames_images(env):
    guided = await _run(env, _workflow("VideoLinearCFGGuidance"))
    assert guided.shape == (4, 48, 64, 3) and torch.isfinite(guided).all()
    assert (guided[0] - guided[3]).abs().max() > 1e-3  # frames differ
    plain = await _run(env, _workflow(None))
    assert (plain - guided).abs().max() > 1e-4  # the per-frame scales changed the result
    other_fps = await _run(env, _workflow(None, fps=12))
    assert (plain - other_fps).abs().max() > 1e-4  # fps reaches the model's label embedding


def test_save_writes_a_checkpoint_that_loads_back(loaded, running, tmp_path):
    from comfy_core.loading import load_checkpoint

    model, clip_vision, vae = loaded
    vm.image_only_checkpoint_save(model, clip_vision, vae, "checkpoints/svd_copy", prompt={"1": {}},
                                  extra_pnginfo={"workflow": {"nodes": []}})
    path = running.output_dir / "checkpoints" / "svd_copy_00001_.safetensors"
    with safe_open(str(path), "pt") as f:
        metadata = f.metadata()
        assert float(f.get_tensor("edm_vpred.sigma_max")) == pytest.approx(700.0, rel=1e-5)
        assert float(f.get_tensor("edm_vpred.sigma_min")) == pytest.approx(0.002, rel=1e-5)
        assert "v_pred" not in f.keys()
        assert any(k.startswith("conditioner.embedders.0.open_clip.model.visual.vision_model.") for k in f.keys())
    assert metadata["modelspec.architecture"] == "stable-video-diffusion-img2vid-v1"
    assert metadata["modelspec.title"] == "svd_copy 1" and metadata["prompt"] == json.dumps({"1": {}})
    assert json.loads(metadata["workflow"]) == {"nodes": []}
    shutil.copyfile(path, tmp_path / "copy.safetensors")
    model2, _, vae2 = load_checkpoint(tmp_path / "copy.safetensors", output_clip=False)
    for a, b in ((model.model.diffusion_model, model2.model.diffusion_model), (vae.model, vae2.model)):
        for (name, p), (_, q) in zip(a.state_dict().items(), b.state_dict().items()):
            assert torch.equal(p, q), name
