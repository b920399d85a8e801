"""The autoregressive video nodes (nodes/ar_video_nodes.py) as ComfyUI's `comfy_extras` AR video
nodes: EmptyARVideoLatent's latent, SamplerARVideo's `ar_video` sampler, ARVideoI2V's start
latent on a clone of the model."""
from __future__ import annotations

import pytest
import torch

from comfy_core.sampling.ar_video import sample_ar_video
from nodes.ar_video_nodes import ar_video_i2v, empty_ar_video_latent, sampler_ar_video
from nodes.errors import NodeInputError


class FakeModel:
    def __init__(self, options: dict | None = None) -> None:
        self.model = object()
        self.model_options = {"transformer_options": dict(options or {})}

    def clone(self) -> "FakeModel":
        copy = FakeModel()
        copy.model_options = {**self.model_options,
                              "transformer_options": dict(self.model_options["transformer_options"])}
        return copy


class FakeVAE:
    """A Wan-like VAE: `[B, H, W, 3]` -> `[1, 16, 1 + (B - 1) // 4, H / 8, W / 8]`, the mean colour."""

    def __init__(self) -> None:
        self.seen = None

    def encode(self, pixels: torch.Tensor) -> torch.Tensor:
        self.seen = pixels
        b, h, w, _ = pixels.shape
        return pixels.mean().expand(1, 16, 1 + (b - 1) // 4, h // 8, w // 8).clone()

    def decode(self, latent):
        raise AssertionError("not used")


def test_empty_latent_shape():
    (latent,) = empty_ar_video_latent(832, 480, 81, 2)
    assert latent["samples"].shape == (2, 16, 21, 60, 104) and not latent["samples"].any()
    (short,) = empty_ar_video_latent(64, 32, 6, 1)  # any length: (length - 1) // 4 + 1 frames
    assert short["samples"].shape == (1, 16, 2, 4, 8)
    with pytest.raises(NodeInputError):
        empty_ar_video_latent(64, 32, 2000, 1)


def test_sampler_is_ar_video_with_its_block_size():
    (sampler,) = sampler_ar_video(3)
    assert sampler.sampler_function is sample_ar_video
    assert sampler.extra_options == {"num_frame_per_block": 3}
    with pytest.raises(NodeInputError):
        sampler_ar_video(0)


def test_i2v_encodes_the_first_image_resized_and_keeps_the_input_model():
    model, vae = FakeModel({"other": 1}), FakeVAE()
    images = torch.rand(2, 24, 48, 4)  # two images, with an alpha channel; wider than the target
    patched, latent = ar_video_i2v(model, vae, images, 32, 32, 9, 2)
    assert vae.seen.shape == (1, 32, 32, 3)  # the first image only, centre-cropped and resized, RGB
    options = patched.model_options["transformer_options"]
    assert options["other"] == 1
    initial = options["ar_config"]["initial_latent"]
    assert initial.shape == (1, 16, 1, 4, 4)
    assert "ar_config" not in model.model_options["transformer_options"]
    assert latent["samples"].shape == (2, 16, 3, 4, 4) and not latent["samples"].any()
    # a second application replaces the start latent and keeps other ar_config entries
    patched.model_options["transformer_options"]["ar_config"]["keep"] = True
    again, _ = ar_video_i2v(patched, vae, torch.ones(1, 32, 32, 3), 32, 32, 9, 1)
    config = again.model_options["transformer_options"]["ar_config"]
    assert config["keep"] is True and float(config["initial_latent"].mean()) == 1.0


def test_i2v_refuses_an_image_vae():
    class ImageVAE(FakeVAE):
        def encode(self, pixels):
            return torch.zeros(1, 4, 4, 4)

    with pytest.raises(NodeInputError, match="vae"):
        ar_video_i2v(FakeModel(), ImageVAE(), torch.rand(1, 32, 32, 3), 32, 32, 9, 1)
