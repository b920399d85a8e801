"""SAG's recorded attention and blur map, PAG's identity attention and the copy-on-write
attention replacement."""
from __future__ import annotations

import copy

import numpy as np
import torch

from comfy_core.attention import attention, use_backend
from comfy_core.model_patches.options import with_attention_replace
from comfy_core.model_patches.pag import identity_attention
from comfy_core.model_patches.sag import (attention_with_scores, blur_where_attended, gaussian_blur_2d,
                                          self_attention_guidance, token_grid)


def test_attention_with_scores_is_the_naive_backend_bit_for_bit_and_its_map_is_a_softmax() -> None:
    torch.manual_seed(0)
    q, k, v = torch.randn(3, 10, 16), torch.randn(3, 7, 16), torch.randn(3, 7, 16)
    out, probs = attention_with_scores(q, k, v, 2)
    with use_backend("naive"):
        assert torch.equal(out, attention(q, k, v, 2))
    assert probs.shape == (6, 10, 7)
    torch.testing.assert_close(probs.sum(-1), torch.ones(6, 10))
    scores = (q.reshape(3, 10, 2, 8)[:, :, 1] @ k.reshape(3, 7, 2, 8)[:, :, 1].transpose(1, 2)) / 8 ** 0.5
    torch.testing.assert_close(probs[1::2], scores.softmax(-1))  # rows batch-major: (b, head)


def test_gaussian_blur_matches_a_reflect_padded_convolution_computed_here() -> None:
    torch.manual_seed(1)
    img = torch.randn(1, 2, 12, 11)
    xs = np.linspace(-4, 4, 9)
    g = np.exp(-0.5 * (xs / 2.0) ** 2)
    g /= g.sum()
    kernel = np.outer(g, g)
    padded = np.pad(img.numpy().astype(np.float64), ((0, 0), (0, 0), (4, 4), (4, 4)), mode="reflect")
    expected = np.zeros(img.shape)
    for dy in range(9):
        for dx in range(9):
            expected += kernel[dy, dx] * padded[:, :, dy:dy + 12, dx:dx + 11]
    np.testing.assert_allclose(gaussian_blur_2d(img, 9, 2.0).numpy(), expected, atol=1e-5)


def test_blur_map_blurs_only_where_attention_gathers() -> None:
    torch.manual_seed(2)
    x0 = torch.randn(1, 4, 8, 8)
    probs = torch.zeros(2, 4, 4)  # 2 heads, a 2x2 token map; every query attends to token 3
    probs[..., 3] = 1.0
    out = blur_where_attended(x0, probs, 1.5)
    blurred = gaussian_blur_2d(x0, 9, 1.5)
    assert torch.equal(out[..., 4:, 4:], blurred[..., 4:, 4:])  # token 3: the bottom-right quarter
    assert torch.equal(out[..., :4, :], x0[..., :4, :]) and torch.equal(out[..., 4:, :4], x0[..., 4:, :4])
    assert token_grid(4, 8, 8) == (2, 2) and token_grid(6, 16, 24) == (2, 3) and token_grid(1, 5, 5) == (1, 1)


def test_the_sag_recorder_keeps_the_negative_rows_and_the_pair_survives_cloning() -> None:
    torch.manual_seed(3)
    recorder, hook = self_attention_guidance(0.5, 2.0)
    q, k, v = torch.randn(4, 6, 16), torch.randn(4, 6, 16), torch.randn(4, 6, 16)
    out = recorder(q, k, v, {"n_heads": 2, "cond_or_uncond": [0, 1]})  # 2 rows each
    _, probs = attention_with_scores(q, k, v, 2)
    assert torch.equal(hook.store.scores, probs[4:8]) and out.shape == q.shape
    options = copy.deepcopy({"r": recorder, "h": hook})
    assert options["r"].store is options["h"].store  # a patcher clone keeps the two joined
    torch.testing.assert_close(recorder(q, k, v, {"n_heads": 2, "cond_or_uncond": [0, 0]}), attention(q, k, v, 2))


def test_pag_attention_returns_v_and_the_replacement_copies_only_its_path() -> None:
    v = torch.randn(1, 3, 4)
    assert identity_attention(torch.randn(1, 3, 4), torch.randn(1, 3, 4), v, {}) is v
    other = "another patch"
    options = {"transformer_options": {"patches_replace": {"attn1": {("input", 1): other}}, "patches": {}}, "x": 1}
    snapshot = copy.deepcopy(options)
    new = with_attention_replace(options, identity_attention, "attn1", "middle", 0)
    assert new["transformer_options"]["patches_replace"]["attn1"] == {("input", 1): other, ("middle", 0): identity_attention}
    assert options == snapshot and new["x"] == 1
    indexed = with_attention_replace(options, identity_attention, "attn2", "output", 3, 1)
    assert indexed["transformer_options"]["patches_replace"]["attn2"] == {("output", 3, 1): identity_attention}
