"""ComfyUI 0.3.64's latent and conditioning nodes of the families it ships nodes for beyond ours
(Mochi, Cosmos, Stable Cascade, Stable Zero123 / SV3D, the SD x4 upscaler, PixArt Alpha,
Hunyuan-DiT / HunyuanImage 2.1) and WebcamCapture: each node's outputs against ComfyUI's rules
written out here. Their `/object_info` entries are compared with ComfyUI's by
tests/nodes/test_object_info_parity.py."""
from __future__ import annotations

import math
from contextlib import contextmanager
from types import SimpleNamespace

import pytest
import torch
import torch.nn.functional as F
from PIL import Image

from graph.context import NodeContext, reset_current, set_current
from nodes.cosmos_nodes import (cosmos_image_to_video_latent, cosmos_predict2_image_to_video_latent,
                                empty_cosmos_latent_video)
from nodes.environment import Environment
from nodes.errors import NodeInputError
from nodes.hunyuan_image_nodes import (clip_text_encode_hunyuan_dit, empty_hunyuan_image_latent,
                                       hunyuan_refiner_latent)
from nodes.pixart import clip_text_encode_pixart_alpha
from nodes.sd_upscale import sd_4x_upscale_conditioning
from nodes.stable3d_nodes import (stable_zero123_conditioning, stable_zero123_conditioning_batched,
                                  sv3d_conditioning)
from nodes.stable_cascade_nodes import (stable_cascade_empty_latent_image, stable_cascade_stage_b_conditioning,
                                        stable_cascade_stage_c_vae_encode, stable_cascade_super_resolution_controlnet)
from nodes.video_latents import empty_mochi_latent_video
from nodes.webcam import webcam_capture


class RecordingVideoVAE:
    """A stand-in video VAE (8x spatial, `temporal`x temporal, 16 channels) that records what it
    encodes: each latent cell is the mean of its pixels' first channel, so a test can tell frames
    apart."""

    def __init__(self, temporal: int) -> None:
        self.temporal, self.seen = temporal, []

    def encode(self, pixels: torch.Tensor) -> torch.Tensor:
        self.seen.append(pixels.clone())
        frames = (pixels.shape[0] - 1) // self.temporal + 1
        first = pixels[::self.temporal][:frames, :, :, 0]  # the first frame of each packed group
        cells = F.avg_pool2d(first.unsqueeze(1), 8).squeeze(1)  # [t, h, w]
        return cells.unsqueeze(0).unsqueeze(0).repeat(1, 16, 1, 1, 1)

    def decode(self, latent):  # pragma: no cover - the nodes never decode
        raise AssertionError


class ImageVAE:
    """A stand-in image VAE: `downscale_ratio` pixels a cell, 4 channels (the pixels' mean)."""
    downscale_ratio = 4

    def __init__(self) -> None:
        self.seen = []

    def encode(self, pixels: torch.Tensor) -> torch.Tensor:
        self.seen.append(pixels.clone())
        cells = F.avg_pool2d(pixels.movedim(-1, 1), self.downscale_ratio)
        return cells.mean(1, keepdim=True).repeat(1, 4, 1, 1)

    def decode(self, latent):  # pragma: no cover
        raise AssertionError


def test_empty_video_latents_follow_comfyui_arithmetic():
    assert empty_mochi_latent_video(848, 480, 25, 2)[0]["samples"].shape == (2, 12, 5, 60, 106)
    assert empty_mochi_latent_video(64, 32, 8, 1)[0]["samples"].shape == (1, 12, 2, 4, 8)  # any length
    assert empty_cosmos_latent_video(1280, 704, 121, 1)[0]["samples"].shape == (1, 16, 16, 88, 160)
    assert empty_hunyuan_image_latent(2048, 1024, 3)[0]["samples"].shape == (3, 64, 32, 64)
    with pytest.raises(NodeInputError, match="length"):
        empty_mochi_latent_video(64, 64, 6, 1)


