"""TextEncodeFibo2 (nodes/fibo2_nodes.py; schema reconstructed from ComfyUI's embedded docs and the Fibo 2.0
templates, behaviour the docs' and the reference pipeline's): the result's size from width / height or
the first image's trained bucket, floored to 16; one image cover-cropped to the result's size, several to
their own buckets, as the pipeline crops them; the edit / generation prompt and the null-caption negative
(text only); the crops' latents on both conditionings; the empty 128-channel latent; on the tiny 36-block
Qwen3-VL loaded as CLIPLoader type "fibo2"."""
from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from comfy_core.families.fibo2.prompt import NULL_CAPTION, edit_prompt
from nodes.errors import NodeInputError
from nodes.fibo2_nodes import cover_crop, output_size, text_encode_fibo2
from tests.fixtures.clips import one_thread  # noqa: F401  (module-wide one-thread torch)

CAPTION = '{"short_description":"a fox","lighting":{},"context":""}'


@pytest.fixture(scope="module")
def clip(tmp_path_factory):
    from comfy_core.split import load_text_encoders
    from tests.fixtures.qwen3vl_files import write_tiny_qwen3vl

    path = write_tiny_qwen3vl(tmp_path_factory.mktemp("fibo2_te") / "qwen3vl_4b_bf16.safetensors",
                              dtype=torch.float32, seed=5, layers=36)
    return load_text_encoders([path], "fibo2")


@pytest.fixture
def calls(clip, monkeypatch):
    """Every clip.tokenize call's text and keywords (the real tokenizer still runs)."""
    seen = []
    tokenize = clip.tokenize

    def recording(text, return_word_ids=False, **kwargs):
        seen.append((text, kwargs))
        return tokenize(text, return_word_ids, **kwargs)

    monkeypatch.setattr(clip, "tokenize", recording)
    return seen


class RecordingVAE:
    """A test double with a VAE's surface: records the pixels it encodes, returns a latent of their mean."""

    def __init__(self):
        self.seen = []

    def encode(self, pixels):
        self.seen.append(pixels)
        return torch.full((pixels.shape[0], 128, pixels.shape[1] // 16, pixels.shape[2] // 16), float(pixels.mean()))

    def decode(self, latent):
        raise AssertionError("not used")


def _image(height, width, seed=0):
    return torch.rand(1, height, width, 3, generator=torch.Generator().manual_seed(seed))


def test_output_size_takes_the_trained_bucket_per_side_and_floors_to_16():
    image = torch.zeros(1, 600, 800, 3)  # 4:3 -> the bucket 1152 x 864
    assert output_size(0, 0, image) == (1152, 864)
    assert output_size(500, 0, image) == (496, 864)
    assert output_size(0, 0, None) == (1024, 1024)
    assert output_size(8, 40, None) == (16, 32)


def test_cover_crop_is_the_pipelines_resize_and_crop():
    from diffusers.pipelines.bria_fibo2.image_processor import BriaFibo2ImageProcessor
    from PIL import Image

    image = (torch.rand(1, 37, 53, 3, generator=torch.Generator().manual_seed(3)) * 255).round() / 255
    ours = cover_crop(image.movedim(-1, 1), 32, 48).movedim(1, -1)[0]
    pil = Image.fromarray((image[0].numpy() * 255).round().astype(np.uint8))
    expected = np.asarray(BriaFibo2ImageProcessor(vae_scale_factor=16)._resize_and_crop(pil, 32, 48)).astype(np.float32)
    assert ours.shape == (48, 32, 3)
    assert np.abs(ours.numpy() * 255 - expected).max() <= 1.0


def test_text_to_image_cleans_a_caption_and_uses_the_null_caption_negative(clip, calls):
    positive, negative, latent = text_encode_fibo2(clip, CAPTION, "", width=512, height=256, batch_size=2)
    assert [(text, kwargs.get("images", [])) for text, kwargs in calls] == [('{"short_description":"a fox"}', []),
                                                                   (NULL_CAPTION, [])]
    assert latent["samples"].shape == (2, 128, 16, 32) and not latent["samples"].any()
    assert "reference_latents" not in positive[0][1] and "reference_latents" not in negative[0][1]
    assert positive[0][0].shape[-1] == 6 * 3 * 64 and negative[0][0].shape[-1] == 6 * 3 * 64


def test_one_image_is_cropped_to_the_result_and_edits_with_both_conditionings(clip, calls):
    vae, image = RecordingVAE(), _image(40, 90)
    positive, negative, latent = text_encode_fibo2(clip, "make it blue", "ugly", vae=vae, images={"image_1": image},
                                                   width=64, height=32)
    (edit, edit_kwargs), (neg, neg_kwargs) = calls
    assert edit == edit_prompt("make it blue", 1) and neg == "ugly" and not neg_kwargs.get("images")
    assert json.loads(edit)["edit_instruction"] == "make it blue"
    (pixels,) = vae.seen
    assert pixels.shape == (1, 32, 64, 3)
    assert torch.allclose(pixels, cover_crop(image.movedim(-1, 1), 64, 32).movedim(1, -1))
    assert edit_kwargs["images"][0].shape == (1, 32, 64, 3)
    for conditioning in (positive, negative):
        (reference,) = conditioning[0][1]["reference_latents"]
        assert reference.shape == (1, 128, 2, 4)
    assert latent["samples"].shape == (1, 128, 2, 4)


def test_several_images_go_to_their_own_buckets_and_the_size_follows_the_first(clip, calls):
    vae = RecordingVAE()
    images = {"image_2": _image(30, 40, 1), "image_1": _image(64, 32, 2)}  # linked out of order
    _positive, _negative, latent = text_encode_fibo2(clip, "swap them", "", vae=vae, images=images)
    assert [tuple(p.shape[1:3]) for p in vae.seen] == [(1440, 720), (864, 1152)]  # 1:2, then 4:3
    assert latent["samples"].shape == (1, 128, 1440 // 16, 720 // 16)
    assert calls[0][0] == edit_prompt("swap them", 2) and len(calls[0][1]["images"]) == 2
    assert max(calls[0][1]["images"][0].shape[1:3]) == 768  # what Qwen3-VL sees


def test_a_json_edit_prompt_needs_an_instruction(clip):
    with pytest.raises(NodeInputError, match="edit_instruction"):
        text_encode_fibo2(clip, CAPTION, "", images={"image_1": _image(32, 32)})
