"""ComfyUI's token-weight interpolation as a pure function, with a fake encoder that records its input."""
from __future__ import annotations

import torch

from comfy_core.text_encoders.encoder import first_eos_positions
from comfy_core.text_encoders.weighting import empty_tokens, encode_token_weights, interpolate_from_empty


class FakeEncoder:
    """hidden[b, t, :] = token id (as float) + b; pooled[b] = b. Records what it was asked to encode."""

    def __init__(self):
        self.calls = []

    def __call__(self, rows):
        self.calls.append(rows)
        ids = torch.tensor(rows, dtype=torch.float32)  # [N, T]
        hidden = ids[..., None].repeat(1, 1, 4) + torch.arange(len(rows), dtype=torch.float32)[:, None, None]
        pooled = torch.arange(len(rows), dtype=torch.float32)[:, None].repeat(1, 3)
        return hidden, pooled


def _chunk(ids, weights=None):
    weights = weights or [1.0] * len(ids)
    return list(zip(ids, weights))


def test_empty_tokens():
    assert empty_tokens(6, 0) == [49406, 49407, 0, 0, 0, 0]
    assert empty_tokens(4, 49407) == [49406, 49407, 49407, 49407]


def test_unweighted_chunks_are_encoded_alone():
    encoder = FakeEncoder()
    cond, pooled = encode_token_weights(encoder, [_chunk([1, 2, 3]), _chunk([4, 5, 6])], pad_token=0)
    assert encoder.calls == [[[1, 2, 3], [4, 5, 6]]]  # no empty prompt when no weight differs from 1
    assert cond.shape == (1, 6, 4)
    assert cond[0, :, 0].tolist() == [1, 2, 3, 5, 6, 7]  # chunk 1 is batch row 1 (+1)
    assert pooled.tolist() == [[0, 0, 0]]  # first chunk's pooled


def test_weighted_tokens_interpolate_from_empty():
    encoder = FakeEncoder()
    cond, _ = encode_token_weights(encoder, [_chunk([10, 20, 30], [1.0, 2.0, 0.5])], pad_token=7)
    assert encoder.calls == [[[10, 20, 30], [49406, 49407, 7]]]
    # empty row is batch row 1: values id + 1
    z_empty = [49407.0, 49408.0, 8.0]
    expected = [10.0, (20 - z_empty[1]) * 2 + z_empty[1], (30 - z_empty[2]) * 0.5 + z_empty[2]]
    assert torch.allclose(cond[0, :, 0], torch.tensor(expected))


def test_no_chunks_encodes_the_empty_prompt():
    encoder = FakeEncoder()
    cond, pooled = encode_token_weights(encoder, [], pad_token=0)
    assert encoder.calls == [[[49406, 49407]]]
    assert cond.shape == (1, 2, 4) and pooled.shape == (1, 3)


def test_interpolate_leaves_weight_one_bit_exact():
    z = torch.randn(5, 3)
    z_empty = torch.randn(5, 3)
    weights = torch.tensor([1.0, 1.0, 1.2, 1.0, 0.0])
    out = interpolate_from_empty(z, z_empty, weights)
    assert torch.equal(out[[0, 1, 3]], z[[0, 1, 3]])
    assert torch.equal(out[4], z_empty[4])
    torch.testing.assert_close(out[2], z_empty[2] + (z[2] - z_empty[2]) * 1.2)


def test_first_eos_positions():
    ids = torch.tensor([[49406, 5, 49407, 49407], [49406, 5, 6, 7], [49406, 49407, 0, 0]])
    assert first_eos_positions(ids).tolist() == [2, 3, 1]  # no EOS: the last position


def test_interpolate_many_states_weights_state_j_by_token_j():
    # ComfyUI's loop over a [states, T, W] output (HiDream's Llama, layer "all"): token j's weight
    # moves state j of every token; states past the token count and tokens past the state count keep.
    z = torch.randn(3, 5, 2)
    z_empty = torch.randn(3, 5, 2)
    weights = torch.tensor([1.0, 1.5, 1.0, 2.0, 0.5])
    out = interpolate_from_empty(z, z_empty, weights)
    assert torch.equal(out[0], z[0]) and torch.equal(out[2], z[2])
    torch.testing.assert_close(out[1], z_empty[1] + (z[1] - z_empty[1]) * 1.5)
    z4 = torch.randn(4, 2, 2)
    more_states = interpolate_from_empty(z4, torch.zeros(4, 2, 2), torch.tensor([1.0, 3.0]))
    assert torch.equal(more_states[[0, 2, 3]], z4[[0, 2, 3]])
    torch.testing.assert_close(more_states[1], 3 * z4[1])
