"""SeedVR2's processing around the sampler (comfy_core/families/seedvr2/processing.py) and its colour
corrections (color_fix.py), against what ComfyUI's nodes_seedvr.py / color_fix.py do, restated here:
padding to 16 and to 4n + 1 frames, the alignment and alpha of the post-processing, the wavelet
split, AdaIN's statistics, CIELAB conversions and histogram matching, and the temporal chunks."""
from __future__ import annotations

import math

import pytest
import torch

from comfy_core.families.seedvr2 import color_fix
from comfy_core.families.seedvr2.processing import (SeedVR2ProcessingError, auto_frames_per_chunk, crossfade_weights,
                                                    merge_chunks, postprocess, preprocess, temporal_chunks)


@pytest.mark.parametrize("frames, padded", [(1, 1), (2, 5), (4, 5), (5, 5), (6, 9), (9, 9), (10, 13)])
def test_preprocess_pads_frames_to_4n_plus_1_with_the_last_frame(frames, padded):
    images = torch.rand(frames, 20, 30, 4)
    out = preprocess(images)
    assert out.shape == (1, padded, 32, 32, 3)
    torch.testing.assert_close(out[0, :frames, :20, :30], images[..., :3])
    assert float(out[0, :, 20:].abs().max()) == 0.0 and float(out[0, :, :, 30:].abs().max()) == 0.0
    for extra in range(frames, padded):
        torch.testing.assert_close(out[0, extra], out[0, frames - 1])


def test_preprocess_clamps_and_refuses_a_one_pixel_side():
    out = preprocess(torch.full((1, 16, 16, 3), 2.0))
    assert float(out.max()) == 1.0
    with pytest.raises(SeedVR2ProcessingError, match="at least 2 pixels"):
        preprocess(torch.rand(1, 1, 16, 3))


def test_postprocess_none_crops_to_the_reference_and_reattaches_its_alpha():
    decoded = torch.rand(5, 32, 32, 3)  # the padded, 4n + 1 decode
    reference = torch.rand(3, 21, 27, 4)
    out = postprocess(decoded, reference, "none")
    assert out.shape == (3, 20, 26, 4)  # even sides
    torch.testing.assert_close(out[..., :3], decoded[:3, :20, :26])
    torch.testing.assert_close(out[..., 3:], reference[:, :20, :26, 3:])


@pytest.mark.parametrize("method", ["lab", "wavelet", "adain"])
def test_postprocess_corrects_colour_towards_the_reference(method):
    torch.manual_seed(0)
    reference = torch.rand(1, 32, 32, 3) * 0.3 + 0.5
    decoded = (reference * 0.5).clamp(0, 1)  # a darker copy
    out = postprocess(decoded, reference, method)
    assert out.shape == (1, 32, 32, 3)
    assert abs(float(out.mean() - reference.mean())) < 0.5 * abs(float(decoded.mean() - reference.mean()))


def test_the_wavelet_split_adds_back_up_and_blurs_with_the_binomial_kernel():
    torch.manual_seed(1)
    image = torch.rand(1, 3, 40, 40)
    high, low = color_fix.wavelet_split(image)
    torch.testing.assert_close(high + low, image, atol=1e-6, rtol=1e-6)
    blurred = color_fix.wavelet_blur(image, 1)
    padded = torch.nn.functional.pad(image, (1, 1, 1, 1), mode="replicate")
    want = sum(w * padded[:, :, 1 + dy:41 + dy, 1 + dx:41 + dx]
               for dy, wy in ((-1, 1), (0, 2), (1, 1)) for dx, wx in ((-1, 1), (0, 2), (1, 1)) for w in [wy * wx / 16])
    torch.testing.assert_close(blurred, want)
    # the dilation is capped at an eighth of the shorter side (5 here), so radius 16 blurs as 5
    torch.testing.assert_close(color_fix.wavelet_blur(image, 16), color_fix.wavelet_blur(image, 5))


def test_the_wavelet_transfer_keeps_the_contents_detail_and_the_references_colour():
    torch.manual_seed(2)
    content = torch.rand(1, 3, 32, 32) * 0.2 - 0.5
    reference = torch.full((1, 3, 32, 32), 0.3)
    out = color_fix.wavelet_color_transfer(content, reference)
    high, _ = color_fix.wavelet_split(content)
    torch.testing.assert_close(out, (high + 0.3).clamp(-1, 1))
    torch.testing.assert_close(color_fix.wavelet_color_transfer(content, content), content, atol=1e-6, rtol=1e-6)


