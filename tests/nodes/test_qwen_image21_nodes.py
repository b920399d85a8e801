"""TextEncodeQwenImage21 / QwenImage21Cache (nodes/qwen_image_nodes.py), today's ComfyUI
(comfy_extras/nodes_qwen.py): references in `image_N` order, resized once (lanczos, multiples of 32)
for the encoder (alpha over white) and the VAE (all channels), `keep_vision` only without a VAE,
empty prompts kept non-empty, the 64-channel 1/16 latent on the first reference's size, and the
cache settings on a MODEL clone; on a tiny Qwen2.5-VL CLIP (the only CLIP here that reads images)."""
from __future__ import annotations

import numpy as np
import pytest
import torch
from PIL import Image
from torch import nn

from comfy_core.families.qwen_image.clip import QWEN_IMAGE_TEXT_ENCODERS
from comfy_core.families.qwen_image.qwen21 import CACHE_OPTION
from comfy_core.families.zimage.clip import ZIMAGE_TEXT_ENCODERS
from comfy_core.patching.model import ModelPatcher
from comfy_core.text_encoders.factory import build_clip, detect_text_encoders
from nodes.errors import NodeInputError
from nodes.qwen_image_nodes import qwen_image21_cache, text_encode_qwen_image21
from tests.fixtures.clips import one_thread  # noqa: F401  (module-wide one-thread torch)
from tests.fixtures.qwen3_files import tiny_qwen3_state_dict
from tests.fixtures.qwen25vl_files import tiny_qwen25vl_state_dict
from tests.fixtures.t5_files import header_of

PROMPT = "remove the background"


def _clip(state, spec):
    configs = detect_text_encoders(header_of(state), [spec])
    return build_clip(configs, state, torch.float32, spec=spec)


