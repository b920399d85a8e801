"""ACE-Step 1.5's network as ComfyUI's `AceStepConditionGenerationModel` holds it
(`comfy/ldm/ace/ace_step15.py`; the released checkpoint's module names): `decoder` (the DiT),
`encoder` (text projector, lyric encoder, timbre encoder), `tokenizer` (attention pooler + residual
FSQ, 25 Hz latents -> 5 Hz codes), `detokenizer` (5 Hz codes -> 25 Hz hints) and
`null_condition_emb`. Written from the architecture diffusers documents
(`AceStepTransformer1DModel`, `pipelines/ace_step/modeling_ace_step.py`) and the behaviour of
ComfyUI's file; blocks in `layers.py`.

One model call (ComfyUI's `forward`): the latent `x [B, 64, T]` at 25 Hz, the text states
`context [B, S, text]`, the lyric token embeddings `lyric_embed [B, L, text]`, the timbre
reference `refer_audio [B, 64, T']` (the silence latent when none), optional LM `audio_codes
[B, N]` (5 Hz indices of the FSQ codebook) and `is_covers`:

1. condition encoder: lyric encoder (embed, blocks, norm), timbre encoder (its first token per
   reference, grouped per sample by `refer_audio_order_mask`, ComfyUI's all-zero one), the text
   projector; concatenated lyric, timbre, text (ComfyUI passes no masks, so nothing is re-packed);
2. the 25 Hz hints: the codes (padded with code 35847 to cover T) through the FSQ codebook and the
   detokenizer when there are codes; else the reference tokenized and detokenized; the source
   latent is the hints (`is_covers` None or True) or the reference itself (`is_covers` False);
3. the DiT over `cat([source, ones], -1)` and `x` (192 channels), patched 2 in time by a
   convolution, timesteps `t` and `t - r` (r = t) through two embeddings, the encoder states through
   `condition_embedder`, alternating banded (128) / full self-attention, adaLN output norm, and a
   transposed convolution back to 64 channels; `replace_with_null_embeds` swaps the encoder states
   for the learned null embedding (ConditioningZeroOut's all-zero negative).

Differences kept from ComfyUI (the contract) against diffusers: the lyric / timbre encoders and the
pooler attend fully (diffusers bands their even layers, the same below 129 tokens); the FSQ bounds
with `tanh` (diffusers clamps).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Mapping

import torch
import torch.nn.functional as F
from torch import nn

from comfy_core.families.ace_step15.layers import DiTLayer, EncoderLayer, TimestepEmbedding, rotary_tables
from comfy_core.families.zimage.nextdit import RMSNorm
from comfy_core.models.comfyui_names import comfyui_name
from comfy_core.models.unet_blocks import operations_or_default
from comfy_core.models.weight_shapes import count_numbered, shape_reader

FSQ_LEVELS = (8, 8, 8, 5, 5, 5)
AUDIO_CODE_PAD = 35847  # ComfyUI pads short code sequences with this code
SLIDING_WINDOW = 128
LATENT_RATE = 25  # latent frames per second (48 kHz / 1920)


class AceStep15ConfigError(ValueError):
    """An ACE-Step 1.5 state dict whose names or shapes do not make the network."""


@dataclass(frozen=True)
class Stack:
    """One stack of attention blocks: width, depth, heads, key/value heads, head width, MLP width."""

    width: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    inner: int

    @classmethod
    def read(cls, tensors: Mapping[str, Any], prefix: str, name: str) -> "Stack":
        shape = shape_reader(tensors, prefix, AceStep15ConfigError, "ACE-Step 1.5")
        layers = count_numbered(tensors, prefix, "layers", AceStep15ConfigError, "ACE-Step 1.5")
        if layers == 0:
            raise AceStep15ConfigError(f"ACE-Step 1.5: {prefix}layers has no blocks ({name})")
        (head_dim,) = shape("layers.0.self_attn.q_norm.weight")
        q_out, width = shape("layers.0.self_attn.q_proj.weight")
        k_out, _ = shape("layers.0.self_attn.k_proj.weight")
        inner, _ = shape("layers.0.mlp.gate_proj.weight")
        if q_out % head_dim or k_out % head_dim or (q_out // head_dim) % (k_out // head_dim):
            raise AceStep15ConfigError(f"ACE-Step 1.5 {name}: q / k projections of {q_out} / {k_out} do not split "
                                       f"into heads of {head_dim} sharing key/value heads evenly")
        return cls(width, layers, q_out // head_dim, k_out // head_dim, head_dim, inner)

    def encoder_layers(self, ops: Any, dtype: Any, device: Any) -> nn.ModuleList:
        return nn.ModuleList(EncoderLayer(self.width, self.heads, self.kv_heads, self.head_dim, self.inner, ops,
                                          dtype=dtype, device=device) for _ in range(self.layers))


@dataclass(frozen=True)
class AceStep15Config:
    """Shapes read from the weights (`detect_from_weights`); the band width (128) and the FSQ
    levels (8, 8, 8, 5, 5, 5) are the released model's, which names and shapes cannot show."""

    in_channels: int
    out_channels: int
    patch_size: int
    dit: Stack
    encoder_width: int
    text_dim: int
    timbre_dim: int
    lyric: Stack
    timbre: Stack
    pooler: Stack
    detokenizer: Stack
    fsq_dim: int
    pool_window: int
    sliding_window: int = SLIDING_WINDOW

    @classmethod
    def detect_from_weights(cls, tensors: Mapping[str, Any], prefix: str = "") -> "AceStep15Config":
        shape = shape_reader(tensors, prefix, AceStep15ConfigError, "ACE-Step 1.5")
        hidden, in_channels, patch = shape("decoder.proj_in.1.weight")
        _, out_channels, _ = shape("decoder.proj_out.1.weight")
        _, encoder_width = shape("decoder.condition_embedder.weight")
        encoder_out, text_dim = shape("encoder.text_projector.weight")
        _, timbre_dim = shape("encoder.timbre_encoder.embed_tokens.weight")
        codebook, fsq_dim = shape("tokenizer.quantizer.project_in.weight")
        _, pool_window, _ = shape("detokenizer.special_tokens")
        if codebook != len(FSQ_LEVELS):
            raise AceStep15ConfigError(f"ACE-Step 1.5: {prefix}tokenizer.quantizer.project_in maps to {codebook} "
                                       f"codebook dimensions, the FSQ has {len(FSQ_LEVELS)} levels")
        if encoder_out != encoder_width:
            raise AceStep15ConfigError(f"ACE-Step 1.5: the condition encoder is {encoder_out} wide, the DiT's "
                                       f"condition_embedder takes {encoder_width}")
        dit = Stack.read(tensors, prefix + "decoder.", "DiT")
        if dit.width != hidden:
            raise AceStep15ConfigError(f"ACE-Step 1.5: the DiT blocks are {dit.width} wide, proj_in gives {hidden}")
        return cls(in_channels=in_channels, out_channels=out_channels, patch_size=patch, dit=dit,
                   encoder_width=encoder_width, text_dim=text_dim, timbre_dim=timbre_dim,
                   lyric=Stack.read(tensors, prefix + "encoder.lyric_encoder.", "lyric encoder"),
                   timbre=Stack.read(tensors, prefix + "encoder.timbre_encoder.", "timbre encoder"),
                   pooler=Stack.read(tensors, prefix + "tokenizer.attention_pooler.", "attention pooler"),
                   detokenizer=Stack.read(tensors, prefix + "detokenizer.", "detokenizer"),
                   fsq_dim=fsq_dim, pool_window=pool_window)

    def comfy_unet_config(self) -> dict[str, Any]:
        """ComfyUI's `unet_config` for this model (`model_detection`: `audio_model` "ace1.5")."""
        return {"audio_model": "ace1.5", "in_channels": self.in_channels, "hidden_size": self.dit.width,
                "num_dit_layers": self.dit.layers, "audio_acoustic_hidden_dim": self.out_channels}


