"""TextEncodeJoyImageEdit (nodes/joyimage_nodes.py), today's ComfyUI (comfy_extras/nodes_joyimage.py): each
linked image (`image0`, `image1`, ... order, one image each) resized (bilinear, centre crop) to the JoyImage
bucket of the nearest aspect ratio, seen by the vision tower and, with a VAE, appended as a reference
latent; on the tiny Qwen3-VL CLIP loaded as CLIPLoader type "joyimage"."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from nodes.errors import NodeInputError
from nodes.joyimage_nodes import BUCKETS_1024, best_bucket, text_encode_joyimage_edit
from tests.fixtures.clips import one_thread  # noqa: F401  (module-wide one-thread torch)

PROMPT = "Change the background to a glacial scene."


@pytest.fixture(scope="module")
def clip(tmp_path_factory):
    from comfy_core.split import load_text_encoders
    from tests.fixtures.qwen3vl_files import write_tiny_qwen3vl

    path = write_tiny_qwen3vl(tmp_path_factory.mktemp("joy_te") / "qwen3vl_8b_joyimage_edit.safetensors",
                              dtype=torch.float32, seed=3)
    return load_text_encoders([path], "joyimage")


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
        return torch.full((pixels.shape[0], 16, 1, pixels.shape[1] // 8, pixels.shape[2] // 8), float(pixels.mean()))

    def decode(self, latent):
        raise AssertionError("not used")


def _image(height, width, channels=3, seed=0, batch=1):
    return torch.rand(batch, height, width, channels, generator=torch.Generator().manual_seed(seed))


def test_the_bucket_is_the_nearest_aspect_ratio():
    assert best_bucket(1000, 1000) == (1024, 1024)
    assert best_bucket(300, 900) == (576, 1728)  # 1/3
    assert best_bucket(2000, 500) == (2048, 512)  # beyond the tallest bucket
    assert best_bucket(720, 1280) == (768, 1344)  # 0.5625 -> 0.5714 is nearest
    assert all(h % 64 == 0 and w % 64 == 0 for h, w in BUCKETS_1024) and len(BUCKETS_1024) == 49


def test_images_in_number_order_at_their_buckets_for_the_tower_and_the_vae(clip, calls):
    first, second = _image(30, 90, seed=1), _image(64, 64, channels=4, seed=2)
    vae = RecordingVAE()
    (conditioning,) = text_encode_joyimage_edit(clip, PROMPT, vae=vae,
                                                images={"image1": second, "image0": first, "image2": None})
    ((text, kwargs),) = calls
    assert text == PROMPT and [tuple(i.shape) for i in kwargs["images"]] == [(1, 576, 1728, 3), (1, 1024, 1024, 3)]
    # 30x90 is 1:3 like its bucket (no crop); the square keeps its alpha out
    expected = F.interpolate(first.movedim(-1, 1), size=(576, 1728), mode="bilinear").movedim(1, -1)
    assert torch.allclose(kwargs["images"][0], expected)
    assert torch.allclose(kwargs["images"][1],
                          F.interpolate(second.movedim(-1, 1), size=(1024, 1024), mode="bilinear").movedim(1, -1)[..., :3])
    assert [tuple(p.shape) for p in vae.seen] == [(1, 576, 1728, 3), (1, 1024, 1024, 3)]
    references = conditioning[0][1]["reference_latents"]
    assert [tuple(r.shape) for r in references] == [(1, 16, 1, 72, 216), (1, 16, 1, 128, 128)]
    assert conditioning[0][0].shape[-1] == 64 and "attention_mask" in conditioning[0][1]


def test_a_wide_image_is_centre_cropped_to_its_bucket(clip, calls):
    image = _image(100, 130, seed=4)  # aspect 0.769 -> the (896, 1152) bucket (0.778): a centre crop, then resized
    (conditioning,) = text_encode_joyimage_edit(clip, "", images={"image0": image})
    ((_text, kwargs),) = calls
    (seen,) = kwargs["images"]
    assert tuple(seen.shape) == (1, 896, 1152, 3)
    assert "reference_latents" not in conditioning[0][1]  # no VAE: the tower alone sees the image


def test_no_images_is_the_text_template(clip, calls):
    (conditioning,) = text_encode_joyimage_edit(clip, PROMPT)
    ((_text, kwargs),) = calls
    assert kwargs["images"] == [] and "reference_latents" not in conditioning[0][1]


def test_a_batch_per_socket_is_refused(clip):
    with pytest.raises(NodeInputError, match="images.image0"):
        text_encode_joyimage_edit(clip, PROMPT, images={"image0": _image(32, 32, batch=2)})


def test_a_clip_without_a_vision_tower_is_refused(tmp_path):
    from comfy_core.split import load_text_encoders
    from tests.fixtures.qwen3_files import write_qwen3_file

    path = tmp_path / "qwen_3_4b.safetensors"
    write_qwen3_file(path)
    plain = load_text_encoders([path], "lumina2")
    with pytest.raises(NodeInputError, match="clip"):
        text_encode_joyimage_edit(plain, PROMPT, images={"image0": _image(32, 32)})
