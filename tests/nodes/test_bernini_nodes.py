"""BerniniConditioning (nodes/bernini_nodes.py), ComfyUI's `comfy_extras/nodes_bernini.py`: the empty
16-channel latent, the streams written into both conditionings as `context_latents` in ComfyUI's
order (source video resized to the canvas with a centre crop and cut to `length`, reference video
and each reference-image slot image by image at their own aspect, long edge capped and snapped to
16), nothing written without streams, inputs left as they were, the pixel-frame guard. The VAE here
records what it is given; the model side is tests/comfy_core/test_bernini.py."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from nodes.bernini_nodes import bernini_conditioning, long_edge_size
from nodes.errors import NodeInputError


class RecordingVAE:
    """A video VAE stand-in: `[N, H, W, 3]` -> `[1, 16, 1 + (N - 1) // 4, H // 8, W // 8]` filled with
    the call's index, every input kept."""

    latent_channels = 16

    def __init__(self) -> None:
        self.given: list[torch.Tensor] = []

    def encode(self, pixels: torch.Tensor) -> torch.Tensor:
        self.given.append(pixels.clone())
        n, h, w, _ = pixels.shape
        return torch.full((1, 16, 1 + (n - 1) // 4, h // 8, w // 8), float(len(self.given)))

    def decode(self, latent: torch.Tensor) -> torch.Tensor:  # pragma: no cover - never called
        raise AssertionError

    def spacial_compression_encode(self) -> int:
        return 8


def _conditioning(seed: int) -> list:
    return [[torch.randn(1, 4, 8, generator=torch.Generator().manual_seed(seed)), {"pooled_output": None}]]


def test_text_to_video_gives_the_empty_latent_and_the_conditionings_as_they_are():
    positive, negative, vae = _conditioning(1), _conditioning(2), RecordingVAE()
    pos, neg, latent = bernini_conditioning(positive, negative, vae, 96, 64, 9, 2)
    assert latent["samples"].shape == (2, 16, 3, 8, 12) and not latent["samples"].any()
    assert "context_latents" not in pos[0][1] and "context_latents" not in neg[0][1] and vae.given == []
    assert torch.equal(pos[0][0], positive[0][0]) and torch.equal(neg[0][0], negative[0][0])


def test_streams_in_order_each_resized_as_comfyui():
    g = torch.Generator().manual_seed(5)
    source = torch.rand(7, 32, 64, 3, generator=g)  # 7 frames, wider than the 32 x 32 canvas
    ref_video = torch.rand(6, 20, 40, 4, generator=g)  # RGBA: the alpha is dropped
    slot_a = torch.rand(2, 100, 300, 3, generator=g)  # two images in one slot: two streams
    slot_b = torch.rand(1, 48, 16, 3, generator=g)
    positive, negative, vae = _conditioning(1), _conditioning(2), RecordingVAE()
    images = {"reference_image_1": slot_b, "reference_image_0": slot_a}
    pos, neg, latent = bernini_conditioning(positive, negative, vae, 32, 32, 5, 1, source_video=source,
                                            reference_video=ref_video, reference_images=images, ref_max_size=64)
    assert latent["samples"].shape == (1, 16, 2, 4, 4)
    given = vae.given
    assert len(given) == 5
    # 1. the source: its first 5 frames, the centred 32 x 32 (columns 16..47), here no resize needed
    torch.testing.assert_close(given[0], source[:5, :, 16:48])
    # 2. the reference video: 20 x 40 -> long edge 40 under 64, snapped: 16 x 32 (20/16 = 1.25 -> 1; 40/16 = 2.5 -> 2,
    #    half to even), area resize of its first 5 frames' RGB
    want = F.interpolate(ref_video[:5, ..., :3].movedim(-1, 1), size=(16, 32), mode="area").movedim(1, -1)
    torch.testing.assert_close(given[1], want)
    # 3. slot reference_image_0 before reference_image_1, each image alone: 100 x 300 -> 64 / 300 -> 21.3 x 64 -> 16 x 64
    for k in range(2):
        want = F.interpolate(slot_a[k:k + 1].movedim(-1, 1), size=(16, 64), mode="area").movedim(1, -1)
        torch.testing.assert_close(given[2 + k], want)
    want = F.interpolate(slot_b.movedim(-1, 1), size=(48, 16), mode="area").movedim(1, -1)  # under the cap: kept
    torch.testing.assert_close(given[4], want)
    for conditioning in (pos, neg):
        streams = conditioning[0][1]["context_latents"]
        assert [float(s[0, 0, 0, 0, 0]) for s in streams] == [1.0, 2.0, 3.0, 4.0, 5.0]
    assert pos[0][1]["context_latents"][0] is neg[0][1]["context_latents"][0]
    assert "context_latents" not in positive[0][1] and "context_latents" not in negative[0][1]  # inputs untouched


def test_an_image_edit_is_a_one_frame_source():
    image = torch.rand(1, 48, 64, 3, generator=torch.Generator().manual_seed(2))
    vae = RecordingVAE()
    pos, _neg, latent = bernini_conditioning(_conditioning(1), _conditioning(2), vae, 64, 48, 1, 1, source_video=image)
    assert latent["samples"].shape == (1, 16, 1, 6, 8)
    torch.testing.assert_close(vae.given[0], image)
    assert [tuple(s.shape) for s in pos[0][1]["context_latents"]] == [(1, 16, 1, 6, 8)]


@pytest.mark.parametrize("height, width, cap, want", [
    (100, 300, 848, (96, 304)),  # never enlarged; 6.25 -> 6, 18.75 -> 19
    (1000, 2000, 848, (416, 848)),  # 26.5 -> 26 (half to even), 53
    (8, 4000, 848, (16, 848)),  # at least 16
    (480, 832, 848, (480, 832)),
])
def test_long_edge_size(height, width, cap, want):
    assert long_edge_size(height, width, cap) == want


def test_bad_inputs_are_typed_errors():
    vae = RecordingVAE()
    with pytest.raises(NodeInputError, match="pixel-frames"):
        bernini_conditioning(_conditioning(1), _conditioning(2), vae, 8192, 8192, 8192, 1)
    with pytest.raises(NodeInputError, match="source_video"):
        bernini_conditioning(_conditioning(1), _conditioning(2), vae, 64, 64, 1, 1, source_video=torch.zeros(3, 3))
    with pytest.raises(NodeInputError, match="reference_image_0"):
        bernini_conditioning(_conditioning(1), _conditioning(2), vae, 64, 64, 1, 1,
                             reference_images={"reference_image_0": "picture"})
    with pytest.raises(NodeInputError, match="vae"):
        bernini_conditioning(_conditioning(1), _conditioning(2), None, 64, 64, 1, 1)
