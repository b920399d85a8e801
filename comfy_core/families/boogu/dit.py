"""Boogu-Image 0.1's diffusion transformer and `BooguConfig` read from weights.

Boogu-Image (Boogu 2026, huggingface.co/Boogu/Boogu-Image-0.1) is an OmniGen2 derivative
(`comfy_core/families/omnigen2/dit.py`, whose blocks are reused here): the same text / noise /
reference embedders and refiners, the same RoPE over (index, row, col) and the same output norm,
with a dual-stream stage put before the single-stream layers (ComfyUI's `comfy/ldm/boogu/model.py`,
`BooguTransformer2DModel`, read for behaviour and rewritten here):

- the refined text (the instruction, `L` tokens) and the refined image sequence `[references,
  image]` go through `double_stream_layers`; each block runs
  - a joint attention over `[instruction ; image]` (`img_instruct_attn`): per-stream q / k / v
    (`processor.instruct_to_*`, `processor.img_to_*`), the shared per-head RMS norms `norm_q` /
    `norm_k`, RoPE at the joint positions, grouped key/value heads, then per-stream output
    projections (`processor.instruct_out`, `processor.img_out`) and the shared `to_out.0` on both;
  - an image-only self-attention (`img_self_attn`, OmniGen2's attention) at the image positions;
  - each stream's modulation from three (image) / two (instruction) zero-initialised RMS norms
    (`img_norm1..3`, `instruct_norm1..2`: `norm(x) * (1 + a)` and three more rows of `linear(silu(t))`):
    with `n1, g_attn, s_mlp, g_mlp = norm1(x, t)`, `n2, shift_mlp = norm2(x, t)[:2]` and
    `n3, g_self = norm3(x, t)[:2]`:
    `x += tanh(g_attn) * attn_norm(joint)`; (image) `x += tanh(g_self) * self_attn_norm(self_attn(n3))`;
    `x += tanh(g_mlp) * ffn_norm2(ffn(ffn_norm1((1 + s_mlp) * n2 + shift_mlp)))`;
- then `[instruction, image]` through `single_stream_layers` (OmniGen2's modulated blocks) and
  `norm_out`; the network runs on `1 - sigma` and returns the negated prediction, as OmniGen2.

The forward arguments are ComfyUI's (`forward(x, timesteps, context, num_tokens, ref_latents=None,
attention_mask=None, ...)`). As OmniGen2 here, a padded text (a mask that masks tokens) is refused:
the joint positions count every text state.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

import torch
from torch import nn

from comfy_core.attention import calling
from comfy_core.attention.rope import rotate_pairs
from comfy_core.families.omnigen2.dit import (FREQUENCY_DIM, Attention, FeedForward, ModulatedNorm, OmniGen2Config,
                                              OmniGen2Transformer)
from comfy_core.families.zimage.nextdit import RMSNorm
from comfy_core.models.comfyui_names import comfyui_name
from comfy_core.models.unet_blocks import operations_or_default
from comfy_core.models.weight_shapes import count_numbered, shape_reader

AXES_LENS = (2048, 1664, 1664)  # ComfyUI's constructor default (not used by the forward pass)


class BooguConfigError(ValueError):
    """The Boogu weights are incomplete or inconsistent, or the parameters are impossible."""


class BooguInputError(ValueError):
    """Inputs the Boogu network cannot take (too many references, a masked text, bad shapes)."""


@dataclass(frozen=True)
class BooguConfig(OmniGen2Config):
    """OmniGen2's structure plus the dual-stream depth (the release: 3360 wide, 28 query heads of
    120 sharing 7 key/value heads, 8 double-stream and 32 single-stream layers, 2 refiner blocks
    per stream, 4096-wide Qwen3-VL states). `num_layers` counts the single-stream layers."""

    hidden_size: int = 3360
    num_attention_heads: int = 28
    num_double_stream_layers: int = 8
    text_feat_dim: int = 4096
    axes_lens: tuple[int, ...] = AXES_LENS

    def comfy_unet_config(self) -> dict[str, Any]:
        """ComfyUI's `unet_config` of this model (`BooguTransformer2DModel`'s arguments)."""
        out = super().comfy_unet_config()
        out["image_model"] = "boogu"
        out["num_double_stream_layers"] = self.num_double_stream_layers
        out["instruction_feat_dim"] = out.pop("text_feat_dim")
        return out

    @classmethod
    def detect_from_weights(cls, tensors: Mapping[str, Any], prefix: str = "") -> "BooguConfig":
        """The structure from names and shapes under `prefix` (ComfyUI's layout); what the weights
        cannot show is OmniGen2's (2x2 patches, RoPE base 10000 over head thirds, timestep scale 1000)."""
        shape = shape_reader(tensors, prefix, BooguConfigError, "Boogu")
        hidden, x_in = shape("x_embedder.weight")
        patch = 2
        if shape("ref_image_patch_embedder.weight") != (hidden, x_in) or x_in % (patch * patch):
            raise BooguConfigError(f"Boogu: ref_image_patch_embedder / x_embedder shapes {shape('x_embedder.weight')} "
                                   "are not one width of 2x2 patches")
        caption_out, text_feat_dim = shape("time_caption_embed.caption_embedder.1.weight")
        t_hidden, frequency = shape("time_caption_embed.timestep_embedder.linear_1.weight")
        if caption_out != hidden or frequency != FREQUENCY_DIM:
            raise BooguConfigError(f"Boogu: caption embedder gives {caption_out} (width {hidden}) or the timestep "
                                   f"embedder takes {frequency} (expected {FREQUENCY_DIM})")
        head_dim = shape("single_stream_layers.0.attn.norm_q.weight")[0]
        q_rows = shape("single_stream_layers.0.attn.to_q.weight")[0]
        k_rows = shape("single_stream_layers.0.attn.to_k.weight")[0]
        if head_dim <= 0 or q_rows != hidden or hidden % head_dim or k_rows % head_dim or head_dim % 6:
            raise BooguConfigError(f"Boogu: to_q / to_k give {q_rows} / {k_rows} rows for a width of {hidden} and "
                                   f"heads of {head_dim} (three even RoPE axes needed)")
        joint_k = shape("double_stream_layers.0.img_instruct_attn.processor.img_to_k.weight")[0]
        if joint_k != k_rows:
            raise BooguConfigError(f"Boogu: the joint attention's keys are {joint_k} wide, the layers' {k_rows}")
        out_rows = shape("norm_out.linear_2.weight")[0]
        index_rows, index_width = shape("image_index_embedding")
        if out_rows % (patch * patch) or index_width != hidden:
            raise BooguConfigError(f"Boogu: norm_out gives {out_rows} outputs or image_index_embedding is "
                                   f"{index_width} wide (width {hidden})")
        refiners = {group: count_numbered(tensors, prefix, group, BooguConfigError, "Boogu")
                    for group in ("noise_refiner", "ref_image_refiner", "context_refiner")}
        if len(set(refiners.values())) != 1:
            raise BooguConfigError(f"Boogu: refiner depths differ: {refiners}")
        third = head_dim // 3
        return cls(patch_size=patch, in_channels=x_in // (patch * patch), out_channels=out_rows // (patch * patch),
                   hidden_size=hidden,
                   num_layers=count_numbered(tensors, prefix, "single_stream_layers", BooguConfigError, "Boogu"),
                   num_double_stream_layers=count_numbered(tensors, prefix, "double_stream_layers", BooguConfigError,
                                                           "Boogu"),
                   num_refiner_layers=refiners["noise_refiner"], num_attention_heads=hidden // head_dim,
                   num_kv_heads=k_rows // head_dim,
                   ffn_hidden=shape("single_stream_layers.0.feed_forward.linear_1.weight")[0],
                   text_feat_dim=text_feat_dim, t_hidden=t_hidden, index_embeddings=index_rows,
                   axes_dim_rope=(third, third, third))


class JointProcessor(nn.Module):
    """The dual-stream attention's per-stream projections (ComfyUI's `processor.*` names)."""

    def __init__(self, config: BooguConfig, factory: dict[str, Any], ops: Any) -> None:
        super().__init__()
        width, kv = config.num_attention_heads * config.head_dim, config.num_kv_heads * config.head_dim
        for stream in ("img", "instruct"):
            setattr(self, f"{stream}_to_q", ops.Linear(width, width, bias=False, **factory))
            setattr(self, f"{stream}_to_k", ops.Linear(width, kv, bias=False, **factory))
            setattr(self, f"{stream}_to_v", ops.Linear(width, kv, bias=False, **factory))
        self.instruct_out = ops.Linear(width, width, bias=False, **factory)
        self.img_out = ops.Linear(width, width, bias=False, **factory)


class JointAttention(nn.Module):
    """Attention over `[instruction ; image]` with per-stream projections and shared q / k norms and
    output projection (see the module doc)."""

    def __init__(self, config: BooguConfig, factory: dict[str, Any], ops: Any) -> None:
        super().__init__()
        d = config.head_dim
        self.heads, self.kv_heads, self.head_dim = config.num_attention_heads, config.num_kv_heads, d
        self.norm_q = RMSNorm(d, 1e-5, **factory)
        self.norm_k = RMSNorm(d, 1e-5, **factory)
        self.to_out = nn.ModuleList([ops.Linear(self.heads * d, config.hidden_size, bias=False, **factory)])
        self.processor = JointProcessor(config, factory, ops)

    def forward(self, img: torch.Tensor, text: torch.Tensor, freqs: torch.Tensor,
                options: Mapping[str, Any]) -> torch.Tensor:
        """img `[B, Li, dim]`, text `[B, Lt, dim]`, freqs for `[text, img]` -> `[B, Lt + Li, dim]`."""
        p, d = self.processor, self.head_dim
        b, lt = text.shape[0], text.shape[1]
        q = torch.cat([p.instruct_to_q(text), p.img_to_q(img)], dim=1)
        k = torch.cat([p.instruct_to_k(text), p.img_to_k(img)], dim=1)
        v = torch.cat([p.instruct_to_v(text), p.img_to_v(img)], dim=1)
        q = self.norm_q(q.view(b, -1, self.heads, d))  # [B, L, H, D]
        k = self.norm_k(k.view(b, -1, self.kv_heads, d))
        v = v.view(b, -1, self.kv_heads, d)
        q = rotate_pairs(q, freqs, q.dtype, fused=False)
        k = rotate_pairs(k, freqs, k.dtype, fused=False)
        q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)  # [B, H, L, D]
        if self.kv_heads < self.heads:
            rep = self.heads // self.kv_heads
            k = k.repeat_interleave(rep, dim=1)
            v = v.repeat_interleave(rep, dim=1)
        out = calling.attend(q, k, v, self.heads, skip_reshape=True, transformer_options=options)  # [B, L, H*D]
        out = torch.cat([p.instruct_out(out[:, :lt]), p.img_out(out[:, lt:])], dim=1)
        return self.to_out[0](out)