class AceStepDiT(nn.Module):
    """The decoder (`decoder.*`): see the module doc, step 3."""

    def __init__(self, config: AceStep15Config, ops: Any, dtype: Any = None, device: Any = None) -> None:
        super().__init__()
        s = config.dit
        self.patch_size = config.patch_size
        self.head_dim = s.head_dim
        self.proj_in = nn.Sequential(nn.Identity(), ops.Conv1d(config.in_channels, s.width, config.patch_size,
                                                               stride=config.patch_size, dtype=dtype, device=device))
        self.time_embed = TimestepEmbedding(s.width, ops, dtype=dtype, device=device)
        self.time_embed_r = TimestepEmbedding(s.width, ops, dtype=dtype, device=device)
        self.condition_embedder = ops.Linear(config.encoder_width, s.width, dtype=dtype, device=device)
        # Even layers band their self-attention (ComfyUI's and the release's layer types).
        self.layers = nn.ModuleList(
            DiTLayer(s.width, s.heads, s.kv_heads, s.head_dim, s.inner, ops,
                     sliding_window=config.sliding_window if i % 2 == 0 else None, dtype=dtype, device=device)
            for i in range(s.layers))
        self.norm_out = RMSNorm(s.width, 1e-6, dtype=dtype, device=device)
        self.proj_out = nn.Sequential(nn.Identity(), ops.ConvTranspose1d(
            s.width, config.out_channels, config.patch_size, stride=config.patch_size, dtype=dtype, device=device))
        self.scale_shift_table = nn.Parameter(torch.empty(1, 2, s.width, dtype=dtype, device=device))

    def forward(self, x: torch.Tensor, timestep: torch.Tensor, timestep_r: torch.Tensor, context: torch.Tensor,
                context_latents: torch.Tensor, transformer_options: Any = None) -> torch.Tensor:
        """x `[B, T, 64]`, timestep / timestep_r `[B]`, context `[B, S, enc]`, context_latents
        `[B, T, 128]` -> velocity `[B, T, 64]`."""
        temb_t, proj_t = self.time_embed(timestep, x.dtype)
        temb_r, proj_r = self.time_embed_r(timestep - timestep_r, x.dtype)
        temb, proj = temb_t + temb_r, proj_t + proj_r  # [B, W], [B, 6, W]
        h = torch.cat([context_latents.to(x.dtype), x], dim=-1)  # [B, T, 192]
        length = h.shape[1]
        pad = (-length) % self.patch_size
        if pad:
            h = F.pad(h, (0, 0, 0, pad))
        h = self.proj_in(h.transpose(1, 2)).transpose(1, 2)  # [B, T/p, W]
        context = self.condition_embedder(context)
        cos, sin = rotary_tables(h.shape[1], self.head_dim, h.device)
        for layer in self.layers:
            h = layer(h, proj, context, (cos, sin), transformer_options)
        shift, scale = (self.scale_shift_table.to(dtype=temb.dtype, device=temb.device) + temb[:, None]).chunk(2, dim=1)
        h = self.norm_out(h) * (1 + scale) + shift
        h = self.proj_out(h.transpose(1, 2)).transpose(1, 2)  # [B, T + pad, 64]
        return h[:, :length]


