"""TextEncodeMageFlowEdit (nodes/mage_nodes.py), today's ComfyUI (comfy_extras/nodes_mage.py, the version
with `negative_prompt` and the `images` group): the output size from width / height or the first image,
floored to 16; each linked image (`image_N` order) capped at a 384 long edge for the vision tower in both
prompts, and resized (bicubic) to the output size for the VAE, its latent appended to both conditionings'
`reference_latents`; the empty 128-channel latent; on the tiny Qwen3-VL CLIP loaded as CLIPLoader type
"mage"."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from comfy_core.families.mage.clip import MAGE_T2I_TEMPLATE
from nodes.errors import NodeInputError
from nodes.mage_nodes import output_size, text_encode_mage_flow_edit
from tests.fixtures.clips import one_thread  # noqa: F401  (module-wide one-thread torch)

PROMPT = "replace the background"


@pytest.fixture(scope="module")
def clip(tmp_path_factory):
    from comfy_core.split import load_text_encoders
    from tests.fixtures.qwen3vl_files import write_tiny_qwen3vl

    path = write_tiny_qwen3vl(tmp_path_factory.mktemp("mage_te") / "qwen3vl_4b_bf16.safetensors",
                              dtype=torch.float32, seed=5)
    return load_text_encoders([path], "mage")


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


def _image(height, width, channels=3, seed=0):
    return torch.rand(1, height, width, channels, generator=torch.Generator().manual_seed(seed))


def _bicubic(image, height, width):
    return F.interpolate(image.movedim(-1, 1), size=(height, width), mode="bicubic").movedim(1, -1)


def test_output_size_falls_back_per_side_and_floors_to_16():
    image = torch.zeros(1, 600, 1000, 3)
    assert output_size(0, 0, image) == (992, 592)
    assert output_size(512, 0, image) == (512, 592)  # each side on its own
    assert output_size(0, 0, None) == (1024, 1024)
    assert output_size(8, 40, None) == (16, 32)


def test_text_to_image_without_images(clip, calls):
    positive, negative, latent = text_encode_mage_flow_edit(clip, PROMPT, "", width=512, height=256, batch_size=2)
    assert [(text, kwargs["images"]) for text, kwargs in calls] == [(PROMPT, []), (" ", [])]
    assert latent["samples"].shape == (2, 128, 16, 32) and not latent["samples"].any()
    assert "reference_latents" not in positive[0][1] and "reference_latents" not in negative[0][1]
    # the t2i template's opening cut: the conditioning starts at the prompt
    ids = [t[0] for t in clip.tokenize(PROMPT)[clip.cond_stage_model.slots[0]][0]]
    opening = len(clip.tokenize(MAGE_T2I_TEMPLATE.split("{}")[0] + "x")[clip.cond_stage_model.slots[0]][0]) - 1
    assert opening == 34  # upstream's drop_idx for the t2i template
    assert positive[0][0].shape[1] == len(ids) - opening  # the system turn and "<|im_start|>user\n" cut


def test_references_for_the_vision_tower_and_the_vae(clip, calls):
    first, second = _image(400, 600, seed=1), _image(64, 96, channels=4, seed=2)
    vae = RecordingVAE()
    positive, negative, latent = text_encode_mage_flow_edit(
        clip, PROMPT, "blurry", vae=vae, images={"image_2": second, "image_1": first, "image_3": None})
    (text, kwargs), (negative_text, negative_kwargs) = calls
    assert text == PROMPT and negative_text == "blurry"
    # 400x600 -> long edge 384: 384 x 256; 64x96 kept (alpha dropped); the negative sees the same images
    assert [tuple(i.shape) for i in kwargs["images"]] == [(1, 256, 384, 3), (1, 64, 96, 3)]
    assert torch.allclose(kwargs["images"][0], _bicubic(first, 256, 384))
    assert torch.equal(kwargs["images"][1], second[..., :3])
    assert all(a is b for a, b in zip(kwargs["images"], negative_kwargs["images"]))
    # the output size is the first image's, floored to 16: 592 x 400; both references resized to it
    assert latent["samples"].shape == (1, 128, 25, 37)
    assert [tuple(p.shape) for p in vae.seen] == [(1, 400, 592, 3), (1, 400, 592, 3)]
    assert torch.allclose(vae.seen[0], _bicubic(first, 400, 592))
    assert torch.allclose(vae.seen[1], _bicubic(second, 400, 592)[..., :3])
    for conditioning in (positive, negative):
        references = conditioning[0][1]["reference_latents"]
        assert [float(r.mean()) for r in references] == pytest.approx([float(p.mean()) for p in vae.seen], rel=1e-5)


def test_no_vae_means_no_reference_latents(clip, calls):
    positive, _, latent = text_encode_mage_flow_edit(clip, PROMPT, "", images={"image_1": _image(48, 32)},
                                                     width=64, height=0)
    assert latent["samples"].shape == (1, 128, 3, 4) and "reference_latents" not in positive[0][1]
    assert len(calls[0][1]["images"]) == 1


def test_a_clip_without_a_vision_tower_is_an_error():
    class TextOnly:  # a CLIP's surface whose tokenizer drops the images
        def tokenize(self, text, **kwargs):
            return {"l": [[(1, 1.0), (2, 1.0)]]}

        def encode_from_tokens(self, tokens, **kwargs):
            raise AssertionError("not reached")

    with pytest.raises(NodeInputError, match="clip"):
        text_encode_mage_flow_edit(TextOnly(), PROMPT, "", images={"image_1": _image(32, 32)})
