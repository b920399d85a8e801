"""The LTX-Video nodes (nodes/ltxv_nodes.py): latent shapes, frame rate, image-to-video latents and
masks, guides (positions, masks, attention entries, IC-LoRA dilation, negative indices, cropping
them off), LTXVScheduler / ModelSamplingLTXV's token-dependent shift, LTXVPreprocess's H.264
round trip, and typed errors for bad input."""
from __future__ import annotations

import math

import pytest
import torch

from comfy_core.loading import load_vae
from nodes import ltxv_nodes as lt
from nodes.errors import NodeInputError
from tests.fixtures.ltxv_files import write_tiny_ltxv_vae


@pytest.fixture(scope="module")
def vae(tmp_path_factory):
    return load_vae(write_tiny_ltxv_vae(tmp_path_factory.mktemp("vae") / "vae.safetensors", "0.9.0"))


def _cond(value: float = 1.0):
    return [[torch.full((1, 4, 64), value), {"pooled_output": None}]]


def test_empty_latent_and_conditioning():
    (latent,) = lt.empty_ltxv_latent_video(96, 64, 17, 2)
    assert latent["samples"].shape == (2, 128, 3, 2, 3) and latent["downscale_ratio_spacial"] == 32
    positive, negative = lt.ltxv_conditioning(_cond(), _cond(2.0), 24.0)
    assert positive[0][1]["frame_rate"] == 24.0 and negative[0][1]["frame_rate"] == 24.0
    with pytest.raises(NodeInputError):
        lt.ltxv_conditioning("x", _cond(), 25.0)


def test_img_to_video_puts_the_image_first_and_masks_it(vae):
    image = torch.rand(1, 40, 70, 3, generator=torch.Generator().manual_seed(0))
    positive, negative, latent = lt.ltxv_img_to_video(_cond(), _cond(), vae, image, 64, 64, 17, 2, 0.75)
    samples, mask = latent["samples"], latent["noise_mask"]
    assert samples.shape == (2, 128, 3, 2, 2) and mask.shape == (2, 1, 3, 1, 1)
    from comfy_core.latent.video import fit_frames
    expected = vae.encode(fit_frames(image, 64, 64))
    assert torch.allclose(samples[:, :, :1], expected.expand(2, -1, -1, -1, -1), atol=1e-5)
    assert torch.equal(samples[:, :, 1:], torch.zeros_like(samples[:, :, 1:]))
    assert torch.allclose(mask[:, 0, :, 0, 0], torch.tensor([[0.25, 1.0, 1.0]] * 2))
    (inplace,) = lt.ltxv_img_to_video_inplace(vae, image, {"samples": torch.ones(1, 128, 3, 2, 2)}, 1.0)
    assert torch.allclose(inplace["samples"][:, :, :1], expected, atol=1e-5)
    assert torch.equal(inplace["samples"][:, :, 1:], torch.ones(1, 128, 2, 2, 2))
    assert torch.equal(inplace["noise_mask"][0, 0, :, 0, 0], torch.tensor([0.0, 1.0, 1.0]))
    given = {"samples": torch.zeros(1, 128, 3, 2, 2)}
    assert lt.ltxv_img_to_video_inplace(vae, image, given, 1.0, bypass=True)[0] is given
    with pytest.raises(NodeInputError, match="latent frames"):  # 17 frames of images for a 1-frame video
        lt.ltxv_img_to_video_inplace(vae, torch.rand(17, 64, 64, 3), {"samples": torch.zeros(1, 128, 1, 2, 2)}, 1.0)


