"""ACE-Step 1's DiT (ACE Studio / StepFun 2025, `models/ace_step_transformer.py` of ace-step/ACE-Step;
ComfyUI 0.3.64's `comfy/ldm/ace/model.py`, `attention.py`): a Sana-style linear-attention
transformer (Xie et al. 2024) over the music DCAE's latent `[B, 8, 16, T]`, written here from the
equations below and ComfyUI's behaviour (the released checkpoint's module names).

One call (`forward`, ComfyUI's arguments):

1. encoder states: `speaker_embedder(speaker_embeds)` (one token; ComfyUI sends zeros),
   `genre_embedder(context)` (the UMT5-base states), and the lyrics: `lyric_embs(tokens)` through
   the Conformer lyric encoder (`lyric_encoder.py`) and `lyric_proj`, times `lyrics_strength`;
   concatenated in that order. ComfyUI passes no masks, so none are used.
2. `proj_in`: a (16, 1) patch convolution (all 16 rows of a latent column -> one token), a
   GroupNorm(32), a 1x1 convolution to the width; tokens `[B, T, W]`.
3. timestep: sinusoidal(256, cos first) -> `timestep_embedder` (Linear, SiLU, Linear) = `e`;
   `t_block` (SiLU, Linear) gives the six block modulations from `e`.
4. blocks (`LinearTransformerBlock`): `h += g1 * LinAttn(RMS(h) * (1 + s1) + b1)`;
   `h += CrossAttn(h, states)`; `h += g2 * GLUMBConv(RMS(h) * (1 + s2) + b2)`, where `b, s, g`
   are `scale_shift_table + t_block(e)` split in six.
   - LinAttn (Katharopoulos et al. 2020, ReLU kernel): `out_i = sum_j v_j (phi(k_j) . phi(q_i)) /
     (sum_j phi(k_j) . phi(q_i) + 1e-15)`, `phi = relu`, after RoPE on q and k, in fp32;
   - CrossAttn: softmax attention from `to_q(h)` to `to_k / to_v(states)`, RoPE on the queries
     (token positions) and keys (state positions); its `add_*_proj` / `to_add_out` weights are
     stored but unused, as in ComfyUI;
   - GLUMBConv: 1x1 conv + SiLU, depthwise k=3 conv, GLU (`x * silu(gate)`), 1x1 conv.
5. final layer: `Linear(RMS(h) * (1 + s) + b)` with `b, s = table + e`, un-patched back to
   `[B, 8, 16, T]`.

RoPE: Qwen2's tables (theta 1e6, `cat(freqs, freqs)` over the head) applied to *interleaved*
pairs `(x[2i], x[2i+1])`, the combination ACE-Step's code uses (kept: the weights were trained
with it): `out[2i] = x[2i] cos_2i - x[2i+1] sin_2i`, `out[2i+1] = x[2i+1] cos_2i+1 + x[2i] sin_2i+1`.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

import torch
import torch.nn.functional as F
from torch import nn

from comfy_core.attention import calling
from comfy_core.families.ace_step.lyric_encoder import LyricEncoder
from comfy_core.models.comfyui_names import comfyui_name
from comfy_core.models.unet_blocks import operations_or_default, timestep_embedding
from comfy_core.models.weight_shapes import count_numbered, shape_reader

HEAD_DIM = 64  # ComfyUI's attention_head_dim (heads = width / 64)
LYRIC_HEAD_DIM = 64  # the lyric encoder's 16 heads of 64 at 1024 wide
ROPE_THETA = 1_000_000.0
GROUPS = 32  # proj_in's GroupNorm
TIME_CHANNELS = 256


class AceStepConfigError(ValueError):
    """An ACE-Step 1 state dict whose names or shapes do not make the network."""


@dataclass(frozen=True)
class AceStepConfig:
    """Shapes read from the weights; the head width (64), RoPE theta and the GroupNorm's groups
    are the released model's, which names and shapes cannot show."""

    in_channels: int
    out_channels: int
    patch_height: int
    width: int
    layers: int
    mlp_hidden: int
    proj_in_channels: int
    speaker_dim: int
    text_dim: int
    lyric_vocab: int
    lyric_dim: int
    lyric_layers: int
    lyric_hidden: int
    ssl_dims: tuple[int, ...]

    @property
    def heads(self) -> int:
        return self.width // HEAD_DIM

    @classmethod
    def detect_from_weights(cls, tensors: Mapping[str, Any], prefix: str = "") -> "AceStepConfig":
        shape = shape_reader(tensors, prefix, AceStepConfigError, "ACE-Step")
        mid, in_channels, patch_height, _ = shape("proj_in.early_conv_layers.0.weight")
        width, mid2, _, _ = shape("proj_in.early_conv_layers.2.weight")
        rows, _ = shape("final_layer.linear.weight")
        _, speaker_dim = shape("speaker_embedder.weight")
        _, text_dim = shape("genre_embedder.weight")
        lyric_vocab, lyric_dim = shape("lyric_embs.weight")
        lyric_width, _ = shape("lyric_encoder.embed.out.0.weight")
        lyric_hidden, _ = shape("lyric_encoder.encoders.0.feed_forward.w_1.weight")
        hidden2, _, _ = shape("transformer_blocks.0.ff.inverted_conv.conv.weight")
        layers = count_numbered(tensors, prefix, "transformer_blocks", AceStepConfigError, "ACE-Step")
        lyric_layers = count_numbered(tensors, prefix, "lyric_encoder.encoders", AceStepConfigError, "ACE-Step")
        projectors = count_numbered(tensors, prefix, "projectors", AceStepConfigError, "ACE-Step")
        ssl_dims = tuple(shape(f"projectors.{i}.4.weight")[0] for i in range(projectors))
        if width % HEAD_DIM or lyric_width % LYRIC_HEAD_DIM:
            raise AceStepConfigError(f"ACE-Step: widths {width} (DiT) / {lyric_width} (lyric encoder) do not split "
                                     f"into heads of {HEAD_DIM}")
        if mid != mid2 or mid % GROUPS:
            raise AceStepConfigError(f"ACE-Step: proj_in's {mid} / {mid2} channels do not make a GroupNorm of {GROUPS}")
        if lyric_width != lyric_dim:
            raise AceStepConfigError(f"ACE-Step: lyric embeddings are {lyric_dim} wide, the lyric encoder takes "
                                     f"{lyric_width}")
        if rows % patch_height:
            raise AceStepConfigError(f"ACE-Step: final_layer.linear's {rows} rows are no multiple of the patch "
                                     f"height {patch_height}")
        if layers == 0 or lyric_layers == 0:
            raise AceStepConfigError(f"ACE-Step: {prefix}transformer_blocks / lyric_encoder.encoders has no blocks")
        return cls(in_channels=in_channels, out_channels=rows // patch_height, patch_height=patch_height,
                   width=width, layers=layers, mlp_hidden=hidden2 // 2, proj_in_channels=mid,
                   speaker_dim=speaker_dim, text_dim=text_dim, lyric_vocab=lyric_vocab, lyric_dim=lyric_dim,
                   lyric_layers=lyric_layers, lyric_hidden=lyric_hidden, ssl_dims=ssl_dims)

    def comfy_unet_config(self) -> dict[str, Any]:
        """ComfyUI's `unet_config` (`model_detection`: `audio_model` "ace", nothing else)."""
        return {"audio_model": "ace"}


