"""LTX-2's text connectors (`Embeddings1DConnector`, learnable registers, 1-D split RoPE) against
diffusers' `LTX2ConnectorTransformer1d` (0.42.1), on the tiny file's connector weights; and
`preprocess_text_embeds` (the two connectors side by side)."""
from __future__ import annotations

import pytest
import torch

from comfy_core.families.ltx2.dit import LTXAVInputError
from tests.comfy_core.test_ltx2_dit import _load
from tests.fixtures.ltx2_files import CAPTION, CONNECTOR_HEAD_DIM, CONNECTOR_HEADS, REGISTERS, to_diffusers_connector

connectors = pytest.importorskip("diffusers.pipelines.ltx2.connectors")


def _reference(bare, side):
    ref = connectors.LTX2ConnectorTransformer1d(
        num_attention_heads=CONNECTOR_HEADS, attention_head_dim=CONNECTOR_HEAD_DIM, num_layers=2,
        num_learnable_registers=REGISTERS, rope_base_seq_len=4096, rope_double_precision=True,
        rope_type="split").eval()
    ref.load_state_dict(to_diffusers_connector(bare, side), strict=True)
    return ref


def _additive(mask):
    return ((mask - 1).to(torch.float32) * torch.finfo(torch.float32).max).view(mask.shape[0], 1, 1, -1)


@pytest.mark.parametrize("side", ["video", "audio"])
def test_connector_with_left_padding_matches_diffusers(tmp_path, side):
    model, bare, _ = _load(tmp_path, "2.0")
    ours = getattr(model, f"{side}_embeddings_connector")
    ref = _reference(bare, side)
    x = torch.randn(2, 8, CAPTION, generator=torch.Generator().manual_seed(7))
    mask = torch.tensor([[0, 0, 0, 1, 1, 1, 1, 1], [1, 1, 1, 1, 1, 1, 1, 1]])  # Gemma pads on the left
    with torch.no_grad():
        out, out_mask = ours(x, mask)
        want = ref(x, _additive(mask))[0]
    assert out_mask is None
    assert torch.allclose(out, want, atol=1e-4), (out - want).abs().max()


def test_connector_without_mask_appends_registers(tmp_path):
    model, bare, _ = _load(tmp_path, "2.0")
    ours = model.video_embeddings_connector
    ref = _reference(bare, "video")
    x = torch.randn(1, 6, CAPTION, generator=torch.Generator().manual_seed(8))
    padded = torch.cat([x, torch.zeros(1, 2, CAPTION)], dim=1)
    mask = torch.tensor([[1, 1, 1, 1, 1, 1, 0, 0]])
    with torch.no_grad():
        out, _ = ours(x)
        want = ref(padded, _additive(mask))[0]
    assert out.shape == (1, 8, CAPTION)  # 6 tokens -> 2 blocks of 4 registers' positions
    assert torch.allclose(out, want, atol=1e-4)


def test_connector_rejects_a_length_not_a_multiple_of_the_registers(tmp_path):
    model, _, _ = _load(tmp_path, "2.0")
    with pytest.raises(ValueError, match="registers"):
        model.video_embeddings_connector(torch.zeros(1, 6, CAPTION), torch.ones(1, 6))


def test_preprocess_text_embeds_runs_both_connectors(tmp_path):
    model, _, _ = _load(tmp_path, "2.0")
    states = torch.randn(1, 4, CAPTION, generator=torch.Generator().manual_seed(9))
    with torch.no_grad():
        out = model.preprocess_text_embeds(states)
        video = model.video_embeddings_connector(states)[0]
        audio = model.audio_embeddings_connector(states)[0]
        again = model.preprocess_text_embeds(out)
    assert out.shape == (1, 4, 2 * CAPTION)
    assert torch.equal(out, torch.cat([video, audio], dim=-1))
    assert again is out  # already processed: passed through
    with pytest.raises(LTXAVInputError, match="wide"):
        model.preprocess_text_embeds(torch.zeros(1, 4, CAPTION + 1))
