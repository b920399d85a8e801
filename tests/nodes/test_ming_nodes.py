"""TextEncodeMingImageEdit (today's ComfyUI, comfy_extras/nodes_ming.py) on the tiny Ming-Image files
(tests/fixtures/template_models_ming.py): the images seen by the vision tower in number order,
their latents on the first image's canvas as `reference_latents` when a VAE is given, the plain
prompt without images; and an edit generated end to end through the executor (UNETLoader,
CLIPLoader type "qwen_image", VAELoader, LoadImage, KSampler, VAEDecode)."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from nodes.errors import NodeInputError
from nodes.ming_nodes import text_encode_ming_image_edit
from tests.fixtures.template_models_ming import (DIT_DIM, write_ming_dit, write_ming_text_encoder,
                                                 write_ming_vae)
from tests.nodes.workflow_2026 import Runner, node

TE = "ming_image_0.1_ling_mini_2.0_int8_convrot.safetensors"
DIT = "ming_image_0.1_design_int8_convrot.safetensors"
VAE = "ming_image_vae_bf16.safetensors"


@pytest.fixture(scope="module")
def root(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("ming_nodes")
    write_ming_text_encoder(root / "models" / "text_encoders" / TE, seed=2)
    write_ming_dit(root / "models" / "diffusion_models" / DIT, seed=2)
    write_ming_vae(root / "models" / "vae" / VAE, seed=2)
    return root


@pytest.fixture(scope="module")
def clip(root):
    from comfy_core.split.text_encoder_files import load_text_encoders

    return load_text_encoders([str(root / "models" / "text_encoders" / TE)], "qwen_image")


class RecordingVAE:
    """A VAE that records what it is asked to encode and returns a latent of the image's size."""

    def __init__(self) -> None:
        self.seen: list[torch.Tensor] = []

    def encode(self, image: torch.Tensor) -> torch.Tensor:
        self.seen.append(image)
        return torch.full((1, 16, 1, image.shape[1] // 8, image.shape[2] // 8), float(len(self.seen)))

    def decode(self, latent):  # pragma: no cover - a VAE can decode; this test never asks
        raise AssertionError


def test_images_are_seen_in_number_order_and_encoded_on_the_first_canvas(clip):
    first = torch.rand(1, 48, 64, 4, generator=torch.Generator().manual_seed(1))  # RGBA: the tokenizer sees RGB
    second = torch.rand(1, 40, 40, 3, generator=torch.Generator().manual_seed(2))
    vae = RecordingVAE()
    seen: list = []

    class Recording:  # the real CLIP, recording the images its tokenizer is given
        def tokenize(self, text, **kwargs):
            seen.append(kwargs.get("images"))
            return clip.tokenize(text, **kwargs)

        def __getattr__(self, name):
            return getattr(clip, name)

    (conditioning,) = text_encode_ming_image_edit(Recording(), "make it blue",
                                                  {"image_2": second, "image_1": first, "image_3": None}, vae)
    cond, options = conditioning[0]
    assert cond.shape[-1] == 32 and options["direct_context"].shape[-1] == DIT_DIM
    assert [tuple(image.shape) for image in vae.seen] == [(1, 48, 64, 4), (1, 48, 64, 3)]  # resized to the first
    torch.testing.assert_close(vae.seen[0], first)
    assert [float(latent.mean()) for latent in options["reference_latents"]] == [1.0, 2.0]
    # the tokenizer got the two images as RGB, in number order, unresized
    assert len(seen) == 1 and len(seen[0]) == 2
    torch.testing.assert_close(seen[0][0], first[..., :3])
    torch.testing.assert_close(seen[0][1], second)


def test_without_a_vae_the_images_only_reach_the_text_encoder(clip):
    image = torch.rand(1, 32, 32, 3, generator=torch.Generator().manual_seed(3))
    (with_image,) = text_encode_ming_image_edit(clip, "edit", {"image_1": image})
    (plain,) = text_encode_ming_image_edit(clip, "edit", {})
    assert "reference_latents" not in with_image[0][1]
    assert with_image[0][1]["direct_context"].shape[1] > plain[0][1]["direct_context"].shape[1] + 500  # 576 image tokens
    torch.testing.assert_close(plain[0][0], clip.encode_from_tokens(clip.tokenize("edit")))


def test_a_clip_that_drops_the_images_is_refused():
    class TextOnly:
        def tokenize(self, text, **kwargs):
            return {"l": [[(1, 1.0)]]}

        def encode_from_tokens(self, tokens, **kwargs):  # pragma: no cover - refused before encoding
            raise AssertionError

    with pytest.raises(NodeInputError, match="'clip'"):
        text_encode_ming_image_edit(TextOnly(), "x", {"image_1": torch.rand(1, 8, 8, 3)})


def _write_input(root: Path, name: str, height: int, width: int, seed: int) -> None:
    pixels = (np.random.default_rng(seed).random((height, width, 3)) * 255).astype(np.uint8)
    (root / "input").mkdir(parents=True, exist_ok=True)
    Image.fromarray(pixels).save(root / "input" / name)


async def test_an_edit_runs_through_the_executor(root):
    _write_input(root, "a.png", 48, 64, 1)
    runner = Runner(root)
    prompt = {
        "unet": node("UNETLoader", unet_name=DIT, weight_dtype="default"),
        "clip": node("CLIPLoader", clip_name=TE, type="qwen_image", device="default"),
        "vae": node("VAELoader", vae_name=VAE),
        "a": node("LoadImage", image="a.png"),
        "edit": node("TextEncodeMingImageEdit", clip=["clip", 0], vae=["vae", 0], prompt="make it blue",
                     **{"images.image_1": ["a", 0]}),
        "neg": node("ConditioningZeroOut", conditioning=["edit", 0]),
        "latent": node("EmptyLatentImage", width=64, height=48, batch_size=1),
        "sample": node("KSampler", model=["unet", 0], positive=["edit", 0], negative=["neg", 0],
                       latent_image=["latent", 0], seed=1, steps=2, cfg=2.0, sampler_name="euler",
                       scheduler="simple", denoise=1.0),
        "decode": node("VAEDecode", samples=["sample", 0], vae=["vae", 0]),
        "preview": node("PreviewImage", images=["decode", 0]),
    }
    out = await runner.run(prompt)
    assert out.status == "success", out.error
    assert "edit" in runner.ran and len(out.ui_outputs["preview"]["images"]) == 1