def test_add_guide_appends_frames_positions_and_entries(vae):
    latent = {"samples": torch.zeros(1, 128, 3, 2, 2)}
    image = torch.rand(1, 64, 64, 3, generator=torch.Generator().manual_seed(1))
    positive, negative, out = lt.ltxv_add_guide(_cond(), _cond(), vae, latent, image, frame_idx=9, strength=0.6)
    samples, mask = out["samples"], out["noise_mask"]
    assert samples.shape == (1, 128, 4, 2, 2) and mask.shape == (1, 1, 4, 1, 1)
    assert torch.allclose(mask[0, 0, :, 0, 0], torch.tensor([1.0, 1.0, 1.0, 0.4]))
    assert torch.allclose(samples[:, :, 3:], vae.encode(image), atol=1e-5)
    keyframes = positive[0][1]["keyframe_idxs"]
    assert keyframes.shape == (1, 3, 4, 2)
    # one image frame: causal fix (time 8 * 0 + 1 - 8 clamped to 0) then moved to frame 9; ends one latent step on
    assert torch.equal(keyframes[0, 0, :, 0], torch.full((4,), 9)) and torch.equal(keyframes[0, 0, :, 1], torch.full((4,), 10))
    assert torch.equal(keyframes[0, 1, :, 0], torch.tensor([0, 0, 32, 32]))
    assert torch.equal(keyframes[0, 2, :, 1], torch.tensor([32, 64, 32, 64]))
    entry = positive[0][1]["guide_attention_entries"]
    assert entry == [{"pre_filter_count": 4, "strength": 0.6, "pixel_mask": None, "latent_shape": [1, 2, 2]}]
    assert negative[0][1]["guide_attention_entries"] == entry
    # a second guide, counted from the end: the appended frame is not a video frame
    positive2, _, out2 = lt.ltxv_add_guide(positive, negative, vae, out, image, frame_idx=-1, strength=1.0)
    assert out2["samples"].shape[2] == 5
    assert positive2[0][1]["keyframe_idxs"].shape[2] == 8
    assert torch.equal(positive2[0][1]["keyframe_idxs"][0, 0, 4:, 0], torch.full((4,), 16))  # (3 - 1) * 8 + 1 - 1
    assert lt.keyframe_count(positive2, out2["samples"].shape)[1] == 2
    cropped_pos, cropped_neg, cropped = lt.ltxv_crop_guides(positive2, negative, out2)
    assert cropped["samples"].shape == (1, 128, 3, 2, 2) and cropped["noise_mask"].shape == (1, 1, 3, 1, 1)
    assert cropped_pos[0][1]["keyframe_idxs"] is None and cropped_pos[0][1]["guide_attention_entries"] is None
    untouched = lt.ltxv_crop_guides(_cond(), _cond(), latent)[2]
    assert untouched["samples"].shape == (1, 128, 3, 2, 2)


def test_add_guide_dilates_ic_lora_references(vae):
    latent = {"samples": torch.zeros(1, 128, 2, 2, 2)}
    image = torch.rand(1, 32, 32, 3, generator=torch.Generator().manual_seed(2))
    positive, _, out = lt.ltxv_add_guide(_cond(), _cond(), vae, latent, image, 0, 1.0,
                                         iclora_parameters={"reference_downscale_factor": 2})
    mask = out["noise_mask"]
    assert out["samples"].shape == (1, 128, 3, 2, 2) and mask.shape == (1, 1, 3, 2, 2)
    assert torch.equal(mask[0, 0, 2], torch.tensor([[0.0, -2.0], [-2.0, -2.0]]))  # token kept, padding dropped
    keyframes = positive[0][1]["keyframe_idxs"]
    assert torch.equal(keyframes[0, 1, 0], torch.tensor([0, 64]))  # the end spans the reference's larger patch
    assert positive[0][1]["guide_attention_entries"][0]["latent_shape"] == [1, 1, 1]
    with pytest.raises(NodeInputError, match="reference_downscale_factor"):
        lt.ltxv_add_guide(_cond(), _cond(), vae, {"samples": torch.zeros(1, 128, 2, 3, 3)}, image, 0, 1.0,
                          iclora_parameters={"reference_downscale_factor": 2})
    with pytest.raises(NodeInputError, match="frame_idx"):
        lt.ltxv_add_guide(_cond(), _cond(), vae, latent, image, 9999, 1.0)