class DoubleStreamBlock(nn.Module):
    """One dual-stream block (ComfyUI's `BooguDoubleStreamBlock`; see the module doc)."""

    def __init__(self, config: BooguConfig, factory: dict[str, Any], ops: Any) -> None:
        super().__init__()
        dim, eps, t_hidden = config.hidden_size, config.norm_eps, config.t_hidden
        self.img_instruct_attn = JointAttention(config, factory, ops)
        self.img_self_attn = Attention(config, factory, ops)
        self.img_feed_forward = FeedForward(dim, config.ffn_hidden, factory, ops)
        self.instruct_feed_forward = FeedForward(dim, config.ffn_hidden, factory, ops)
        for name in ("img_norm1", "img_norm2", "img_norm3", "instruct_norm1", "instruct_norm2"):
            setattr(self, name, ModulatedNorm(dim, t_hidden, eps, factory, ops))
        for name in ("img_attn_norm", "img_self_attn_norm", "img_ffn_norm1", "img_ffn_norm2",
                     "instruct_attn_norm", "instruct_ffn_norm1", "instruct_ffn_norm2"):
            setattr(self, name, RMSNorm(dim, eps, **factory))

    def _mlp(self, stream: str, x: torch.Tensor, temb: torch.Tensor, scale: torch.Tensor, gate: torch.Tensor
             ) -> torch.Tensor:
        normed, shift = getattr(self, f"{stream}_norm2")(x, temb)[:2]
        hidden = (1 + scale[:, None]) * normed + shift[:, None]
        out = getattr(self, f"{stream}_feed_forward")(getattr(self, f"{stream}_ffn_norm1")(hidden))
        return gate[:, None].tanh() * getattr(self, f"{stream}_ffn_norm2")(out)

    def forward(self, img: torch.Tensor, text: torch.Tensor, joint_freqs: torch.Tensor, img_freqs: torch.Tensor,
                temb: torch.Tensor, options: Mapping[str, Any]) -> tuple[torch.Tensor, torch.Tensor]:
        lt = text.shape[1]
        img_n1, img_g_attn, img_s_mlp, img_g_mlp = self.img_norm1(img, temb)
        img_n3, img_g_self = self.img_norm3(img, temb)[:2]
        txt_n1, txt_g_attn, txt_s_mlp, txt_g_mlp = self.instruct_norm1(text, temb)
        joint = self.img_instruct_attn(img_n1, txt_n1, joint_freqs, options)  # [B, Lt + Li, dim]
        self_attn = self.img_self_attn(img_n3, img_freqs, options)
        img_out = img + img_g_attn[:, None].tanh() * self.img_attn_norm(joint[:, lt:])
        img_out = img_out + img_g_self[:, None].tanh() * self.img_self_attn_norm(self_attn)
        img_out = img_out + self._mlp("img", img, temb, img_s_mlp, img_g_mlp)
        text_out = text + txt_g_attn[:, None].tanh() * self.instruct_attn_norm(joint[:, :lt])
        text_out = text_out + self._mlp("instruct", text, temb, txt_s_mlp, txt_g_mlp)
        return img_out, text_out


