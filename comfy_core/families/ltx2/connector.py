"""LTX-2's text connectors: the two `Embeddings1DConnector` networks (video, audio) that turn the
Gemma 3 features into each stream's text states, stored in the diffusion model's file as
`video_embeddings_connector.*` / `audio_embeddings_connector.*`.

After Lightricks' LTX-2 (`ltx_core/text_encoders/gemma/embeddings_connector.py`) and ComfyUI's
`comfy/ldm/lightricks/embeddings_connector.py`; written here. Each connector is a stack of
pre-RMS-norm blocks (self-attention with q/k RMS norms and 1-D RoPE over the token index divided by
`connector_positional_embedding_max_pos`, then a tanh-GELU feed-forward, both residual, no
modulation) and a final RMS norm. With learnable registers (`learnable_registers` `[R, width]`),
the padded positions are replaced first: the valid tokens are moved to the front and every later
position `i` takes register `i mod R`, after which nothing is masked. Without a mask, every token
is valid and the sequence is extended with registers to a whole number of register blocks (at
least one block), as ComfyUI's connector does for the unpadded states its Gemma encoder returns.
"""
from __future__ import annotations

import math
from typing import Any

import torch
from torch import nn

from comfy_core.families.ltx2.layers import Attention, FeedForward
from comfy_core.families.ltx2.rope import rope_table
from comfy_core.families.ltxv.dit import rms_norm

CONNECTOR_DEFAULTS = {"connector_attention_head_dim": 128, "connector_num_attention_heads": 30,
                      "connector_num_layers": 2, "connector_num_learnable_registers": 128,
                      "connector_positional_embedding_max_pos": [4096], "connector_apply_gated_attention": False}


class _Block1D(nn.Module):
    def __init__(self, dim: int, heads: int, dim_head: int, gated: bool, ops: Any, factory: dict[str, Any]) -> None:
        super().__init__()
        self.attn1 = Attention(dim, None, heads, dim_head, gated, ops, factory)
        self.ff = FeedForward(dim, ops, factory)

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None, pe: Any) -> torch.Tensor:
        x = x + self.attn1(rms_norm(x), mask=mask, pe=pe)
        return x + self.ff(rms_norm(x))


class Embeddings1DConnector(nn.Module):
    """One connector (see the module doc): `[B, L, width]` (+ mask `[B, L]`, 1 valid) -> (`[B, L', width]`, mask)."""

    def __init__(self, attention_head_dim: int = 128, num_attention_heads: int = 30, num_layers: int = 2,
                 num_learnable_registers: int | None = 128, positional_embedding_max_pos: list[int] | None = None,
                 split_rope: bool = False, double_precision_rope: bool = False, apply_gated_attention: bool = False,
                 ops: Any = None, factory: dict[str, Any] | None = None) -> None:
        super().__init__()
        from comfy_core.models.unet_blocks import operations_or_default

        ops = operations_or_default(ops)
        factory = factory or {}
        self.heads = num_attention_heads
        self.inner_dim = num_attention_heads * attention_head_dim
        self.max_pos = list(positional_embedding_max_pos or [4096])
        self.split_rope, self.double_precision_rope = split_rope, double_precision_rope
        self.transformer_1d_blocks = nn.ModuleList([
            _Block1D(self.inner_dim, num_attention_heads, attention_head_dim, apply_gated_attention, ops, factory)
            for _ in range(num_layers)])
        self.num_learnable_registers = num_learnable_registers or 0
        self.learnable_registers = (nn.Parameter(torch.empty(self.num_learnable_registers, self.inner_dim, **factory))
                                    if self.num_learnable_registers else None)

    def _registers(self, x: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
        count = self.num_learnable_registers
        b, length, width = x.shape
        if mask is None:
            total = max(1, math.ceil(length / count)) * count
            valid = torch.full((b, 1), length, device=x.device)
            x = torch.cat([x, x.new_zeros(b, total - length, width)], dim=1)
            length = total
        else:
            if length % count:
                raise ValueError(f"LTX-2 connector: {length} tokens are not a whole number of {count} registers")
            keep = (mask > 0).to(torch.int64)  # [B, L]
            order = torch.argsort(1 - keep, dim=1, stable=True)  # valid tokens first, in order
            x = torch.gather(x, 1, order.unsqueeze(-1).expand(-1, -1, width))
            valid = keep.sum(dim=1, keepdim=True)
        registers = self.learnable_registers.to(x).repeat(length // count, 1)  # [L, width]
        front = torch.arange(length, device=x.device).unsqueeze(0) < valid  # [B, L]
        return torch.where(front.unsqueeze(-1), x, registers.unsqueeze(0))

    def forward(self, x: torch.Tensor, attention_mask: torch.Tensor | None = None) -> tuple[torch.Tensor, Any]:
        bias = None
        if self.learnable_registers is not None:
            x = self._registers(x, attention_mask)
            attention_mask = None
        elif attention_mask is not None:
            bias = ((attention_mask.to(x.dtype) - 1) * torch.finfo(x.dtype).max).view(x.shape[0], 1, 1, -1)
        positions = torch.arange(x.shape[1], dtype=torch.float32, device=x.device)[None, None].expand(x.shape[0], 1, -1)
        pe = rope_table(positions, self.inner_dim, 10000.0, self.max_pos, self.split_rope, self.heads,
                        self.double_precision_rope, False, x.dtype)
        for block in self.transformer_1d_blocks:
            x = block(x, bias, pe)
        return rms_norm(x), attention_mask


def build_connectors(config: Any, ops: Any, factory: dict[str, Any]) -> tuple[Embeddings1DConnector, Embeddings1DConnector]:
    """The video and audio connectors of an `LTXAVConfig` (its `connector` options over
    `CONNECTOR_DEFAULTS`; the audio one may have its own head count / width)."""
    options = {**CONNECTOR_DEFAULTS, **config.connector}
    common = dict(num_layers=options["connector_num_layers"],
                  num_learnable_registers=options["connector_num_learnable_registers"],
                  positional_embedding_max_pos=options["connector_positional_embedding_max_pos"],
                  split_rope=config.rope_type == "split", double_precision_rope=True,
                  apply_gated_attention=options["connector_apply_gated_attention"], ops=ops, factory=factory)
    video = Embeddings1DConnector(options["connector_attention_head_dim"], options["connector_num_attention_heads"],
                                  **common)
    audio = Embeddings1DConnector(options.get("audio_connector_attention_head_dim", options["connector_attention_head_dim"]),
                                  options.get("audio_connector_num_attention_heads",
                                              options["connector_num_attention_heads"]), **common)
    return video, audio