def test_adain_matches_each_channels_mean_and_deviation():
    torch.manual_seed(3)
    content = torch.rand(2, 3, 16, 16) * 0.4 - 0.2
    reference = torch.rand(2, 3, 16, 16) * 0.6
    out = color_fix.adain_color_transfer(content, reference)
    torch.testing.assert_close(out.mean((2, 3)), reference.mean((2, 3)), atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(out.std((2, 3), unbiased=False), reference.std((2, 3), unbiased=False),
                               atol=1e-4, rtol=1e-4)


def test_cielab_of_known_colours_and_back():
    rgb = torch.tensor([[1.0, 1.0, 1.0], [1.0, 0.0, 0.0], [0.0, 0.0, 0.0]]).T.reshape(1, 3, 3, 1)
    lab = color_fix.rgb_to_lab(rgb)[0, :, :, 0].T
    torch.testing.assert_close(lab[0], torch.tensor([100.0, 0.0, 0.0]), atol=2e-2, rtol=0)
    torch.testing.assert_close(lab[1], torch.tensor([53.24, 80.09, 67.20]), atol=5e-2, rtol=0)
    torch.testing.assert_close(lab[2], torch.tensor([0.0, 0.0, 0.0]), atol=1e-3, rtol=0)
    torch.manual_seed(4)
    image = torch.rand(1, 3, 8, 8)
    torch.testing.assert_close(color_fix.lab_to_rgb(color_fix.rgb_to_lab(image)), image, atol=1e-4, rtol=1e-4)


def test_histogram_matching_gives_each_value_the_reference_value_of_its_rank():
    source = torch.tensor([3.0, 1.0, 2.0, 5.0])
    reference = torch.tensor([40.0, 10.0, 30.0, 20.0])
    torch.testing.assert_close(color_fix.match_histogram(source, reference), torch.tensor([30.0, 10.0, 20.0, 40.0]))
    # different counts: the reference's sorted values at evenly spaced quantiles
    out = color_fix.match_histogram(torch.tensor([2.0, 0.0, 1.0]), torch.tensor([5.0, 1.0, 3.0, 2.0, 4.0]))
    torch.testing.assert_close(out, torch.tensor([5.0, 1.0, 3.0]))


def test_lab_transfer_of_an_image_onto_itself_changes_little():
    torch.manual_seed(5)
    image = torch.rand(1, 3, 24, 24) * 2 - 1
    torch.testing.assert_close(color_fix.lab_color_transfer(image, image), image, atol=2e-3, rtol=0)


def test_crossfade_weights_hold_fall_as_a_half_cosine_then_rest():
    w = crossfade_weights(7)
    t = torch.linspace(0, 1, 7)
    want = torch.where(t <= 1 / 3, torch.ones(7), torch.where(t >= 2 / 3, torch.zeros(7),
                                                              0.5 + 0.5 * torch.cos(math.pi * (3 * t - 1))))
    torch.testing.assert_close(w, want)


def test_chunks_overlap_and_merge_back_to_the_latent():
    samples = torch.randn(1, 16, 7, 2, 2)
    chunks, overlap = temporal_chunks({"samples": samples}, 2, 13)  # 4 latent frames a chunk
    assert overlap == 2 and [c["samples"].shape[2] for c in chunks] == [4, 4, 3]
    torch.testing.assert_close(chunks[1]["samples"], samples[:, :, 2:6])
    merged = merge_chunks(chunks, overlap)
    torch.testing.assert_close(merged["samples"], samples)


def test_merging_crossfades_the_overlap_and_concatenates_without_one():
    a, b = torch.zeros(1, 16, 4, 1, 1), torch.ones(1, 16, 4, 1, 1)
    merged = merge_chunks([{"samples": a}, {"samples": b}], 3)["samples"]
    assert merged.shape[2] == 5
    torch.testing.assert_close(merged[0, 0, 1:4, 0, 0], 1.0 - crossfade_weights(3))
    torch.testing.assert_close(merge_chunks([{"samples": a}, {"samples": b}], 0)["samples"], torch.cat((a, b), 2))


def test_one_chunk_when_it_covers_the_clip_and_bad_sizes_refused():
    latent = {"samples": torch.zeros(1, 16, 3, 2, 2)}
    chunks, overlap = temporal_chunks(latent, 5, 9)
    assert chunks == [latent] and overlap == 0
    with pytest.raises(SeedVR2ProcessingError, match="4n\\+1"):
        temporal_chunks(latent, 0, 6)
    with pytest.raises(SeedVR2ProcessingError, match="16 latent channels"):
        temporal_chunks({"samples": torch.zeros(1, 4, 3, 2, 2)}, 0, 5)


def test_the_automatic_chunk_follows_comfyuis_memory_law():
    samples = torch.zeros(1, 16, 31, 90, 160)  # 121 frames at 1280x720 (0.92 MP)
    assert auto_frames_per_chunk(samples, None) == 121
    free = int(24 * 1024 ** 3)
    mpx = 720 * 1280 / 1e6
    latent = max(1, int((24 - 8.5 - 4 * 0.55) / (0.55 * mpx)))
    assert auto_frames_per_chunk(samples, free) == min(4 * (latent - 1) + 1, 121)
