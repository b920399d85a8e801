"""TextEncodeQwenImageEdit / TextEncodeQwenImageEditPlus (nodes/qwen_image_nodes.py) on a tiny
Qwen2.5-VL CLIP: ComfyUI's image sizes (about one megapixel for the reference latent and Edit's
vision input, about 384x384 for Edit Plus's, sides multiples of 8 for Plus's references), the
`Picture N:` announcements, the reference latents attached in order, and typed node errors."""
from __future__ import annotations

import pytest
import torch

from comfy_core.families.qwen_image.clip import QWEN_IMAGE_TEXT_ENCODERS, VISION_BLOCK
from comfy_core.families.zimage.clip import ZIMAGE_TEXT_ENCODERS
from comfy_core.text_encoders.factory import build_clip, detect_text_encoders
from nodes.conditioning import clip_text_encode
from nodes.errors import NodeInputError
from nodes.qwen_image_nodes import (
    _edit_plus_template,
    scaled_size,
    text_encode_qwen_image_edit,
    text_encode_qwen_image_edit_plus,
)
from tests.fixtures.clips import one_thread  # noqa: F401  (module-wide one-thread torch)
from tests.fixtures.qwen3_files import tiny_qwen3_state_dict
from tests.fixtures.qwen25vl_files import tiny_qwen25vl_state_dict
from tests.fixtures.t5_files import header_of

PROMPT = "make the sky red"


def _clip(state, spec):
    configs = detect_text_encoders(header_of(state), [spec])
    return build_clip(configs, state, torch.float32, spec=spec)


@pytest.fixture(scope="module")
def clip():
    state = tiny_qwen25vl_state_dict(seed=7)
    return _clip({f"text_encoders.qwen25_7b.transformer.{k}": v for k, v in state.items()}, QWEN_IMAGE_TEXT_ENCODERS)


class RecordingVAE:
    """A test double with a VAE's surface: records the pixels it encodes, returns a latent made from them."""

    def __init__(self):
        self.seen = []

    def encode(self, pixels):
        self.seen.append(pixels)
        return pixels.mean(dim=-1)[:, None, None, ::8, ::8].clone()  # [B, 1, 1, h, w]

    def decode(self, latent):
        raise AssertionError("not used")


def _image(height, width, seed=0):
    return torch.rand(1, height, width, 3, generator=torch.Generator().manual_seed(seed))


def _area(image, height, width):
    return torch.nn.functional.interpolate(image.movedim(-1, 1), size=(height, width), mode="area").movedim(1, -1)


def test_sizes_are_comfyuis():
    assert scaled_size(40, 60, 1024 * 1024) == (836, 1254)
    assert scaled_size(40, 60, 1024 * 1024, multiple=8) == (840, 1256)
    assert scaled_size(40, 60, 384 * 384) == (314, 470)


def test_edit_without_an_image_is_the_plain_prompt(clip):
    (conditioning,) = text_encode_qwen_image_edit(clip, PROMPT)
    ((expected, _),) = clip_text_encode(PROMPT, clip)[0]
    ((cond, extra),) = conditioning
    assert torch.equal(cond, expected) and "reference_latents" not in extra


def test_edit_sees_the_megapixel_image_and_references_its_latent(clip):
    image = _image(40, 60)
    vae = RecordingVAE()
    (conditioning,) = text_encode_qwen_image_edit(clip, PROMPT, vae=vae, image=image)
    resized = _area(image, 836, 1254)
    assert len(vae.seen) == 1 and torch.allclose(vae.seen[0], resized)
    ((cond, extra),) = conditioning
    assert len(extra["reference_latents"]) == 1 and torch.equal(extra["reference_latents"][0], vae.encode(resized))
    expected = clip.encode_from_tokens_scheduled(clip.tokenize(PROMPT, images=[resized]))[0][0]
    torch.testing.assert_close(cond, expected)
    assert cond.shape[1] > 30 * 45  # the image's merged tokens (840 x 1260 pixels / 28^2) are in it


def test_edit_plus_announces_pictures_by_input_number(clip):
    second, third = _image(40, 60, seed=1), _image(50, 50, seed=2)
    vae = RecordingVAE()
    (conditioning,) = text_encode_qwen_image_edit_plus(clip, PROMPT, vae=vae, image2=second, image3=third)
    assert [tuple(p.shape) for p in vae.seen] == [(1, 840, 1256, 3), (1, 1024, 1024, 3)]
    seen = [_area(second, 314, 470), _area(third, 384, 384)]
    text = f"Picture 2: {VISION_BLOCK}Picture 3: {VISION_BLOCK}{PROMPT}"
    tokens = clip.tokenize(text, images=seen, llama_template=_edit_plus_template())
    ((cond, extra),) = conditioning
    torch.testing.assert_close(cond, clip.encode_from_tokens_scheduled(tokens)[0][0])
    assert [r.shape for r in extra["reference_latents"]] == [(1, 1, 1, 105, 157), (1, 1, 1, 128, 128)]
    assert "Picture 2: " in clip.tokenizer.decode([p[0] for p in tokens["qwen25_7b"][0] if not isinstance(p[0], dict)])
    # no VAE, no references
    (plain,) = text_encode_qwen_image_edit_plus(clip, PROMPT, image1=second)
    assert "reference_latents" not in plain[0][1]


def test_errors_are_node_errors(clip):
    zimage = _clip({f"text_encoders.qwen3_4b.transformer.{k}": v for k, v in tiny_qwen3_state_dict().items()},
                   ZIMAGE_TEXT_ENCODERS)
    with pytest.raises(NodeInputError, match="clip") as caught:
        text_encode_qwen_image_edit_plus(zimage, PROMPT, image1=_image(30, 30))
    assert "kept 0 of 1 images" in str(caught.value)
    with pytest.raises(NodeInputError, match="prompt"):
        text_encode_qwen_image_edit_plus(clip, f"{VISION_BLOCK}{PROMPT}", image1=_image(30, 30))
    with pytest.raises(NodeInputError, match="image"):
        text_encode_qwen_image_edit(clip, PROMPT, image=torch.zeros(30, 30, 3))
    with pytest.raises(NodeInputError, match="vae"):
        text_encode_qwen_image_edit(clip, PROMPT, vae=object(), image=_image(30, 30))


def test_empty_layered_latent_is_comfyuis_shape_and_refuses_bad_sizes():
    from nodes.qwen_image_nodes import empty_qwen_image_layered_latent_image

    (latent,) = empty_qwen_image_layered_latent_image(640, 480, 3, 2)
    assert latent["samples"].shape == (2, 16, 4, 60, 80) and not latent["samples"].any()
    (single,) = empty_qwen_image_layered_latent_image(20, 16, 0)  # sizes floor to the 8x latent grid
    assert single["samples"].shape == (1, 16, 1, 2, 2)
    for bad in ({"layers": -1}, {"width": 8}, {"batch_size": 0}, {"layers": True}):
        args = {"width": 64, "height": 64, "layers": 1, "batch_size": 1, **bad}
        with pytest.raises(NodeInputError, match=next(iter(bad))):
            empty_qwen_image_layered_latent_image(**args)