@comfyui_name("BooguTransformer2DModel")
class BooguTransformer(OmniGen2Transformer):
    """Boogu-Image's transformer: OmniGen2's embedders, refiners and output norm, the dual-stream
    stage, then the single-stream layers (see the module doc)."""

    label = "Boogu"
    input_error = BooguInputError

    def __init__(self, config: BooguConfig, dtype: Any = None, device: Any = None, operations: Any = None) -> None:
        super().__init__(config, dtype=dtype, device=device, operations=operations)
        ops = operations_or_default(operations)
        factory = {"dtype": dtype, "device": device}
        self.double_stream_layers = nn.ModuleList(DoubleStreamBlock(config, factory, ops)
                                                  for _ in range(config.num_double_stream_layers))
        # OmniGen2's `layers` are Boogu's single-stream layers, under ComfyUI's name for them.
        self.single_stream_layers = self._modules.pop("layers")

    def _joint(self, text: torch.Tensor, img: torch.Tensor, freqs: torch.Tensor, temb: torch.Tensor,
               options: dict) -> torch.Tensor:
        """The dual-stream blocks on the text and image tokens apart (`freqs` split at the text),
        then the single-stream blocks on them joined (OmniGen2's forward does the rest)."""
        text_len = text.shape[1]
        image_freqs = freqs[:, text_len:]  # [references, image]
        for block in self.double_stream_layers:
            img, text = block(img, text, freqs, image_freqs, temb, options)
        seq = torch.cat([text, img], dim=1)
        for block in self.single_stream_layers:
            seq = block(seq, freqs, temb, transformer_options=options)
        return seq

__all__ = ["BooguConfig", "BooguConfigError", "BooguInputError", "BooguTransformer"]
