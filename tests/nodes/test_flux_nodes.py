"""FluxGuidance, FluxDisableGuidance, CLIPTextEncodeFlux, FluxKontextImageScale,
FluxKontextMultiReferenceLatentMethod and ReferenceLatent: ComfyUI 0.3.64's semantics on
conditioning values, a recording CLIP, and images resized as an independent Pillow run does."""
from __future__ import annotations

import numpy as np
import pytest
import torch
from PIL import Image

from graph.native import spec_of
from graph.object_info import node_info
from nodes import flux_nodes as fx
from nodes.errors import NodeInputError
from tests.fixtures.object_info_parity import comfyui_object_info, node_differences


def _conditioning() -> list:
    return [[torch.ones(1, 3, 8), {"pooled_output": torch.zeros(1, 8), "guidance": 1.0}],
            [torch.zeros(1, 2, 8), {"strength": 0.5}]]


class RecordingClip:
    """A CLIP whose tokens name the text they came from; records what it is asked to encode."""

    def __init__(self, keys=("l", "t5xxl")) -> None:
        self.keys = keys
        self.encoded: list = []

    def tokenize(self, text: str) -> dict:
        return {key: [[(f"{key}:{text}", 1.0)]] for key in self.keys}

    def encode_from_tokens(self, tokens, return_pooled=False):  # noqa: ANN001, ANN201
        raise AssertionError("CLIPTextEncodeFlux encodes scheduled")

    def encode_from_tokens_scheduled(self, tokens, add_dict=None):  # noqa: ANN001, ANN201
        self.encoded.append((tokens, add_dict))
        return [[torch.zeros(1, 4, 8), {"pooled_output": torch.zeros(1, 8), **(add_dict or {})}]]


def test_flux_guidance_sets_every_entry_and_leaves_the_input_alone():
    conditioning = _conditioning()
    (out,) = fx.flux_guidance(conditioning, 4.5)
    assert [options["guidance"] for _, options in out] == [4.5, 4.5]
    assert out[1][1]["strength"] == 0.5 and out[0][0] is conditioning[0][0]
    assert conditioning[0][1]["guidance"] == 1.0 and "guidance" not in conditioning[1][1]
    (off,) = fx.flux_disable_guidance(out)
    assert [("guidance" in options, options["guidance"]) for _, options in off] == [(True, None), (True, None)]
    assert out[0][1]["guidance"] == 4.5
    with pytest.raises(NodeInputError, match="guidance"):
        fx.flux_guidance(conditioning, "3.5")
    with pytest.raises(NodeInputError, match="conditioning"):
        fx.flux_disable_guidance({"not": "a list"})


def test_clip_text_encode_flux_gives_t5_its_own_text_and_adds_guidance():
    clip = RecordingClip()
    (out,) = fx.clip_text_encode_flux(clip, "a cat", "a cat on a mat, photo", 2.0)
    ((tokens, add),) = clip.encoded
    assert tokens == {"l": [[("l:a cat", 1.0)]], "t5xxl": [[("t5xxl:a cat on a mat, photo", 1.0)]]}
    assert add == {"guidance": 2.0} and out[0][1]["guidance"] == 2.0
    with pytest.raises(NodeInputError, match="T5-XXL"):
        fx.clip_text_encode_flux(RecordingClip(keys=("l",)), "a", "b", 3.5)


@pytest.mark.parametrize("size, expected", [
    ((1024, 1024), (1024, 1024)), ((1920, 1080), (1392, 752)), ((512, 768), (832, 1248)),
    ((600, 800), (880, 1184)), ((3000, 1000), (1568, 672)), ((1000, 3000), (672, 1568)), ((80, 60), (1184, 880)),
])
def test_kontext_resolution_is_the_nearest_aspect_ratio(size, expected):
    assert fx.kontext_resolution(*size) == expected


