"""The nested LATENT (comfy_core/latent/nested.py): ComfyUI's NestedTensor API, packing and its
refusals; prepare_mask of a 1-D part; a nested latent left as it is by the empty-latent fit."""
from __future__ import annotations

import pytest
import torch

from comfy_core.latent.nested import (NestedLatentError, NestedTensor, cat_nested, is_nested, pack_latents,
                                      unpack_latents)
from comfy_core.sampling.guider import fit_empty_latent, prepare_mask


def _pair(seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(2, 3, 2, 2, 2, generator=g), torch.randn(2, 8, 4, 16, generator=g)


def test_api_answers_as_comfyuis_class():
    video, audio = _pair()
    nt = NestedTensor((video, audio))
    assert nt.is_nested and is_nested(nt) and not is_nested(video) and video.is_nested is False
    assert nt.unbind()[0] is video and nt.unbind()[1] is audio  # the parts themselves, in order
    assert nt.shape == video.shape and nt.size() == video.size() and nt.ndim == 5
    assert nt.dtype == torch.float32 and nt.device == video.device and nt.layout == torch.strided
    assert nt.new_ones((2,)).dtype == video.dtype
    assert [t.dtype for t in nt.to(torch.float16).unbind()] == [torch.float16] * 2
    assert [t.dtype for t in nt.to(torch.float16).float().unbind()] == [torch.float32] * 2
    assert nt.cpu().unbind()[1].device.type == "cpu"


def test_arithmetic_is_part_by_part():
    video, audio = _pair()
    other = NestedTensor(_pair(1))
    nt = NestedTensor([video, audio])
    for got, want in (((nt + other).unbind(), (video + other.tensors[0], audio + other.tensors[1])),
                      ((nt - 1.5).unbind(), (video - 1.5, audio - 1.5)),
                      ((nt * other).unbind(), (video * other.tensors[0], audio * other.tensors[1])),
                      ((nt / 2).unbind(), (video / 2, audio / 2)),
                      (nt[:1].unbind(), (video[:1], audio[:1]))):
        assert all(torch.equal(a, b) for a, b in zip(got, want))
    halves = nt.chunk(2)
    assert len(halves) == 2 and torch.equal(halves[1].unbind()[1], audio[1:])
    joined = cat_nested([nt, nt], dim=0)
    assert joined.unbind()[0].shape[0] == 4 and torch.equal(joined.unbind()[1][2:], audio)
    with pytest.raises(NestedLatentError, match="parts combined"):
        nt + NestedTensor([video])


def test_pack_and_unpack_are_inverse_and_refuse_what_does_not_fit():
    video, audio = _pair()
    packed, shapes = pack_latents([video, audio])
    assert packed.shape == (2, 1, 24 + 512) and shapes == [[2, 3, 2, 2, 2], [2, 8, 4, 16]]
    assert torch.equal(packed[0, 0, :24], video[0].flatten()) and torch.equal(packed[1, 0, 24:], audio[1].flatten())
    again = unpack_latents(packed, shapes)
    assert torch.equal(again[0], video) and torch.equal(again[1], audio)
    # a CFG batch (twice the rows) unpacks with the run's shapes
    doubled = unpack_latents(torch.cat([packed, packed]), shapes)
    assert doubled[1].shape == (4, 8, 4, 16)
    assert unpack_latents(video, [video.shape])[0] is video  # one latent that was never packed
    with pytest.raises(NestedLatentError, match="does not hold"):
        unpack_latents(packed[..., :-1], shapes)
    with pytest.raises(NestedLatentError, match="batch sizes"):
        pack_latents([video, audio[:1]])
    with pytest.raises(NestedLatentError, match="not a tensor"):
        NestedTensor([video, "audio"])
    with pytest.raises(NestedLatentError, match="at least one"):
        NestedTensor([])


def test_masks_of_1d_parts_and_the_empty_latent_fit():
    mask = prepare_mask(torch.tensor([[0.0, 1.0]]), [2, 3, 4], "cpu")  # [B?, n] -> [B, C, n], linear
    assert mask.shape == (2, 3, 4) and torch.equal(mask[1, 2], torch.tensor([0.0, 0.25, 0.75, 1.0]))
    nt = NestedTensor([torch.zeros(1, 4, 2, 2), torch.zeros(1, 8, 3, 16)])
    fmt = type("Fmt", (), {"latent_channels": 16, "latent_dimensions": 3})()
    assert fit_empty_latent(fmt, nt) is nt  # parts are not widened (ComfyUI returns a nested latent as it is)


def test_conditioning_on_a_packed_latent():
    from comfy_core.models.model_sampling import FlowModelSampling
    from comfy_core.sampling.conditioning import ConditioningError, convert_cond, prepare_conds

    packed, shapes = pack_latents(list(_pair()))
    seen = {}

    def extra_inputs(**params):
        seen.update(params)
        return {"latent_shapes": params["latent_shapes"]}

    conds = {"positive": convert_cond([[torch.zeros(2, 3, 8), {}]], "positive")}
    out = prepare_conds(conds, packed, FlowModelSampling(), None, extra_inputs=extra_inputs, latent_shapes=shapes)
    assert out["positive"][0]["model_conds"]["latent_shapes"] == shapes
    assert seen["width"] is None and seen["height"] == packed.shape[2] * 8  # ComfyUI's defaults for [B, 1, N]
    masked = {"positive": convert_cond([[torch.zeros(2, 3, 8), {"mask": torch.ones(4, 4)}]], "positive")}
    with pytest.raises(ConditioningError, match="packed nested"):
        prepare_conds(masked, packed, FlowModelSampling(), None, latent_shapes=shapes)
