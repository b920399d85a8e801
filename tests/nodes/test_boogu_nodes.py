"""TextEncodeBooguEdit (nodes/boogu_nodes.py), today's ComfyUI (comfy_extras/nodes_boogu.py): each
linked image (`image_N` order) resized by area to about 384x384 for the vision tower, positive prompt
only, and to about one megapixel at multiples of 16 for the VAE, its latent appended to both
conditionings' `reference_latents`; the negative prompt encoded without images; on the tiny Qwen3-VL
CLIP loaded as CLIPLoader type "boogu"."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from comfy_core.families.boogu.clip import DROP_SYSTEM
from nodes.boogu_nodes import text_encode_boogu_edit
from nodes.errors import NodeInputError
from tests.fixtures.clips import one_thread  # noqa: F401  (module-wide one-thread torch)

PROMPT = "remove the hat"


@pytest.fixture(scope="module")
def clip(tmp_path_factory):
    from comfy_core.split import load_text_encoders
    from tests.fixtures.qwen3vl_files import write_tiny_qwen3vl

    path = write_tiny_qwen3vl(tmp_path_factory.mktemp("boogu_te") / "qwen3vl_8b_fp8_scaled.safetensors",
                              dtype=torch.float32, seed=3)
    return load_text_encoders([path], "boogu")


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
        return torch.full((pixels.shape[0], 16, pixels.shape[1] // 8, pixels.shape[2] // 8), float(pixels.mean()))

    def decode(self, latent):
        raise AssertionError("not used")


def _image(height, width, channels=3, seed=0, batch=1):
    return torch.rand(batch, height, width, channels, generator=torch.Generator().manual_seed(seed))


def _area(image, height, width):
    return F.interpolate(image.movedim(-1, 1), size=(height, width), mode="area").movedim(1, -1)[..., :3]


def test_images_in_number_order_resized_for_the_vision_tower_and_the_vae(clip, calls):
    first, second = _image(40, 60, seed=1), _image(64, 64, channels=4, seed=2)
    vae = RecordingVAE()
    positive, negative = text_encode_boogu_edit(clip, PROMPT, "", vae=vae,
                                                images={"image_2": second, "image_1": first, "image_3": None})
    # 40x60 -> 384^2 pixels: width 470.3 -> 470, height 313.5 -> 314; 1024^2 at multiples of 16: 1248 x 832
    (text, kwargs), (negative_text, negative_kwargs) = calls
    assert text == PROMPT and [tuple(i.shape) for i in kwargs["images"]] == [(1, 314, 470, 3), (1, 384, 384, 3)]
    assert torch.allclose(kwargs["images"][0], _area(first, 314, 470))
    assert torch.allclose(kwargs["images"][1], _area(second, 384, 384))  # alpha dropped
    assert negative_text == "" and negative_kwargs == {}  # the negative is encoded without images
    assert [tuple(p.shape) for p in vae.seen] == [(1, 832, 1248, 3), (1, 1024, 1024, 3)]
    assert torch.allclose(vae.seen[0], _area(first, 832, 1248))
    for conditioning in (positive, negative):
        references = conditioning[0][1]["reference_latents"]
        assert [float(r.mean()) for r in references] == pytest.approx([float(p.mean()) for p in vae.seen])
    plain = clip.encode_from_tokens_scheduled(clip.tokenize(PROMPT))
    assert positive[0][0].shape[1] > plain[0][0].shape[1]  # the vision tokens are in the positive
    drop = clip.encode_from_tokens_scheduled(clip.tokenize(""))
    assert torch.equal(negative[0][0], drop[0][0])
    ids = [t[0] for t in clip.tokenize("")["qwen3vl_8b"][0]]
    assert DROP_SYSTEM in clip.tokenizer.decode(ids, skip_special_tokens=False)


def test_without_images_or_vae_only_the_prompts_are_encoded(clip, calls):
    positive, negative = text_encode_boogu_edit(clip, PROMPT, "blurry", vae=None, images={})
    assert calls[0] == (PROMPT, {"images": []}) and calls[1] == ("blurry", {})
    assert "reference_latents" not in positive[0][1] and "reference_latents" not in negative[0][1]
    assert torch.equal(positive[0][0], clip.encode_from_tokens_scheduled(clip.tokenize(PROMPT))[0][0])


def test_errors_are_node_errors(clip):
    with pytest.raises(NodeInputError, match="clip"):
        text_encode_boogu_edit(None, PROMPT, "", vae=RecordingVAE())
    with pytest.raises(NodeInputError, match="images.image_1"):
        text_encode_boogu_edit(clip, PROMPT, "", vae=RecordingVAE(), images={"image_1": "not an image"})


def test_a_clip_that_drops_the_images_is_refused(clip):
    class TextOnly:
        """A CLIP double whose tokenizer keeps no images."""

        def tokenize(self, text, **kwargs):
            return {"qwen3vl_8b": [[(1, 1.0), (2, 1.0)]]}

        def encode_from_tokens(self, tokens, **kwargs):
            raise AssertionError("not reached")

    with pytest.raises(NodeInputError, match="clip"):
        text_encode_boogu_edit(TextOnly(), PROMPT, "", vae=RecordingVAE(), images={"image_1": _image(16, 16)})
