"""The gated delta rule: Qwen3.5's linear-attention token mixer (Yang, Kautz, Hatamizadeh 2024,
"Gated Delta Networks: Improving Mamba2 with Delta Rule"), as pure float32 functions.

Each value head keeps a state matrix S [key_dim, value_dim]. For every token t, with the
L2-normalised query q_t and key k_t, the value v_t, the write strength beta_t in (0, 1) and the
log-decay g_t <= 0:

    S   <- exp(g_t) * S                       (gated forgetting, Mamba2's decay)
    S   <- S + k_t (beta_t (v_t - S^T k_t))^T  (the delta rule: move k_t's read-out towards v_t)
    o_t  = S^T q_t / sqrt(key_dim)

This is the recurrent form (one token at a time), exact in the maths; transformers' and ComfyUI's
chunked form (`torch_chunk_gated_delta_rule`, 64-token chunks) computes the same outputs with
another summation order. Decoding carries S across calls, so a prompt run in one call and a
prompt run token by token give the same states.

Before the rule, the projected q/k/v channels pass through a causal depthwise convolution
(kernel K, no bias) and SiLU; `causal_conv` carries the last K - 1 inputs as its state (zeros
before the first token), as the cache holds them between decode steps.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F


def causal_conv(x: torch.Tensor, weight: torch.Tensor, state: torch.Tensor | None
                ) -> tuple[torch.Tensor, torch.Tensor]:
    """x [B, T, C] through the depthwise causal convolution `weight` [C, 1, K] and SiLU ->
    (out [B, T, C] float32, the new state [B, C, K - 1]: the last K - 1 inputs, zeros-padded).
    `state`: the previous call's, None for zeros."""
    batch, length, channels = x.shape
    kernel = weight.shape[-1]
    seq = x.transpose(1, 2).float()  # [B, C, T]
    if state is None:
        state = torch.zeros(batch, channels, kernel - 1, device=x.device, dtype=torch.float32)
    seq = torch.cat([state.to(seq), seq], dim=-1)  # [B, C, K - 1 + T]
    out = F.conv1d(seq, weight.float(), groups=channels)  # [B, C, T]
    return F.silu(out).transpose(1, 2), seq[..., seq.shape[-1] - (kernel - 1):]


def l2_normalize(x: torch.Tensor) -> torch.Tensor:
    """x / max(||x||, 1e-12) over the last axis (ComfyUI's `F.normalize` before the rule)."""
    return F.normalize(x, dim=-1)


def gated_delta_rule(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, g: torch.Tensor, beta: torch.Tensor,
                     state: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """The recurrent gated delta rule (see the module doc).

    q, k [B, T, H, Dk] (already L2-normalised, one per value head), v [B, T, H, Dv], g and beta
    [B, T, H]; `state` [B, H, Dk, Dv] (None: zeros). Returns (out [B, T, H, Dv], the final state),
    float32."""
    batch, length, heads, key_dim = k.shape
    value_dim = v.shape[-1]
    q = q.float() * key_dim ** -0.5
    k, v, g, beta = k.float(), v.float(), g.float(), beta.float()
    if state is None:
        state = torch.zeros(batch, heads, key_dim, value_dim, device=v.device, dtype=torch.float32)
    state = state.float()
    outs = []
    for t in range(length):
        state = state * g[:, t].exp()[..., None, None]
        read = torch.einsum("bhkv,bhk->bhv", state, k[:, t])  # S^T k_t
        delta = (v[:, t] - read) * beta[:, t][..., None]  # [B, H, Dv]
        state = state + k[:, t][..., None] * delta[..., None, :]
        outs.append(torch.einsum("bhkv,bhk->bhv", state, q[:, t]))
    return torch.stack(outs, dim=1), state


__all__ = ["causal_conv", "gated_delta_rule", "l2_normalize"]
