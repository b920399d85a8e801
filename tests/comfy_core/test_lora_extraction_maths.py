"""LoRA extraction maths (comfy_core/lora/extract.py): ComfyUI's truncated SVD with its outlier
clamp, the shapes for linear and convolution weights, the full-diff and bias forms."""
from __future__ import annotations

import pytest
import torch

from comfy_core.lora.extract import extract_lora, low_rank_factors


def _reference(diff: torch.Tensor, rank: int) -> tuple[torch.Tensor, torch.Tensor]:
    """ComfyUI's recipe written out: U_r·diag(S_r) and V_rᵀ, clamped to ±(0.99 quantile of both)."""
    matrix = diff.float().reshape(diff.shape[0], -1)
    rank = min(rank, diff.shape[0], diff.shape[1])
    u, s, vh = torch.linalg.svd(matrix)
    up, down = u[:, :rank] * s[:rank], vh[:rank]
    q = torch.quantile(torch.cat([up.flatten(), down.flatten()]), 0.99)
    return up.clamp(-q, q), down.clamp(-q, q)


@pytest.mark.parametrize("shape, rank", [((12, 9), 4), ((6, 5, 3, 3), 3), ((8, 4, 1, 1), 16)])
def test_factors_are_the_clamped_truncated_svd(shape, rank):
    diff = torch.randn(*shape, generator=torch.Generator().manual_seed(0))
    up, down = low_rank_factors(diff, rank)
    r = min(rank, shape[0], shape[1])
    if len(shape) == 4:
        assert up.shape == (shape[0], r, 1, 1) and down.shape == (r, shape[1], shape[2], shape[3])
    else:
        assert up.shape == (shape[0], r) and down.shape == (r, shape[1])
    ref_up, ref_down = _reference(diff, rank)
    torch.testing.assert_close(up.reshape(ref_up.shape), ref_up)
    torch.testing.assert_close(down.reshape(ref_down.shape), ref_down)


def test_a_low_rank_difference_is_approximated_better_with_more_rank():
    gen = torch.Generator().manual_seed(1)
    diff = torch.randn(40, 3, generator=gen) @ torch.randn(3, 30, generator=gen)

    def error(rank):
        up, down = low_rank_factors(diff, rank)
        return float((up @ down - diff).norm() / diff.norm())
    # ComfyUI's clamp cuts the largest 1% of factor values (all in U·S here), so even the true rank
    # leaves an error; it still shrinks with the rank.
    assert error(1) > error(2) > error(3)
    assert error(3) < 0.25


def test_extract_forms_and_keys():
    state = {"m.a.weight": torch.randn(6, 4), "m.a.bias": torch.randn(6), "m.norm.weight": torch.randn(6),
             "other.weight": torch.randn(2, 2)}
    standard = extract_lora(state, 2, "standard", False, prefix_model="m.", prefix_lora="x.")
    assert sorted(standard) == ["x.a.lora_down.weight", "x.a.lora_up.weight"]
    assert all(t.dtype == torch.float16 for t in standard.values())
    with_bias = extract_lora(state, 2, "standard", True, prefix_model="m.", prefix_lora="x.")
    assert sorted(with_bias) == ["x.a.diff_b", "x.a.lora_down.weight", "x.a.lora_up.weight", "x.norm.diff"]
    full = extract_lora(state, 2, "full_diff", False, prefix_model="m.", prefix_lora="x.")
    assert sorted(full) == ["x.a.diff", "x.norm.diff"]
    assert torch.equal(full["x.a.diff"], state["m.a.weight"].half())
    with pytest.raises(ValueError, match="lora_type"):
        extract_lora(state, 2, "loha")
