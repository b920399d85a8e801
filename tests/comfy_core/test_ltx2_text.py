"""LTX-2's text feature extractor (per-sample, per-layer masked mean / range normalization and the
`aggregate_embed` projection) against diffusers' `per_layer_masked_mean_norm` (0.42.1), fed by the
Gemma 3 tower's hidden states."""
from __future__ import annotations

import pytest
import torch

from comfy_core.families.ltx2.text import TextEmbeddingProjection, masked_layer_norm
from comfy_core.text_encoders.gemma3 import build_gemma3_encoder
from tests.comfy_core.test_gemma3_encoder import _tiny

connectors = pytest.importorskip("diffusers.pipelines.ltx2.connectors")


def test_normalization_matches_diffusers_with_left_padding():
    g = torch.Generator().manual_seed(0)
    states = [torch.randn(2, 7, 5, generator=g) * (i + 1) for i in range(4)]
    mask = torch.tensor([[1] * 7, [0, 0, 1, 1, 1, 1, 1]])
    ours = masked_layer_norm(states, mask)
    theirs = connectors.per_layer_masked_mean_norm(torch.stack(states, dim=-1), mask.sum(-1), "cpu", "left")
    assert ours.shape == (2, 7, 20)
    assert torch.allclose(ours, theirs, atol=1e-6)
    assert torch.equal(ours[1, :2], torch.zeros(2, 20))  # padded tokens are zero


def test_padding_does_not_change_the_valid_features():
    g = torch.Generator().manual_seed(1)
    states = [torch.randn(1, 5, 4, generator=g) for _ in range(3)]
    padded = [torch.cat([torch.randn(1, 2, 4, generator=g) * 100, s], dim=1) for s in states]
    plain = masked_layer_norm(states, torch.ones(1, 5))
    masked = masked_layer_norm(padded, torch.tensor([[0, 0, 1, 1, 1, 1, 1]]))
    assert torch.allclose(plain, masked[:, 2:], atol=1e-6)


def test_projection_over_gemma3_states():
    config, _, state = _tiny(1024)
    encoder = build_gemma3_encoder(config, state)
    ids = torch.randint(0, 300, (1, 6), generator=torch.Generator().manual_seed(2))
    mask = torch.ones(1, 6, dtype=torch.long)
    layers = config.num_layers + 1
    weight = torch.randn(32, 32 * layers, generator=torch.Generator().manual_seed(3)) / 30
    projection = TextEmbeddingProjection.from_weights({"text_embedding_projection.aggregate_embed.weight": weight},
                                                      width=32)
    with torch.no_grad():
        states = encoder.hidden_states(ids, mask)
        out = projection(states, mask)
    want = connectors.per_layer_masked_mean_norm(torch.stack(states, -1), mask.sum(-1), "cpu", "left") @ weight.T
    assert out.shape == (1, 6, 32) and torch.allclose(out, want, atol=1e-5)
    with pytest.raises(ValueError, match="layers"):
        projection(states[:-1], mask)
    with pytest.raises(KeyError, match="aggregate_embed"):
        TextEmbeddingProjection.from_weights({})