def _pillow_resized(image: torch.Tensor, box: tuple[int, int, int, int], size: tuple[int, int]) -> torch.Tensor:
    """The independent expectation: Pillow crop + Lanczos on the uint8 pixels, back to 0..1."""
    pixels = (image[0].numpy() * 255).round().astype(np.uint8)
    resized = Image.fromarray(pixels).crop(box).resize(size, resample=Image.Resampling.LANCZOS)
    return torch.from_numpy(np.asarray(resized).astype(np.float32) / 255.0)[None]


def test_kontext_image_scale_crops_to_the_ratio_and_resizes_with_lanczos():
    g = torch.Generator().manual_seed(0)
    image = torch.randint(0, 256, (1, 40, 100, 3), generator=g).float() / 255.0  # exact uint8 levels
    (out,) = fx.flux_kontext_image_scale(image)
    assert out.shape == (1, 672, 1568, 3)
    # aspect 2.5 -> 1568x672 (2.33): round((100 - 100 * 2.33 / 2.5) / 2) = 3 columns cut on each side
    torch.testing.assert_close(out, _pillow_resized(image, (3, 0, 97, 40), (1568, 672)), rtol=0, atol=1e-6)
    with pytest.raises(NodeInputError, match="image"):
        fx.flux_kontext_image_scale(torch.zeros(40, 100, 3))


def test_multi_reference_method_is_set_with_comfyuis_names():
    (out,) = fx.flux_kontext_multi_reference_latent_method(_conditioning(), "uxo/uno")
    assert [options["reference_latents_method"] for _, options in out] == ["uxo", "uxo"]
    (out,) = fx.flux_kontext_multi_reference_latent_method(_conditioning(), "index_timestep_zero")  # today's
    assert out[0][1]["reference_latents_method"] == "index_timestep_zero"
    (out,) = fx.flux_kontext_multi_reference_latent_method(_conditioning(), "index")
    assert out[0][1]["reference_latents_method"] == "index" and out[0][1]["guidance"] == 1.0
    with pytest.raises(NodeInputError, match="reference_latents_method"):
        fx.flux_kontext_multi_reference_latent_method(_conditioning(), "uno")


def test_reference_latents_are_appended_not_replaced():
    first, second = torch.zeros(1, 16, 4, 4), torch.ones(1, 16, 2, 6)
    conditioning = _conditioning()
    (one,) = fx.reference_latent(conditioning, {"samples": first})
    (two,) = fx.reference_latent(one, {"samples": second})
    for _, options in two:
        assert len(options["reference_latents"]) == 2
        assert options["reference_latents"][0] is first and options["reference_latents"][1] is second
    assert [len(options["reference_latents"]) for _, options in one] == [1, 1]  # the first output kept
    assert all("reference_latents" not in options for _, options in conditioning)
    assert fx.reference_latent(conditioning)[0] is conditioning  # no latent: unchanged
    with pytest.raises(NodeInputError, match="latent"):
        fx.reference_latent(conditioning, {"samples": "x"})


def test_set_values_appends_as_comfyuis_helper():
    conditioning = [[torch.zeros(1), {"a": [1]}], [torch.zeros(1), {}]]
    out = fx.set_values(conditioning, {"a": [2]}, append=True)
    assert [options["a"] for _, options in out] == [[1, 2], [2]] and conditioning[0][1]["a"] == [1]
    assert fx.set_values(conditioning, {"a": [2]})[0][1]["a"] == [2]


@pytest.mark.parametrize("fn", [fx.flux_guidance, fx.flux_disable_guidance, fx.clip_text_encode_flux,
                                fx.flux_kontext_image_scale, fx.flux_kontext_multi_reference_latent_method,
                                fx.reference_latent])
def test_object_info_is_comfyuis(fn):
    spec = spec_of(fn)
    theirs = comfyui_object_info()[spec.node_id]
    ours = node_info(spec)
    assert node_differences(spec.node_id, ours, theirs) == []
    assert bool(ours.get("experimental")) == theirs["experimental"] and ours["description"] == theirs["description"]