@pytest.fixture(scope="module")
def clip():
    state = tiny_qwen25vl_state_dict(seed=11)
    return _clip({f"text_encoders.qwen25_7b.transformer.{k}": v for k, v in state.items()}, QWEN_IMAGE_TEXT_ENCODERS)


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
        return torch.full((1, 64, pixels.shape[1] // 16, pixels.shape[2] // 16), float(pixels.mean()))

    def decode(self, latent):
        raise AssertionError("not used")


def _image(height, width, channels=3, seed=0, batch=1):
    return torch.rand(batch, height, width, channels, generator=torch.Generator().manual_seed(seed))


def _lanczos(image, height, width):
    """Pillow's lanczos on the truncated uint8 pixels, as ComfyUI's comfy.utils.lanczos does."""
    pixels = (255.0 * image[0].numpy()).clip(0, 255).astype(np.uint8)
    resized = Image.fromarray(pixels).resize((width, height), resample=Image.Resampling.LANCZOS)
    return torch.from_numpy(np.array(resized).astype(np.float32) / 255.0)[None]


def _plain(clip, text, images=()):
    return clip.encode_from_tokens_scheduled(clip.tokenize(text, images=list(images)))


def test_text_only_encodes_both_prompts_and_sizes_the_latent_by_resolution(clip, calls):
    positive, negative, latent = text_encode_qwen_image21(clip, PROMPT, "", resolution=512)
    assert torch.equal(positive[0][0], _plain(clip, PROMPT)[0][0])
    assert torch.equal(negative[0][0], _plain(clip, " ")[0][0])  # an empty prompt becomes one space
    assert not torch.equal(negative[0][0], _plain(clip, "")[0][0])
    assert [kwargs for _, kwargs in calls[:2]] == [{"images": [], "keep_vision": True, "prevent_empty_text": True}] * 2
    assert "reference_latents" not in positive[0][1]
    assert latent["samples"].shape == (1, 64, 32, 32) and not latent["samples"].any()
    assert text_encode_qwen_image21(clip, PROMPT, "", resolution=0)[2]["samples"].shape == (1, 64, 64, 64)


def test_references_in_number_order_resized_once_for_encoder_and_vae(clip, calls):
    first, second, third = _image(40, 60, seed=1), _image(64, 32, channels=4, seed=2, batch=2), _image(30, 30, seed=3)
    vae = RecordingVAE()
    images = {"image_10": third, "image_2": second, "image_1": first}
    positive, negative, latent = text_encode_qwen_image21(clip, PROMPT, "blurry", vae=vae, resolution=64,
                                                          images=images)
    # resolution 64: 40x60 -> width 64 * sqrt(1.5) = 78.4 -> 64, height 64 / sqrt(1.5) = 52.3 -> 64;
    # 64x32 (RGBA, batch 2): w 64/sqrt(2)=45.3 -> 32, h 90.5 -> 96; 30x30 -> 64x64
    assert [tuple(p.shape) for p in vae.seen] == [(1, 64, 64, 3), (1, 96, 32, 4), (1, 64, 64, 3)]
    assert torch.allclose(vae.seen[0], _lanczos(first, 64, 64))
    expected_rgba = _lanczos(second[:1], 96, 32)
    assert torch.allclose(vae.seen[1], expected_rgba)  # the VAE keeps alpha
    text, kwargs = calls[0]
    assert text == PROMPT and kwargs["keep_vision"] is False and kwargs["prevent_empty_text"] is True
    seen = kwargs["images"]
    assert [tuple(p.shape) for p in seen] == [(1, 64, 64, 3), (1, 96, 32, 3), (1, 64, 64, 3)]
    alpha = expected_rgba[..., 3:]
    assert torch.allclose(seen[1], expected_rgba[..., :3] * alpha + (1 - alpha))  # over white
    assert calls[1][0] == "blurry" and len(calls[1][1]["images"]) == 3
    for conditioning in (positive, negative):
        references = conditioning[0][1]["reference_latents"]
        assert [float(r.mean()) for r in references] == pytest.approx([float(p.mean()) for p in vae.seen])
    assert latent["samples"].shape == (1, 64, 4, 4)  # the first reference's 64x64


def test_without_a_vae_the_images_stay_in_the_encoder(clip, calls):
    image = _image(64, 96, seed=4)
    positive, negative, latent = text_encode_qwen_image21(clip, PROMPT, "", resolution=0, images={"image_1": image})
    assert calls[0][1]["keep_vision"] is True
    assert torch.equal(calls[0][1]["images"][0], image)  # already a multiple of 32: as given
    assert "reference_latents" not in positive[0][1] and "reference_latents" not in negative[0][1]
    assert latent["samples"].shape == (1, 64, 4, 6)
    assert not torch.equal(positive[0][0], _plain(clip, PROMPT)[0][0])  # the image was seen


def test_errors_are_node_errors(clip):
    with pytest.raises(NodeInputError, match="clip"):
        text_encode_qwen_image21(object(), PROMPT, "")
    with pytest.raises(NodeInputError, match="resolution"):
        text_encode_qwen_image21(clip, PROMPT, "", resolution=-32)
    with pytest.raises(NodeInputError, match="negative_prompt"):
        text_encode_qwen_image21(clip, PROMPT, None)
    with pytest.raises(NodeInputError, match="images.image_1"):
        text_encode_qwen_image21(clip, PROMPT, "", images={"image_1": torch.rand(8, 8)})
    zimage = _clip({f"text_encoders.qwen3_4b.transformer.{k}": v for k, v in tiny_qwen3_state_dict(seed=3).items()},
                   ZIMAGE_TEXT_ENCODERS)
    with pytest.raises(NodeInputError, match="clip"):  # a tokenizer that drops images
        text_encode_qwen_image21(zimage, PROMPT, "", images={"image_1": _image(32, 32)})


def test_cache_node_sets_the_option_on_a_clone_only():
    model = ModelPatcher(nn.Linear(2, 2))
    model.model_options["transformer_options"]["kept"] = 1
    (patched,) = qwen_image21_cache(model, "cpu", "int4")
    assert patched is not model
    assert patched.model_options["transformer_options"] == {"kept": 1, CACHE_OPTION: {"device": "cpu", "dtype": "int4"}}
    assert model.model_options["transformer_options"] == {"kept": 1}
    (again,) = qwen_image21_cache(patched, "off", "default")
    assert again.model_options["transformer_options"][CACHE_OPTION] == {"device": "off", "dtype": "default"}
    assert patched.model_options["transformer_options"][CACHE_OPTION] == {"device": "cpu", "dtype": "int4"}


def test_cache_node_refuses_unknown_settings():
    model = ModelPatcher(nn.Linear(2, 2))
    with pytest.raises(NodeInputError, match="device"):
        qwen_image21_cache(model, "tpu", "default")
    with pytest.raises(NodeInputError, match="dtype"):
        qwen_image21_cache(model, "auto", "fp8")
    with pytest.raises(NodeInputError, match="model"):
        qwen_image21_cache(object(), "auto", "default")