def test_scheduler_and_model_sampling_shift():
    (sigmas,) = lt.ltxv_scheduler(4, 2.05, 0.95, True, 0.1)
    mu = 4096 * (1.1 / 3072) + 0.95 - (1.1 / 3072) * 1024  # 2.05 at 4096 tokens
    raw = [math.exp(mu) / (math.exp(mu) + (1 / s - 1)) for s in (1.0, 0.75, 0.5, 0.25)]
    scale = (1 - raw[-1]) / 0.9
    expected = torch.tensor([1 - (1 - r) / scale for r in raw] + [0.0])
    assert torch.allclose(sigmas, expected, atol=1e-6) and abs(float(sigmas[-2]) - 0.1) < 1e-6
    (plain,) = lt.ltxv_scheduler(4, 2.05, 0.95, False, 0.1)
    assert torch.allclose(plain[:-1], torch.tensor(raw), atol=1e-6)
    small = {"samples": torch.zeros(1, 128, 4, 16, 16)}  # 1024 tokens: base_shift
    assert abs(lt.token_shift(small, 2.05, 0.95) - 0.95) < 1e-9
    (with_latent,) = lt.ltxv_scheduler(4, 2.05, 0.95, False, 0.1, small)
    assert not torch.allclose(with_latent, plain)

    class Model:
        def __init__(self):
            self.patches = {}
            self.model = object()

        def clone(self):
            return Model()

        def add_object_patch(self, name, value):
            self.patches[name] = value

    (patched,) = lt.model_sampling_ltxv(Model(), 2.05, 0.95, small)
    sampling = patched.patches["model_sampling"]
    assert type(sampling).__name__ == "FluxModelSampling" and abs(sampling.shift - 0.95) < 1e-9


def test_preprocess_round_trips_through_h264():
    image = torch.rand(2, 33, 47, 3, generator=torch.Generator().manual_seed(3))
    (same,) = lt.ltxv_preprocess(image, 0)
    assert torch.equal(same, image)
    (compressed,) = lt.ltxv_preprocess(image, 35)
    assert compressed.shape == (2, 32, 46, 3)  # even sides for 4:2:0
    assert not torch.allclose(compressed, image[:, :32, :46], atol=1e-3)
    assert float((compressed - image[:, :32, :46]).abs().mean()) < 0.35
    with pytest.raises(NodeInputError):
        lt.ltxv_preprocess(image, 101)


def test_add_latent_guide_places_and_dilates(vae):
    latent = {"samples": torch.zeros(1, 128, 3, 2, 2)}
    guide = {"samples": torch.ones(1, 128, 1, 1, 1)}
    positive, negative, out = lt.ltxv_add_latent_guide(_cond(), _cond(), vae, latent, guide, 2, 0.5)
    assert out["samples"].shape == (1, 128, 4, 2, 2)
    assert torch.equal(out["samples"][0, 0, 3], torch.tensor([[1.0, 0.0], [0.0, 0.0]]))  # dilated x2
    assert torch.equal(out["noise_mask"][0, 0, 3], torch.tensor([[0.5, -1.5], [-1.5, -1.5]]))
    keyframes = positive[0][1]["keyframe_idxs"]
    # latent frame 2 is pixel frame 1 + 8; a one-frame guide is causal-fixed (end 8 + 1 - 8 = 1, moved by 9)
    assert keyframes[0, 0, 0].tolist() == [9, 10]
    assert keyframes[0, 1, 0].tolist() == [0, 64]  # the end spans the dilated guide's larger patch
    first_pos, _, first = lt.ltxv_add_latent_guide(_cond(), _cond(), vae, latent,
                                                   {"samples": torch.ones(1, 128, 1, 2, 2)}, 0, 1.0)
    assert lt.keyframe_count(first_pos, first["samples"].shape)[1] == 1
    assert first_pos[0][1]["keyframe_idxs"][0, :, :, 0].tolist() == [[0, 0, 0, 0], [0, 0, 32, 32], [0, 32, 0, 32]]
    with pytest.raises(NodeInputError, match="latent_idx"):
        lt.ltxv_add_latent_guide(_cond(), _cond(), vae, latent, guide, 3, 1.0)
    with pytest.raises(NodeInputError, match="same size ratio"):
        lt.ltxv_add_latent_guide(_cond(), _cond(), vae, {"samples": torch.zeros(1, 128, 3, 2, 4)}, guide, 0, 1.0)


def test_stg_hook_is_inert_outside_its_range_and_without_blocks():
    hook = lt.SpatioTemporalGuidance(frozenset({1}), 1.0, 0.875, 0.25)
    denoised = torch.randn(1, 4)
    for sigma in (0.9375, 0.25):  # above the start, at the (excluded) end (both exact in float32)
        assert hook({"denoised": denoised, "sigma": torch.tensor([sigma])}) is denoised
    assert lt.SpatioTemporalGuidance(frozenset(), 1.0, 1.0, 0.0)({"denoised": denoised, "sigma": torch.tensor([0.5])}) \
        is denoised
    assert hook.cache_signature() == lt.SpatioTemporalGuidance(frozenset({1}), 1.0, 0.875, 0.25).cache_signature()