def test_cosmos_start_and_end_images_pad_encode_and_mask():
    vae = RecordingVideoVAE(temporal=8)
    start = torch.full((1, 32, 32, 3), 0.9)
    end = torch.full((1, 32, 32, 3), 0.1)
    (out,) = cosmos_image_to_video_latent(vae, 64, 32, 33, 2, start_image=start, end_image=end)
    latent, mask = out["samples"], out["noise_mask"]
    assert latent.shape == (2, 16, 5, 4, 8) and mask.shape == (2, 1, 5, 4, 8)
    # the start frame padded with grey to (0 + 1 + 1) * 8 - 7 = 9 frames, the end one to 1 frame
    assert [p.shape[0] for p in vae.seen] == [9, 1]
    assert torch.all(vae.seen[0][1:] == 0.5) and vae.seen[0].shape[1:] == (32, 64, 3)
    assert torch.allclose(latent[:, :, 0], torch.full_like(latent[:, :, 0], 0.9))
    assert torch.allclose(latent[:, :, -1], torch.full_like(latent[:, :, -1], 0.1))
    assert torch.all(latent[:, :, 1:-1] == 0)
    assert mask[:, :, 0].eq(0).all() and mask[:, :, -1].eq(0).all() and mask[:, :, 1:-1].eq(1).all()
    # no image: the empty latent alone, no mask, batch 1 (ComfyUI's early return)
    (plain,) = cosmos_image_to_video_latent(vae, 64, 32, 33, 4)
    assert set(plain) == {"samples"} and plain["samples"].shape == (1, 16, 5, 4, 8)


def test_cosmos_predict2_fills_the_sampled_region_with_the_wan_mean():
    from comfy_core.families.wan.latent_format import wan21_latent_format

    vae = RecordingVideoVAE(temporal=4)
    start = torch.full((1, 16, 16, 3), 0.7)
    (out,) = cosmos_predict2_image_to_video_latent(vae, 16, 16, 9, 1, start_image=start)
    latent, mask = out["samples"], out["noise_mask"]
    assert latent.shape == (1, 16, 3, 2, 2)
    assert vae.seen[0].shape[0] == 9  # the padding rule counts in eights for Predict2 too (ComfyUI's)
    mean = wan21_latent_format().process_out(torch.zeros(1, 16, 1, 1, 1))
    assert torch.allclose(latent[:, :, 1:], mean.expand(1, 16, 2, 2, 2))
    assert torch.allclose(latent[:, :, 0], torch.full_like(latent[:, :, 0], 0.7))
    assert mask[:, :, 0].eq(0).all() and mask[:, :, 1:].eq(1).all()


def test_stable_cascade_latents_and_prior():
    c, b = stable_cascade_empty_latent_image(1024, 768, 42, 2)
    assert c["samples"].shape == (2, 16, 18, 24) and b["samples"].shape == (2, 4, 192, 256)
    vae = ImageVAE()
    image = torch.rand(1, 100, 130, 3)
    c, b = stable_cascade_stage_c_vae_encode(image, vae, 32)
    # resized to (W // 32) * 4 x (H // 32) * 4 = 16 x 12 pixels before the encoder
    assert vae.seen[0].shape == (1, 12, 16, 3)
    assert c["samples"].shape == (1, 4, 3, 4) and b["samples"].shape == (1, 4, 24, 32)
    (cond,) = stable_cascade_stage_b_conditioning([[torch.zeros(1, 2, 3), {"a": 1}]], c)
    assert cond[0][1]["stable_cascade_prior"] is c["samples"] and cond[0][1]["a"] == 1
    hint, c2, b2 = stable_cascade_super_resolution_controlnet(torch.rand(2, 64, 48, 3), ImageVAE())
    assert hint.shape == (2, 16, 12, 4) and c2["samples"].shape == (2, 16, 4, 3) and b2["samples"].shape == (2, 4, 32, 24)


class FakeClipVision:
    def __init__(self, width: int = 6) -> None:
        self.width = width

    def encode_image(self, image: torch.Tensor):
        return SimpleNamespace(image_embeds=image.mean(dim=(1, 2, 3)).unsqueeze(1).repeat(1, self.width))


def test_stable_zero123_camera_token():
    image = torch.rand(1, 40, 40, 3)
    positive, negative, latent = stable_zero123_conditioning(FakeClipVision(), image, ImageVAE(), 32, 24, 3, 30.0, 45.0)
    cond = positive[0][0]
    assert cond.shape == (1, 1, 10)
    want = torch.tensor([math.radians(-30.0), math.sin(math.radians(45.0)), math.cos(math.radians(45.0)), math.pi / 2])
    assert torch.allclose(cond[0, 0, 6:], want)
    assert torch.allclose(cond[0, 0, :6], image.mean().repeat(6))
    assert positive[0][1]["concat_latent_image"].shape == (1, 4, 6, 8)
    assert torch.all(negative[0][0] == 0) and negative[0][0].shape == (1, 1, 6)
    assert torch.all(negative[0][1]["concat_latent_image"] == 0)
    assert latent["samples"].shape == (3, 4, 3, 4)