def rope_tables(length: int, dim: int, device: Any) -> tuple[torch.Tensor, torch.Tensor]:
    """Qwen2's cos / sin tables `[length, dim]` (theta 1e6, the frequencies repeated twice)."""
    inv_freq = 1.0 / (ROPE_THETA ** (torch.arange(0, dim, 2, dtype=torch.int64, device=device).float() / dim))
    angles = torch.arange(length, device=device, dtype=torch.float32)[:, None] * inv_freq[None]
    angles = torch.cat([angles, angles], dim=-1)
    return angles.cos(), angles.sin()


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x `[B, H, S, D]`: interleaved pairs rotated with the concatenated tables (module doc)."""
    pairs = x.reshape(*x.shape[:-1], -1, 2)
    turned = torch.stack([-pairs[..., 1], pairs[..., 0]], dim=-1).reshape(x.shape)
    return (x.float() * cos.to(x.device) + turned.float() * sin.to(x.device)).to(x.dtype)


def linear_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, eps: float = 1e-15) -> torch.Tensor:
    """ReLU-kernel linear attention over `[B, H, S, D]` inputs (fp32): `out_i = sum_j v_j
    (k_j . q_i) / (sum_j k_j . q_i + eps)` with q, k already through the ReLU."""
    q, k, v = q.float(), k.float(), v.float()
    kv = torch.einsum("bhsd,bhse->bhde", k, v)  # [B, H, D, D]
    numerator = torch.einsum("bhsd,bhde->bhse", q, kv)
    denominator = torch.einsum("bhsd,bhd->bhs", q, k.sum(dim=2))[..., None]
    return numerator / (denominator + eps)


class Projections(nn.Module):
    """`to_q`, `to_k`, `to_v`, `to_out.0` (and, for the cross-attention, the stored `add_*_proj`
    / `to_add_out` that the forward pass never uses)."""

    def __init__(self, width: int, ops: Any, added: bool, dtype: Any = None, device: Any = None) -> None:
        super().__init__()
        kw = {"dtype": dtype, "device": device}
        self.to_q = ops.Linear(width, width, **kw)
        self.to_k = ops.Linear(width, width, **kw)
        self.to_v = ops.Linear(width, width, **kw)
        self.to_out = nn.ModuleList([ops.Linear(width, width, **kw), nn.Dropout(0.0)])
        if added:
            self.add_k_proj = ops.Linear(width, width, **kw)
            self.add_v_proj = ops.Linear(width, width, **kw)
            self.add_q_proj = ops.Linear(width, width, **kw)
            self.to_add_out = ops.Linear(width, width, **kw)


class GLUMBConv(nn.Module):
    """The block's feed-forward (module doc, step 4): `inverted_conv.conv`, `depth_conv.conv`,
    `point_conv.conv` (ComfyUI's nesting)."""

    def __init__(self, width: int, hidden: int, ops: Any, dtype: Any = None, device: Any = None) -> None:
        super().__init__()
        kw = {"dtype": dtype, "device": device}
        self.inverted_conv = nn.Module()
        self.inverted_conv.conv = ops.Conv1d(width, 2 * hidden, 1, **kw)
        self.depth_conv = nn.Module()
        self.depth_conv.conv = ops.Conv1d(2 * hidden, 2 * hidden, 3, padding=1, groups=2 * hidden, **kw)
        self.point_conv = nn.Module()
        self.point_conv.conv = ops.Conv1d(hidden, width, 1, bias=False, **kw)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = F.silu(self.inverted_conv.conv(x.transpose(1, 2)))  # [B, 2*hidden, S]
        h = self.depth_conv.conv(h)
        value, gate = h.chunk(2, dim=1)
        return self.point_conv.conv(value * F.silu(gate)).transpose(1, 2)


def _rms(x: torch.Tensor) -> torch.Tensor:
    return F.rms_norm(x, (x.shape[-1],), eps=1e-6)


class LinearTransformerBlock(nn.Module):
    """One block (module doc, step 4)."""

    def __init__(self, width: int, hidden: int, ops: Any, dtype: Any = None, device: Any = None) -> None:
        super().__init__()
        self.heads = width // HEAD_DIM
        self.attn = Projections(width, ops, added=False, dtype=dtype, device=device)
        self.cross_attn = Projections(width, ops, added=True, dtype=dtype, device=device)
        self.ff = GLUMBConv(width, hidden, ops, dtype=dtype, device=device)
        self.scale_shift_table = nn.Parameter(torch.empty(6, width, dtype=dtype, device=device))

    def _heads(self, x: torch.Tensor) -> torch.Tensor:
        return x.view(x.shape[0], x.shape[1], self.heads, -1).transpose(1, 2)  # [B, H, S, d]

    def self_attention(self, x: torch.Tensor, rope: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        p = self.attn
        q = F.relu(apply_rope(self._heads(p.to_q(x)), *rope))
        k = F.relu(apply_rope(self._heads(p.to_k(x)), *rope))
        out = linear_attention(q, k, self._heads(p.to_v(x)))  # [B, H, S, d]
        out = out.transpose(1, 2).reshape(x.shape[0], x.shape[1], -1).to(x.dtype)
        return p.to_out[0](out)

    def cross_attention(self, x: torch.Tensor, states: torch.Tensor, rope: tuple[torch.Tensor, torch.Tensor],
                        rope_states: tuple[torch.Tensor, torch.Tensor], transformer_options: Any) -> torch.Tensor:
        p = self.cross_attn
        q = apply_rope(self._heads(p.to_q(x)), *rope)
        k = apply_rope(self._heads(p.to_k(states)), *rope_states)
        v = self._heads(p.to_v(states))
        out = calling.attend(q, k, v, self.heads, skip_reshape=True, transformer_options=transformer_options or {})
        return p.to_out[0](out.to(x.dtype))

    def forward(self, x: torch.Tensor, states: torch.Tensor, temb: torch.Tensor,
                rope: tuple[torch.Tensor, torch.Tensor], rope_states: tuple[torch.Tensor, torch.Tensor],
                transformer_options: Any = None) -> torch.Tensor:
        """x `[B, S, W]`, states `[B, S', W]`, temb `[B, 6W]` -> `[B, S, W]`."""
        mods = self.scale_shift_table.to(dtype=temb.dtype, device=temb.device)[None] + temb.view(x.shape[0], 6, -1)
        shift1, scale1, gate1, shift2, scale2, gate2 = mods.chunk(6, dim=1)  # each [B, 1, W]
        x = x + gate1 * self.self_attention(_rms(x) * (1 + scale1) + shift1, rope)
        x = x + self.cross_attention(x, states, rope, rope_states, transformer_options)
        return x + gate2 * self.ff(_rms(x) * (1 + scale2) + shift2)


class TimestepEmbedder(nn.Module):
    """`timestep_embedder.linear_1` / `linear_2` with a SiLU between."""

    def __init__(self, width: int, ops: Any, dtype: Any = None, device: Any = None) -> None:
        super().__init__()
        self.linear_1 = ops.Linear(TIME_CHANNELS, width, dtype=dtype, device=device)
        self.linear_2 = ops.Linear(width, width, dtype=dtype, device=device)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear_2(F.silu(self.linear_1(x)))


class FinalLayer(nn.Module):
    """`final_layer`: modulated RMS norm, `linear`, un-patching (module doc, step 5)."""

    def __init__(self, config: AceStepConfig, ops: Any, dtype: Any = None, device: Any = None) -> None:
        super().__init__()
        self.rows, self.channels = config.patch_height, config.out_channels
        self.linear = ops.Linear(config.width, config.patch_height * config.out_channels, dtype=dtype, device=device)
        self.scale_shift_table = nn.Parameter(torch.empty(2, config.width, dtype=dtype, device=device))

    def forward(self, x: torch.Tensor, embedded: torch.Tensor, length: int) -> torch.Tensor:
        shift, scale = (self.scale_shift_table.to(dtype=embedded.dtype, device=embedded.device)[None]
                        + embedded[:, None]).chunk(2, dim=1)
        x = self.linear(_rms(x) * (1 + scale) + shift)  # [B, T, rows * C], row-major over (row, channel)
        b, t, _ = x.shape
        out = x.view(b, t, self.rows, self.channels).permute(0, 3, 2, 1)  # [B, C, rows, T]
        if length > t:
            out = F.pad(out, (0, length - t))
        return out[..., :length].contiguous()


@comfyui_name("ACEStepTransformer2DModel")
class AceStepTransformer(nn.Module):
    """The whole DiT (module doc); `forward` has ComfyUI's arguments."""

    # DIFFUSION_MODEL wrappers' positional arguments, ComfyUI's `_forward` order (comfy_core/models/diffusion.py)
    wrapper_arguments = ("x", "timesteps", "attention_mask", "context", "text_attention_mask", "speaker_embeds",
                         "lyric_token_idx", "lyric_mask", "block_controlnet_hidden_states", "controlnet_scale",
                         "lyrics_strength")  # transformer_options: a keyword

    def __init__(self, config: AceStepConfig, operations: Any = None, dtype: Any = None, device: Any = None) -> None:
        super().__init__()
        ops = operations_or_default(operations)
        kw = {"dtype": dtype, "device": device}
        self.config = config
        self.dtype = dtype
        w = config.width
        self.transformer_blocks = nn.ModuleList(LinearTransformerBlock(w, config.mlp_hidden, ops, **kw)
                                                for _ in range(config.layers))
        self.timestep_embedder = TimestepEmbedder(w, ops, **kw)
        self.t_block = nn.Sequential(nn.SiLU(), ops.Linear(w, 6 * w, **kw))
        self.speaker_embedder = ops.Linear(config.speaker_dim, w, **kw)
        self.genre_embedder = ops.Linear(config.text_dim, w, **kw)
        self.lyric_embs = ops.Embedding(config.lyric_vocab, config.lyric_dim, **kw)
        self.lyric_encoder = LyricEncoder(config.lyric_dim, config.lyric_dim, config.lyric_dim // LYRIC_HEAD_DIM,
                                          config.lyric_hidden, config.lyric_layers, ops, **kw)
        self.lyric_proj = ops.Linear(config.lyric_dim, w, **kw)
        # The SSL projectors (MERT / m-HuBERT alignment during training): stored, unused here.
        self.projectors = nn.ModuleList(
            nn.Sequential(ops.Linear(w, 2 * w, **kw), nn.SiLU(), ops.Linear(2 * w, 2 * w, **kw), nn.SiLU(),
                          ops.Linear(2 * w, dim, **kw)) for dim in config.ssl_dims)
        self.proj_in = nn.Module()
        self.proj_in.early_conv_layers = nn.Sequential(
            ops.Conv2d(config.in_channels, config.proj_in_channels, (config.patch_height, 1),
                       stride=(config.patch_height, 1), **kw),
            ops.GroupNorm(GROUPS, config.proj_in_channels, eps=1e-6, affine=True, **kw),
            ops.Conv2d(config.proj_in_channels, w, 1, **kw))
        self.final_layer = FinalLayer(config, ops, **kw)

    @property
    def in_channels(self) -> int:
        return self.config.in_channels

    def lora_key_map(self, names: list[str]) -> dict[str, Any]:
        """LoRA layer name -> target: ComfyUI's generic names and kohya's, the modules' own."""
        from comfy_core.families.lora_keys import native_key_map

        return native_key_map(names)

    def encode(self, context: torch.Tensor, speaker_embeds: torch.Tensor, lyric_token_idx: torch.Tensor,
               lyrics_strength: float = 1.0) -> torch.Tensor:
        """Step 1: `[B, 1 + S + L, W]`."""
        speaker = self.speaker_embedder(speaker_embeds.to(context.dtype))[:, None]
        text = self.genre_embedder(context)
        lyrics = self.lyric_embs(lyric_token_idx.long()).to(text.dtype)
        lyrics = self.lyric_proj(self.lyric_encoder(lyrics)) * lyrics_strength
        return torch.cat([speaker, text, lyrics], dim=1)

    def forward(self, x: torch.Tensor, timestep: torch.Tensor, context: torch.Tensor | None = None,
                speaker_embeds: torch.Tensor | None = None, lyric_token_idx: torch.Tensor | None = None,
                lyrics_strength: float = 1.0, transformer_options: Any = None, control: Any = None,
                **kwargs: Any) -> torch.Tensor:
        """x `[B, C, 16, T]`, timestep `[B]` (sigma x 1000), context `[B, S, text]`, speaker_embeds
        `[B, speaker]`, lyric_token_idx `[B, L]` -> `[B, C, 16, T]`."""
        if context is None or lyric_token_idx is None:
            raise AceStepConfigError("ACE-Step: the model needs text states and lyric tokens "
                                     "(TextEncodeAceStepAudio's conditioning)")
        if speaker_embeds is None:
            speaker_embeds = torch.zeros(x.shape[0], self.config.speaker_dim, device=x.device, dtype=x.dtype)
        states = self.encode(context.to(x.dtype), speaker_embeds, lyric_token_idx.to(x.device), lyrics_strength)
        length = x.shape[-1]
        embedded = self.timestep_embedder(timestep_embedding(timestep, TIME_CHANNELS).to(x.dtype))  # [B, W]
        temb = self.t_block(embedded)  # [B, 6W]
        h = self.proj_in.early_conv_layers(x).flatten(2).transpose(1, 2)  # [B, T, W]
        rope = rope_tables(h.shape[1], HEAD_DIM, h.device)
        rope_states = rope_tables(states.shape[1], HEAD_DIM, h.device)
        for block in self.transformer_blocks:
            h = block(h, states, temb, rope, rope_states, transformer_options)
        return self.final_layer(h, embedded, length)


__all__ = ["AceStepConfig", "AceStepConfigError", "AceStepTransformer", "GLUMBConv", "LinearTransformerBlock",
           "apply_rope", "linear_attention", "rope_tables"]
