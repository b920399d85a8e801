"""LatentAdd, LatentSubtract, LatentMultiply, LatentInterpolate, LatentConcat, LatentCut,
LatentBatch, LatentBatchSeedBehavior: ComfyUI's semantics (resizing and batch fitting of the
second latent, axis names, clamping, noise indices), other keys carried, typed errors."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from nodes.errors import NodeInputError
from nodes.latent_math import (
    latent_add,
    latent_batch,
    latent_batch_seed_behavior,
    latent_concat,
    latent_cut,
    latent_interpolate,
    latent_multiply,
    latent_subtract,
)


def _ramp(*shape: int) -> torch.Tensor:
    return torch.arange(float(np.prod(shape))).reshape(shape)


def _per_channel(batch: int, values: list[float], height: int, width: int) -> torch.Tensor:
    """Each channel constant (so resizing does not change it); item b is `values + 10 b`."""
    base = torch.tensor(values)[None, :, None, None] + 10.0 * torch.arange(batch)[:, None, None, None]
    return base.expand(batch, len(values), height, width).clone()


# --- Add / Subtract / Multiply -------------------------------------------------------------------

def test_add_fits_the_second_latent_to_the_first_size_and_batch():
    first = _ramp(3, 2, 4, 4)
    second = _per_channel(2, [1.0, 2.0], 6, 10)  # other size; batch 2 tiled to 3 as items 0, 1, 0
    expected = first + second[[0, 1, 0], :, :4, :4]
    out = latent_add({"samples": first, "noise_mask": "kept"}, {"samples": second})[0]
    assert torch.equal(out["samples"], expected) and out["noise_mask"] == "kept"


def test_the_resize_crops_the_centre_to_the_aspect_ratio_first():
    first = torch.zeros(1, 1, 4, 4)
    second = _ramp(1, 1, 4, 8)  # twice as wide: columns 2..5 remain, already 4 x 4
    assert torch.equal(latent_add({"samples": first}, {"samples": second})[0]["samples"], second[..., 2:6])


def test_subtract_cuts_a_longer_batch():
    first, second = _ramp(1, 2, 3, 3), _ramp(3, 2, 3, 3)
    assert torch.equal(latent_subtract({"samples": first}, {"samples": second})[0]["samples"], first - second[:1])


def test_add_refuses_other_channel_counts():
    with pytest.raises(NodeInputError) as info:
        latent_add({"samples": torch.zeros(1, 4, 2, 2)}, {"samples": torch.zeros(1, 16, 2, 2)})
    assert info.value.input_name == "samples2"
    with pytest.raises(NodeInputError) as info:
        latent_add({"samples": torch.zeros(1, 4, 2, 2)}, "latent")
    assert info.value.input_name == "samples2"


def test_multiply_scales_and_keeps_the_input():
    latent = {"samples": _ramp(1, 2, 2, 2), "batch_index": [3]}
    out = latent_multiply(latent, -2.5)[0]
    assert torch.equal(out["samples"], _ramp(1, 2, 2, 2) * -2.5) and out["batch_index"] == [3]
    assert torch.equal(latent["samples"], _ramp(1, 2, 2, 2))


# --- Interpolate ---------------------------------------------------------------------------------

def _interpolate_reference(a: np.ndarray, b: np.ndarray, ratio: float) -> np.ndarray:
    """Per pixel: blend unit directions, renormalise, give the blended length (float64)."""
    out = np.zeros_like(a)
    for index in np.ndindex(a.shape[0], *a.shape[2:]):
        va, vb = a[(index[0], slice(None), *index[1:])], b[(index[0], slice(None), *index[1:])]
        na, nb = np.linalg.norm(va), np.linalg.norm(vb)
        da = va / na if na else 0 * va
        db = vb / nb if nb else 0 * vb
        mixed = da * ratio + db * (1 - ratio)
        nm = np.linalg.norm(mixed)
        out[(index[0], slice(None), *index[1:])] = (mixed / nm if nm else 0 * mixed) * (na * ratio + nb * (1 - ratio))
    return out


def test_interpolate_blends_directions_and_lengths_per_batch_item():
    generator = torch.Generator().manual_seed(0)
    a, b = torch.randn(2, 4, 3, 5, generator=generator), torch.randn(2, 4, 3, 5, generator=generator)
    a[0, :, 0, 0] = 0  # a zero vector has no direction
    out = latent_interpolate({"samples": a}, {"samples": b}, 0.3)[0]["samples"]
    expected = _interpolate_reference(a.double().numpy(), b.double().numpy(), 0.3)
    assert np.allclose(out.numpy(), expected, atol=1e-5)
    assert torch.allclose(latent_interpolate({"samples": a}, {"samples": b}, 1.0)[0]["samples"], a, atol=1e-5)


# --- Concat / Cut --------------------------------------------------------------------------------

@pytest.mark.parametrize("dim, axis, swapped", [("x", 3, False), ("-x", 3, True), ("y", 2, False),
                                                ("-y", 2, True), ("t", 1, False), ("-t", 1, True)])
def test_concat_along_each_axis(dim, axis, swapped):
    first, second = _ramp(2, 2, 3, 4), -_ramp(1, 2, 3, 4)  # second's batch tiled to 2
    second2 = torch.cat([second, second])
    parts = [second2, first] if swapped else [first, second2]
    assert torch.equal(latent_concat({"samples": first}, {"samples": second}, dim)[0]["samples"],
                       torch.cat(parts, dim=axis))


def test_concat_t_on_video_latents_joins_frames():
    first, second = _ramp(1, 16, 3, 4, 4), _ramp(1, 16, 2, 4, 4)
    assert latent_concat({"samples": first}, {"samples": second}, "t")[0]["samples"].shape == (1, 16, 5, 4, 4)


def test_concat_refuses_mismatched_other_axes():
    with pytest.raises(NodeInputError) as info:
        latent_concat({"samples": torch.zeros(1, 4, 3, 4)}, {"samples": torch.zeros(1, 4, 5, 4)}, "x")
    assert info.value.input_name == "samples2"


@pytest.mark.parametrize("index, amount, kept", [(0, 1, [0]), (3, 4, [3, 4, 5]), (50, 2, [5]), (-2, 5, [4, 5]),
                                                 (-100, 3, [0, 1, 2]), (-1, 1, [5])])
def test_cut_clamps_index_and_amount(index, amount, kept):
    latent = _ramp(1, 4, 5, 6)  # x has 6 entries
    assert torch.equal(latent_cut({"samples": latent}, "x", index, amount)[0]["samples"], latent[..., kept])
    video = _ramp(1, 2, 6, 3, 3)  # t (frames) has 6 entries
    assert torch.equal(latent_cut({"samples": video}, "t", index, amount)[0]["samples"], video[:, :, kept])


def test_cut_y_and_t_on_image_latents():
    latent = _ramp(1, 4, 5, 6)
    assert torch.equal(latent_cut({"samples": latent}, "y", 1, 2)[0]["samples"], latent[:, :, 1:3])
    assert torch.equal(latent_cut({"samples": latent}, "t", 1, 2)[0]["samples"], latent[:, 1:3])  # channels
    with pytest.raises(NodeInputError):
        latent_cut({"samples": latent}, "x", 0, 0)


# --- Batch / seed behaviour ----------------------------------------------------------------------

def test_batch_appends_resized_items_with_their_noise_indices():
    first = {"samples": _ramp(1, 2, 4, 4), "batch_index": [5], "noise_mask": "first's"}
    second = {"samples": _per_channel(3, [1.0, 2.0], 8, 8)}
    out = latent_batch(first, second)[0]
    assert torch.equal(out["samples"], torch.cat([first["samples"], second["samples"][..., :4, :4]]))
    assert out["batch_index"] == [5, 0, 1, 2] and out["noise_mask"] == "first's"
    other = latent_batch({"samples": _ramp(2, 2, 4, 4)}, {"samples": _ramp(1, 2, 4, 4), "batch_index": [7]})[0]
    assert other["batch_index"] == [0, 1, 7]


def test_seed_behavior_fixed_gives_every_item_the_first_items_noise():
    samples = _ramp(3, 1, 2, 2)
    fixed = latent_batch_seed_behavior({"samples": samples, "batch_index": [4, 5, 6]}, "fixed")[0]
    assert fixed["batch_index"] == [4, 4, 4]
    assert latent_batch_seed_behavior({"samples": samples}, "fixed")[0]["batch_index"] == [0, 0, 0]
    given = {"samples": samples, "batch_index": [4, 5, 6]}
    assert "batch_index" not in latent_batch_seed_behavior(given, "random")[0]
    assert given["batch_index"] == [4, 5, 6]
    with pytest.raises(NodeInputError):
        latent_batch_seed_behavior(given, "sometimes")