def test_stable_zero123_batched_steps_the_camera():
    positive, _, latent = stable_zero123_conditioning_batched(FakeClipVision(), torch.rand(1, 16, 16, 3), ImageVAE(),
                                                              16, 16, 3, 10.0, 0.0, 5.0, 90.0)
    cond = positive[0][0]
    assert cond.shape == (3, 1, 10) and latent["batch_index"] == [0, 0, 0]
    for i in range(3):
        assert math.isclose(cond[i, 0, 6].item(), math.radians(-(10.0 + 5.0 * i)), abs_tol=1e-6)
        assert math.isclose(cond[i, 0, 7].item(), math.sin(math.radians(90.0 * i)), abs_tol=1e-6)


def test_sv3d_orbit():
    positive, negative, latent = sv3d_conditioning(FakeClipVision(), torch.rand(1, 16, 16, 3), ImageVAE(), 16, 16, 5, 12.5)
    options = positive[0][1]
    assert options["elevation"] == [12.5] * 5 and options["azimuth"] == [0, 90.0, 180.0, 270.0, 360.0]
    assert negative[0][1]["azimuth"] == options["azimuth"] and latent["samples"].shape == (5, 4, 2, 2)
    assert sv3d_conditioning(FakeClipVision(), torch.rand(1, 16, 16, 3), ImageVAE(), 16, 16, 1, 0.0)[0][0][1]["azimuth"] == [0]


def test_sd_x4_upscale_conditioning():
    images = torch.rand(2, 10, 12, 3)
    positive, negative, latent = sd_4x_upscale_conditioning(images, [[torch.zeros(1), {}]], [[torch.ones(1), {}]], 4.0, 0.25)
    pixels = positive[0][1]["concat_image"]
    assert pixels.shape == (2, 3, 10, 12) and torch.allclose(pixels, images.movedim(-1, 1) * 2 - 1)
    assert negative[0][1]["noise_augmentation"] == 0.25 and negative[0][1]["concat_image"] is pixels
    assert latent["samples"].shape == (2, 4, 10, 12)
    _, _, half = sd_4x_upscale_conditioning(images, [], [], 2.0, 0.0)
    assert half["samples"].shape == (2, 4, 5, 6)


class FakeClip:
    """Tokens as the text itself, under the parts a CLIP of that kind has."""

    def __init__(self, parts) -> None:
        self.parts, self.encoded = parts, []

    def tokenize(self, text: str):
        return {part: [[(f"{part}:{text}", 1.0)]] for part in self.parts}

    def encode_from_tokens(self, tokens, return_pooled=False):  # pragma: no cover - the nodes schedule
        raise AssertionError

    def encode_from_tokens_scheduled(self, tokens, add_dict=None):
        self.encoded.append(tokens)
        return [[torch.zeros(1, 2, 4), {"pooled_output": None, **(add_dict or {})}]]


def test_text_encoders_with_extra_conditioning():
    clip = FakeClip(["bert", "mt5xl"])
    clip_text_encode_hunyuan_dit(clip, "a cat", "eine Katze")
    assert clip.encoded[-1] == {"bert": [[("bert:a cat", 1.0)]], "mt5xl": [[("mt5xl:eine Katze", 1.0)]]}
    with pytest.raises(NodeInputError, match="mt5xl"):
        clip_text_encode_hunyuan_dit(FakeClip(["l"]), "a", "b")
    (cond,) = clip_text_encode_pixart_alpha(768, 512, "a dog", FakeClip(["t5xxl"]))
    assert cond[0][1]["width"] == 768 and cond[0][1]["height"] == 512


def test_hunyuan_refiner_latent():
    samples = torch.rand(2, 64, 1, 4, 5)
    positive, negative, latent = hunyuan_refiner_latent([[torch.zeros(1), {}]], [[torch.zeros(1), {}]],
                                                         {"samples": samples}, 0.1)
    assert positive[0][1]["concat_latent_image"] is samples and negative[0][1]["noise_augmentation"] == 0.1
    assert latent["samples"].shape == (2, 32, 1, 4, 5) and torch.all(latent["samples"] == 0)


@contextmanager
def _running(env: Environment):
    token = set_current(NodeContext(prompt_id="p", node_id="1", display_node_id="1", list_index=None, env=env))
    try:
        yield
    finally:
        reset_current(token)


def test_webcam_capture_loads_the_uploaded_capture(tmp_path):
    env = Environment.rooted_at(tmp_path / "base")
    env.ensure_dirs()
    (env.temp_dir / "webcam").mkdir(parents=True)
    Image.new("RGB", (6, 4), (255, 0, 0)).save(env.temp_dir / "webcam" / "1700000000.png")
    with _running(env):
        (image,) = webcam_capture("webcam/1700000000.png [temp]", 0, 0, True)
    assert image.shape == (1, 4, 6, 3) and torch.allclose(image[0, 0, 0], torch.tensor([1.0, 0.0, 0.0]))