class TextEncoderStack(nn.Module):
    """The lyric / timbre encoder: `embed_tokens` (a linear from the input width), blocks with
    RoPE over positions, final `norm`."""

    def __init__(self, in_width: int, stack: Stack, ops: Any, special_token: bool = False,
                 dtype: Any = None, device: Any = None) -> None:
        super().__init__()
        self.head_dim = stack.head_dim
        self.embed_tokens = ops.Linear(in_width, stack.width, dtype=dtype, device=device)
        self.norm = RMSNorm(stack.width, 1e-6, dtype=dtype, device=device)
        self.layers = stack.encoder_layers(ops, dtype, device)
        if special_token:  # the timbre encoder's (stored, unused by the forward pass)
            self.special_token = nn.Parameter(torch.empty(1, 1, stack.width, dtype=dtype, device=device))

    def forward(self, x: torch.Tensor, transformer_options: Any = None) -> torch.Tensor:
        h = self.embed_tokens(x)  # [B, T, W]
        rope = rotary_tables(h.shape[1], self.head_dim, h.device)
        for layer in self.layers:
            h = layer(h, rope, transformer_options)
        return self.norm(h)


def group_by_order(first_tokens: torch.Tensor, order: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-reference vectors `[N, D]` and the sample each belongs to (`order [N]`) -> `[B, M, D]` (B = N
    rows, M the most references of one sample, in their order) and the mask `[B, M]` of filled slots."""
    n, width = first_tokens.shape
    counts = torch.bincount(order, minlength=n)
    most = int(counts.max().item())
    out = first_tokens.new_zeros((n, most, width))
    mask = torch.zeros((n, most), dtype=torch.long, device=first_tokens.device)
    seen = [0] * n
    for index in range(n):
        sample = int(order[index].item())
        out[sample, seen[sample]] = first_tokens[index]
        mask[sample, seen[sample]] = 1
        seen[sample] += 1
    return out, mask


class ConditionEncoder(nn.Module):
    """`encoder.*`: text projector, lyric encoder, timbre encoder (see the module doc, step 1)."""

    def __init__(self, config: AceStep15Config, ops: Any, dtype: Any = None, device: Any = None) -> None:
        super().__init__()
        self.text_projector = ops.Linear(config.text_dim, config.encoder_width, bias=False, dtype=dtype, device=device)
        self.lyric_encoder = TextEncoderStack(config.text_dim, config.lyric, ops, dtype=dtype, device=device)
        self.timbre_encoder = TextEncoderStack(config.timbre_dim, config.timbre, ops, special_token=True,
                                               dtype=dtype, device=device)

    def forward(self, text: torch.Tensor, lyrics: torch.Tensor, refer: torch.Tensor, order: torch.Tensor,
                transformer_options: Any = None) -> torch.Tensor:
        """text `[B, S, text]`, lyrics `[B, L, text]`, refer `[N, T', timbre]`, order `[N]` ->
        `[B, L + M + S, enc]` (lyric, timbre, text states in that order)."""
        lyric = self.lyric_encoder(lyrics, transformer_options)
        timbre_states = self.timbre_encoder(refer, transformer_options)[:, 0]  # [N, enc]
        timbre, _ = group_by_order(timbre_states, order)
        return torch.cat([lyric, timbre.to(lyric.dtype), self.text_projector(text)], dim=1)


class FSQ(nn.Module):
    """Finite scalar quantisation (Mentzer et al. 2023, "Finite Scalar Quantization") with one
    residual level as the release has it: `project_in` to 6 dimensions, a tanh soft clamp to
    `1 + 1/(L-1)`, each dimension bounded by tanh and floored onto its L levels in [-1, 1],
    `project_out` back; index = sum of level index x mixed-radix basis."""

    def __init__(self, dim: int, ops: Any, dtype: Any = None, device: Any = None) -> None:
        super().__init__()
        self.project_in = ops.Linear(dim, len(FSQ_LEVELS), dtype=dtype, device=device)
        self.project_out = ops.Linear(len(FSQ_LEVELS), dim, dtype=dtype, device=device)

    @staticmethod
    def levels(device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
        levels = torch.tensor(FSQ_LEVELS, dtype=torch.float32, device=device)
        basis = torch.cumprod(torch.tensor((1,) + FSQ_LEVELS[:-1], dtype=torch.float32, device=device), 0)
        return levels, basis

    def codes_of(self, indices: torch.Tensor) -> torch.Tensor:
        """Codebook indices `[...]` -> codes `[..., 6]` in [-1, 1]."""
        levels, basis = self.levels(indices.device)
        digits = torch.div(indices.long()[..., None], basis.long(), rounding_mode="floor") % levels.long()
        return digits.float() * (2.0 / (levels - 1)) - 1.0

    def from_indices(self, indices: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
        """ComfyUI's `get_output_from_indices`: `[B, N]` -> `[B, N, dim]`."""
        return self.project_out(self.codes_of(indices).to(dtype))

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """x `[..., dim]` -> (quantised `[..., dim]`, indices `[..., 1]`)."""
        levels, basis = self.levels(x.device)
        z = self.project_in(x).float()
        clamp = 1.0 + 1.0 / (levels - 1)
        z = (z / clamp).tanh() * clamp
        bracket = ((levels - 1) * (z.tanh() + 1) / 2.0 + 0.5).floor()
        codes = bracket * (2.0 / (levels - 1)) - 1.0
        indices = ((codes + 1.0) / (2.0 / (levels - 1)) * basis).sum(-1).round().long()
        return self.project_out(codes.to(x.dtype)), indices[..., None]


class AttentionPooler(nn.Module):
    """`tokenizer.attention_pooler`: each window of P frames, after a learned leading token, through
    encoder blocks; the leading token's final state is the window's vector."""

    def __init__(self, stack: Stack, ops: Any, dtype: Any = None, device: Any = None) -> None:
        super().__init__()
        self.head_dim = stack.head_dim
        self.embed_tokens = ops.Linear(stack.width, stack.width, dtype=dtype, device=device)
        self.norm = RMSNorm(stack.width, 1e-6, dtype=dtype, device=device)
        self.special_token = nn.Parameter(torch.empty(1, 1, stack.width, dtype=dtype, device=device))
        self.layers = stack.encoder_layers(ops, dtype, device)

    def forward(self, x: torch.Tensor, transformer_options: Any = None) -> torch.Tensor:
        b, t, p, d = x.shape
        h = self.embed_tokens(x)
        lead = self.special_token.to(dtype=h.dtype, device=h.device).expand(b, t, 1, d)
        h = torch.cat([lead, h], dim=2).reshape(b * t, p + 1, d)
        rope = rotary_tables(p + 1, self.head_dim, h.device)
        for layer in self.layers:
            h = layer(h, rope, transformer_options)
        return self.norm(h)[:, 0].reshape(b, t, d)


class AudioTokenizer(nn.Module):
    """`tokenizer.*`: 25 Hz latents `[B, T, 64]` -> 5 Hz quantised vectors and their indices."""

    def __init__(self, config: AceStep15Config, ops: Any, dtype: Any = None, device: Any = None) -> None:
        super().__init__()
        self.pool_window = config.pool_window
        self.audio_acoustic_proj = ops.Linear(config.out_channels, config.pooler.width, dtype=dtype, device=device)
        self.attention_pooler = AttentionPooler(config.pooler, ops, dtype=dtype, device=device)
        self.quantizer = FSQ(config.fsq_dim, ops, dtype=dtype, device=device)

    def tokenize(self, x: torch.Tensor, transformer_options: Any = None) -> tuple[torch.Tensor, torch.Tensor]:
        b, t, d = x.shape
        pad = (-t) % self.pool_window
        if pad:
            x = F.pad(x, (0, 0, 0, pad))
        x = x.reshape(b, -1, self.pool_window, d)
        return self.quantizer(self.attention_pooler(self.audio_acoustic_proj(x), transformer_options))


class AudioTokenDetokenizer(nn.Module):
    """`detokenizer.*`: 5 Hz vectors `[B, N, D]` -> 25 Hz hints `[B, N*P, 64]` (each vector plus P
    learned position tokens through encoder blocks)."""

    def __init__(self, config: AceStep15Config, ops: Any, dtype: Any = None, device: Any = None) -> None:
        super().__init__()
        s = config.detokenizer
        self.pool_window, self.head_dim = config.pool_window, s.head_dim
        self.embed_tokens = ops.Linear(s.width, s.width, dtype=dtype, device=device)
        self.special_tokens = nn.Parameter(torch.empty(1, config.pool_window, s.width, dtype=dtype, device=device))
        self.layers = s.encoder_layers(ops, dtype, device)
        self.norm = RMSNorm(s.width, 1e-6, dtype=dtype, device=device)
        self.proj_out = ops.Linear(s.width, config.out_channels, dtype=dtype, device=device)

    def forward(self, x: torch.Tensor, transformer_options: Any = None) -> torch.Tensor:
        b, n, d = x.shape
        h = self.embed_tokens(x)[:, :, None].expand(b, n, self.pool_window, d)
        h = (h + self.special_tokens.to(dtype=h.dtype, device=h.device)[:, None]).reshape(b * n, self.pool_window, d)
        rope = rotary_tables(self.pool_window, self.head_dim, h.device)
        for layer in self.layers:
            h = layer(h, rope, transformer_options)
        return self.proj_out(self.norm(h)).reshape(b, n * self.pool_window, -1)


@comfyui_name("AceStepConditionGenerationModel")
class AceStep15Model(nn.Module):
    """The whole network (see the module doc); `forward` has ComfyUI's arguments."""

    def __init__(self, config: AceStep15Config, operations: Any = None, dtype: Any = None, device: Any = None) -> None:
        super().__init__()
        ops = operations_or_default(operations)
        self.config = config
        self.dtype = dtype
        self.decoder = AceStepDiT(config, ops, dtype=dtype, device=device)
        self.encoder = ConditionEncoder(config, ops, dtype=dtype, device=device)
        self.tokenizer = AudioTokenizer(config, ops, dtype=dtype, device=device)
        self.detokenizer = AudioTokenDetokenizer(config, ops, dtype=dtype, device=device)
        self.null_condition_emb = nn.Parameter(torch.empty(1, 1, config.encoder_width, dtype=dtype, device=device))

    @property
    def in_channels(self) -> int:
        return self.config.out_channels

    def lora_key_map(self, names: list[str]) -> dict[str, Any]:
        """LoRA layer name -> target: ComfyUI's generic names (`diffusion_model.decoder.layers.0.
        self_attn.q_proj`, kohya's `lora_unet_decoder_layers_0_self_attn_q_proj`), the modules' own."""
        from comfy_core.families.lora_keys import native_key_map

        return native_key_map(names)

    def hints(self, x_length: int, refer: torch.Tensor, audio_codes: torch.Tensor | None, dtype: torch.dtype,
              transformer_options: Any = None) -> torch.Tensor:
        """The 25 Hz hints `[B, x_length, 64]` (module doc, step 2)."""
        if audio_codes is not None:
            codes = audio_codes.long()
            if codes.shape[1] * self.config.pool_window < x_length:
                wanted = math.ceil(x_length / self.config.pool_window)
                codes = F.pad(codes, (0, wanted - codes.shape[1]), value=AUDIO_CODE_PAD)
            coarse = self.tokenizer.quantizer.from_indices(codes, dtype)
        else:
            coarse, _ = self.tokenizer.tokenize(refer, transformer_options)
        return self.detokenizer(coarse, transformer_options)[:, :x_length]

    def forward(self, x: torch.Tensor, timestep: torch.Tensor, context: torch.Tensor, y: Any = None,
                lyric_embed: torch.Tensor | None = None, refer_audio: torch.Tensor | None = None,
                audio_codes: torch.Tensor | None = None, is_covers: bool | None = None,
                replace_with_null_embeds: bool = False, transformer_options: Any = None, control: Any = None,
                **kwargs: Any) -> torch.Tensor:
        """x `[B, 64, T]`, timestep `[B]` (sigma), context `[B, S, text]`, lyric_embed `[B, L, text]`,
        refer_audio `[B, 64, T']` -> velocity `[B, 64, T]`."""
        if lyric_embed is None or refer_audio is None:
            raise AceStep15ConfigError("ACE-Step 1.5: the model needs lyric embeddings and a timbre reference "
                                       "(TextEncodeAceStepAudio1.5's conditioning)")
        latent = x.movedim(-1, -2)  # [B, T, 64]
        refer = refer_audio.movedim(-1, -2).to(latent.dtype)  # [B, T', 64]
        order = torch.zeros((latent.shape[0],), dtype=torch.long, device=latent.device)  # ComfyUI's order mask
        states = self.encoder(context.to(latent.dtype), lyric_embed.to(latent.dtype), refer, order,
                              transformer_options)
        hints = self.hints(latent.shape[1], refer, audio_codes, context.dtype, transformer_options)
        source = refer[:, :latent.shape[1]] if is_covers is False else hints
        context_latents = torch.cat([source, torch.ones_like(latent)], dim=-1)  # [B, T, 128]
        if replace_with_null_embeds:
            states = self.null_condition_emb.to(states).expand_as(states)
        out = self.decoder(latent, timestep, timestep, states, context_latents, transformer_options)
        return out.movedim(-1, -2)


__all__ = ["AUDIO_CODE_PAD", "AceStep15Config", "AceStep15ConfigError", "AceStep15Model", "AceStepDiT",
           "AttentionPooler", "AudioTokenDetokenizer", "AudioTokenizer", "ConditionEncoder", "FSQ", "LATENT_RATE",
           "Stack", "group_by_order"]
