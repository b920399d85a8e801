"""Qwen-Image's MMDiT (Qwen team 2025, "Qwen-Image Technical Report", arXiv 2508.02324) and
`QwenImageConfig` read from weights.

A double-stream transformer after Esser et al. 2024 (MMDiT): the latent `[B, 16, H, W]` (or the
5-D `[B, 16, 1, H, W]` of its Wan-2.1-like VAE) is cut into 2x2 patches (64 channels per token),
text states (Qwen2.5-VL-7B, 3584 wide) are RMS-normed and projected, and 60 blocks keep separate
weights for the two streams (adaLN modulation from the timestep alone, LayerNorms without
affine, QK RMS norms, GELU-tanh MLPs) over one joint attention `[text, image]`. Positions are
"MSRoPE" (the report's multimodal scalable RoPE): 3 axes (frame index, row, col) with 16 / 56 /
56 channels of a 128-channel head, image rows and columns centred on 0, text tokens placed on
the diagonal after the image (all three axes equal to `max(h, w) // 2 + i`, in patches).

Qwen-Image-Edit appends the reference latents' tokens (`ref_latents`) after the image tokens
with their own positions and cuts the output back to the image tokens, by `ref_latents_method`:

- "index" (default): reference k (1, 2, ...) on the frame axis, each centred on its own grid;
- "offset": frame 1, each reference placed after the previous ones along the axis that keeps
  the canvas squarer (Kontext's packing); "uxo" (what FluxKontextMultiReferenceLatentMethod's
  "uxo/uno" sets) is the same here, as ComfyUI's Qwen-Image network treats it;
- "index_timestep_zero" (Qwen-Image-Edit-2511, whose files carry the `__index_timestep_zero__`
  marker): "index" positions, and the reference tokens modulated as at timestep 0 (the image
  and the text at the sampled timestep).

Qwen-Image-Layered (files with `time_text_embed.addition_t_embedding`, 2 x width) decomposes an
image into RGBA layers: its latent is 5-D `[B, 16, layers + 1, H, W]`, the frames (the composite
first, then the layers) numbered 0..T-1 on the frame axis; the input image comes as a reference
latent placed on frame -1 (the "negative_index" method, its default: reference k on frame -k);
the timestep embedding gains the row `addition_t_cond` (default 0) of `addition_t_embedding`.
As ComfyUI, the text positions start after the spatial grid only (diffusers' Layered RoPE
starts them after the layer count too when that is larger).

Written here after ComfyUI's `comfy/ldm/qwen_image/model.py` (constructor arguments, state-dict
names, patch points) and diffusers' `QwenImageTransformer2DModel` (the numerics reference: the
state-dict names are the same in ComfyUI's files, the original release and diffusers'):

- `timestep` is sigma in 0..1 (ComfyUI's flow sampling, multiplier 1); the embedding scales it
  by 1000.
- `transformer_options["patches_replace"]["dit"][("double_block", i)]` replaces block i: called
  with `{"img", "txt", "vec", "pe", "transformer_options"}` and `{"original_block": fn}`;
  `transformer_options["patches"]["double_block"]` functions get `{"img", "txt", "x",
  "block_index", "transformer_options"}` after block i and return `{"img", "txt"}`.
- `control["input"][i]` (a ControlNet's residuals) is added to the first image tokens after
  block i.
- `attention_mask` `[B, Nt]` (optional, 1 = keep a text token) masks text keys, as diffusers'
  `encoder_hidden_states_mask`; ComfyUI's QwenImage model passes none.

Where ComfyUI and diffusers differ, ComfyUI is followed: an odd number of patch rows (columns)
is centred as -k..k (diffusers: -(k+1)..k-1), and the text positions start after the main
image only (diffusers: after the largest of the image and its references).
"""
from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Mapping, Sequence

import torch
import torch.nn.functional as F
from torch import nn

from comfy_core.families.flux import math as flux_math
from comfy_core.families.flux.blocks import EmbedND, timestep_embedding
from comfy_core.families.flux.dit import pad_to_patch_size
from comfy_core.families.sd3.mmdit_blocks import RMSNorm
from comfy_core.models.comfyui_names import comfyui_name
from comfy_core.models.unet_blocks import operations_or_default
from comfy_core.models.weight_shapes import count_numbered, shape_reader
from comfy_core.wrappers import run_split_blocks

IMAGE_MODEL = "qwen_image"
REF_LATENTS_METHODS = ("index", "offset", "uxo", "index_timestep_zero", "negative_index")
# Qwen-Image-Edit-2511's files carry this empty tensor: reference tokens modulated at timestep 0.
TIMESTEP_ZERO_MARKER = "__index_timestep_zero__"
# Qwen-Image-Layered's extra timestep embedding (its files carry it; its references default to
# "negative_index").
LAYERED_MARKER = "time_text_embed.addition_t_embedding.weight"
PATCH = 2
ROPE_THETA = 10000


def double_block_shapes(layers: int, hidden: int, head_dim: int, mlp_hidden: int) -> dict[str, tuple[int, ...]]:
    """The weight shapes of `layers` Qwen-Image double-stream blocks (names under the network), which a
    file's blocks must have (Qwen-Image's and Mage-Flow's detection check them all)."""
    shapes: dict[str, tuple[int, ...]] = {}
    for i in range(layers):
        block = f"transformer_blocks.{i}."
        for stream in ("img", "txt"):
            shapes[f"{block}{stream}_mod.1.weight"] = (6 * hidden, hidden)
            shapes[f"{block}{stream}_mlp.net.0.proj.weight"] = (mlp_hidden, hidden)
            shapes[f"{block}{stream}_mlp.net.2.weight"] = (hidden, mlp_hidden)
        for name in ("to_q", "to_k", "to_v", "add_q_proj", "add_k_proj", "add_v_proj", "to_out.0", "to_add_out"):
            shapes[f"{block}attn.{name}.weight"] = (hidden, hidden)
        for name in ("norm_q", "norm_k", "norm_added_q", "norm_added_k"):
            shapes[f"{block}attn.{name}.weight"] = (head_dim,)
    return shapes


class QwenImageConfigError(ValueError):
    """The Qwen-Image weights are incomplete or inconsistent, or the parameters are impossible."""


class QwenImageInputError(ValueError):
    """An input the Qwen-Image network cannot take (rank, channels, reference method)."""


def default_axes_dims(head_dim: int) -> tuple[int, int, int]:
    """RoPE channels per axis (frame, row, col): Qwen-Image's 128-channel heads split 16 / 56 / 56
    (ComfyUI's and diffusers' default, not in the weights); other widths (tiny test models) in
    the same proportions: row and col 7/16 of the head each (even), the frame axis the rest."""
    spatial = (head_dim * 7 // 16) // 2 * 2
    frame = head_dim - 2 * spatial
    if head_dim % 2 or spatial < 2 or frame < 2:
        raise QwenImageConfigError(f"Qwen-Image: a head of {head_dim} channels cannot carry 3-axis RoPE")
    return frame, spatial, spatial


@dataclass(frozen=True)
class QwenImageConfig:
    """ComfyUI's `QwenImageTransformer2DModel` arguments (the Qwen-Image 20B defaults) plus what
    the weights show beyond them (the MLP width). `in_channels` counts a token's channels (16
    latent channels x 2x2 patch = 64), `out_channels` the latent channels."""

    patch_size: int = PATCH
    in_channels: int = 64
    out_channels: int = 16
    num_layers: int = 60
    attention_head_dim: int = 128
    num_attention_heads: int = 24
    joint_attention_dim: int = 3584
    mlp_hidden_dim: int = 12288
    axes_dims_rope: tuple[int, int, int] = (16, 56, 56)
    default_ref_method: str = "index"
    use_additional_t_cond: bool = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "axes_dims_rope", tuple(int(a) for a in self.axes_dims_rope))
        if self.patch_size != PATCH:
            raise QwenImageConfigError(f"Qwen-Image: only {PATCH}x{PATCH} patches, got {self.patch_size}")
        if self.in_channels % (self.patch_size ** 2):
            raise QwenImageConfigError(f"Qwen-Image: in_channels {self.in_channels} is not a multiple of the "
                                       f"patch area {self.patch_size ** 2}")
        if sum(self.axes_dims_rope) != self.attention_head_dim or any(a % 2 for a in self.axes_dims_rope):
            raise QwenImageConfigError(f"Qwen-Image: axes_dims_rope {list(self.axes_dims_rope)} must be even and sum "
                                       f"to the head width {self.attention_head_dim}")
        if self.default_ref_method not in REF_LATENTS_METHODS:
            raise QwenImageConfigError(f"Qwen-Image: default_ref_method {self.default_ref_method!r} is not one of "
                                       f"{REF_LATENTS_METHODS}")

    @property
    def hidden_size(self) -> int:
        return self.num_attention_heads * self.attention_head_dim

    @property
    def latent_channels(self) -> int:
        return self.in_channels // (self.patch_size ** 2)

    def params(self) -> dict[str, Any]:
        params = asdict(self)
        params["axes_dims_rope"] = list(self.axes_dims_rope)
        return params

    def comfy_unet_config(self) -> dict[str, Any]:
        """ComfyUI's `unet_config` (its model_detection gives `image_model`, `in_channels`,
        `num_layers`, and `default_ref_method` for Edit-2511; the other arguments are ours)."""
        return {"image_model": IMAGE_MODEL, **self.params()}

    @classmethod
    def detect_from_weights(cls, tensors: Mapping[str, Any], prefix: str = "",
                            final_layer: bool = True) -> "QwenImageConfig":
        """The structure under `prefix` from names and shapes only (a safetensors header is
        enough): the width from `img_in`, the head width from the QK-norm weight, the text width
        from `txt_norm`, the output channels from `proj_out`, the MLP width from `img_mlp`, the
        depth from the numbered `transformer_blocks.N`; every block's shapes checked. The RoPE
        split (`default_axes_dims`) is not in the weights. `final_layer=False`: a network without
        `norm_out` / `proj_out` (a Qwen-Image ControlNet), its output channels those of its input.
        Raises `QwenImageConfigError` naming the key when the weights are incomplete or
        inconsistent."""
        shape = shape_reader(tensors, prefix, QwenImageConfigError, "Qwen-Image")
        layered = prefix + LAYERED_MARKER in tensors
        hidden, in_channels = shape("img_in.weight")
        (joint,) = shape("txt_norm.weight")
        (head_dim,) = shape("transformer_blocks.0.attn.norm_q.weight")
        if head_dim <= 0 or hidden % head_dim:
            raise QwenImageConfigError(f"Qwen-Image: width {hidden} is not a multiple of the head width {head_dim} "
                                       f"({prefix}transformer_blocks.0.attn.norm_q.weight)")
        mlp_hidden = shape("transformer_blocks.0.img_mlp.net.0.proj.weight")[0]
        proj_out = shape("proj_out.weight") if final_layer else (in_channels, hidden)
        if proj_out[0] % (PATCH * PATCH):
            raise QwenImageConfigError(f"Qwen-Image: {prefix}proj_out.weight gives {proj_out[0]} channels, not a "
                                       f"multiple of the patch area {PATCH * PATCH}")
        expected = {"txt_in.weight": (hidden, joint),
                    "time_text_embed.timestep_embedder.linear_1.weight": (hidden, 256),
                    "time_text_embed.timestep_embedder.linear_2.weight": (hidden, hidden)}
        if final_layer:
            expected.update({"proj_out.weight": (proj_out[0], hidden), "norm_out.linear.weight": (2 * hidden, hidden)})
        layers = count_numbered(tensors, prefix, "transformer_blocks", QwenImageConfigError, "Qwen-Image")
        expected.update(double_block_shapes(layers, hidden, head_dim, mlp_hidden))
        if layered:
            expected[LAYERED_MARKER] = (2, hidden)
        for key, want in expected.items():
            found = shape(key)
            if found != want:
                raise QwenImageConfigError(f"Qwen-Image: {prefix}{key} has shape {found}, expected {want}")
        method = "index_timestep_zero" if prefix + TIMESTEP_ZERO_MARKER in tensors else "index"
        if layered:  # ComfyUI's model detection: Layered's input image sits on frame -1
            method = "negative_index"
        return cls(patch_size=PATCH, in_channels=in_channels, out_channels=proj_out[0] // (PATCH * PATCH),
                   num_layers=layers, attention_head_dim=head_dim, num_attention_heads=hidden // head_dim,
                   joint_attention_dim=joint, mlp_hidden_dim=mlp_hidden, axes_dims_rope=default_axes_dims(head_dim),
                   default_ref_method=method, use_additional_t_cond=layered)


# --- blocks ------------------------------------------------------------------------------------------

class GELU(nn.Module):
    """`proj` then GELU with the tanh approximation (diffusers' `GELU(approximate="tanh")`)."""

    def __init__(self, dim_in: int, dim_out: int, ops: Any, factory: dict[str, Any]) -> None:
        super().__init__()
        self.proj = ops.Linear(dim_in, dim_out, bias=True, **factory)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.gelu(self.proj(x), approximate="tanh")


class FeedForward(nn.Module):
    """`net.0` (GELU-tanh projection), `net.1` (dropout, none at inference), `net.2` (output)."""

    def __init__(self, dim: int, inner: int, ops: Any, factory: dict[str, Any]) -> None:
        super().__init__()
        self.net = nn.ModuleList([GELU(dim, inner, ops, factory), nn.Identity(),
                                  ops.Linear(inner, dim, bias=True, **factory)])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.net:
            x = layer(x)
        return x


class TimestepEmbedder(nn.Module):
    """`linear_1` (256 -> width), SiLU, `linear_2` (diffusers' `TimestepEmbedding`)."""

    def __init__(self, dim: int, ops: Any, factory: dict[str, Any]) -> None:
        super().__init__()
        self.linear_1 = ops.Linear(256, dim, bias=True, **factory)
        self.linear_2 = ops.Linear(dim, dim, bias=True, **factory)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear_2(F.silu(self.linear_1(x)))


class TimeTextEmbed(nn.Module):
    """The conditioning vector from the timestep alone: sinusoids of `1000 * t` (cos half first,
    256 channels) through `timestep_embedder` (ComfyUI's / diffusers' `QwenTimestepProjEmbeddings`).
    Qwen-Image-Layered adds a learnt row of `addition_t_embedding` (2 rows) chosen per sample by
    `addition_t_cond` (0 when not given, as ComfyUI and diffusers' Layered pipeline use)."""

    def __init__(self, dim: int, ops: Any, factory: dict[str, Any], additional_t_cond: bool = False) -> None:
        super().__init__()
        self.timestep_embedder = TimestepEmbedder(dim, ops, factory)
        self.addition_t_embedding = nn.Embedding(2, dim, **factory) if additional_t_cond else None

    def forward(self, timestep: torch.Tensor, dtype: torch.dtype,
                addition_t_cond: torch.Tensor | None = None) -> torch.Tensor:
        proj = timestep_embedding(timestep.float(), 256)  # [B, 256] float32
        temb = self.timestep_embedder(proj.to(dtype))  # [B, D]
        if self.addition_t_embedding is None:
            if addition_t_cond is not None:
                raise QwenImageInputError("Qwen-Image: additional_t_cond given to a network without "
                                          "time_text_embed.addition_t_embedding (only Qwen-Image-Layered has it)")
            return temb
        if addition_t_cond is None:
            addition_t_cond = torch.zeros(temb.shape[0], dtype=torch.long, device=temb.device)
        addition_t_cond = addition_t_cond.reshape(-1).to(device=temb.device, dtype=torch.long)
        if addition_t_cond.shape[0] != temb.shape[0] or bool(((addition_t_cond < 0) | (addition_t_cond > 1)).any()):
            raise QwenImageInputError(f"Qwen-Image-Layered: additional_t_cond must be {temb.shape[0]} values in "
                                      f"{{0, 1}}, got {addition_t_cond.tolist()}")
        # The (2, D) table is cast whole: fp8-stored rows cannot be gathered in every torch build.
        return temb + self.addition_t_embedding.weight.to(device=temb.device, dtype=temb.dtype)[addition_t_cond]


class JointAttention(nn.Module):
    """The weights of the joint attention: image `to_q/k/v`, `to_out.0`; text `add_q/k/v_proj`,
    `to_add_out`; QK RMS norms per stream (`norm_q/k`, `norm_added_q/k`)."""

    def __init__(self, dim: int, heads: int, head_dim: int, ops: Any, factory: dict[str, Any]) -> None:
        super().__init__()
        self.heads = heads
        for name in ("to_q", "to_k", "to_v", "add_q_proj", "add_k_proj", "add_v_proj"):
            setattr(self, name, ops.Linear(dim, heads * head_dim, bias=True, **factory))
        for name in ("norm_q", "norm_k", "norm_added_q", "norm_added_k"):
            setattr(self, name, RMSNorm(head_dim, elementwise_affine=True, eps=1e-6, **factory))
        self.to_out = nn.ModuleList([ops.Linear(heads * head_dim, dim, bias=True, **factory), nn.Identity()])
        self.to_add_out = ops.Linear(heads * head_dim, dim, bias=True, **factory)

    def _heads(self, x: torch.Tensor, norm: nn.Module | None = None) -> torch.Tensor:
        x = x.unflatten(-1, (self.heads, -1))  # [B, L, H, d]
        return (x if norm is None else norm(x)).transpose(1, 2)  # [B, H, L, d]

    def forward(self, img: torch.Tensor, txt: torch.Tensor, pe: torch.Tensor | None, mask: torch.Tensor | None,
                transformer_options: dict[str, Any]) -> tuple[torch.Tensor, torch.Tensor]:
        """img `[B, Ni, D]`, txt `[B, Nt, D]`, pe `[B, 1, Nt+Ni, d/2, 2, 2]` -> the two streams' outputs."""
        q = torch.cat([self._heads(self.add_q_proj(txt), self.norm_added_q), self._heads(self.to_q(img), self.norm_q)],
                      dim=2)  # [B, H, Nt+Ni, d]
        k = torch.cat([self._heads(self.add_k_proj(txt), self.norm_added_k), self._heads(self.to_k(img), self.norm_k)],
                      dim=2)
        v = torch.cat([self._heads(self.add_v_proj(txt)), self._heads(self.to_v(img))], dim=2)
        out = flux_math.run_attention(q, k, v, pe=pe, mask=mask, transformer_options=transformer_options)
        n_txt = txt.shape[1]
        return self.to_out[0](out[:, n_txt:]), self.to_add_out(out[:, :n_txt])  # [B, Ni, D], [B, Nt, D]


def modulate(x: torch.Tensor, mod: torch.Tensor, split: int | None) -> tuple[torch.Tensor, torch.Tensor]:
    """adaLN: `x * (1 + scale) + shift` and the gate from `mod` `[B, 3D]` (shift, scale, gate).
    `split` (Edit-2511): `mod` is `[2B, 3D]`, the first B rows for tokens before `split`, the
    last B (timestep 0) for the reference tokens after it."""
    shift, scale, gate = mod.chunk(3, dim=-1)  # [B or 2B, D] each
    if split is None:
        return x * (1 + scale.unsqueeze(1)) + shift.unsqueeze(1), gate.unsqueeze(1)
    b = x.shape[0]
    tokens = torch.arange(x.shape[1], device=x.device).view(1, -1, 1) < split  # [1, L, 1]

    def pick(p: torch.Tensor) -> torch.Tensor:
        return torch.where(tokens, p[:b].unsqueeze(1), p[b:].unsqueeze(1))  # [B, L, D]

    return x * (1 + pick(scale)) + pick(shift), pick(gate)


class QwenImageTransformerBlock(nn.Module):
    """One double-stream block (names: `img_mod.1`, `txt_mod.1`, `attn.*`, `img_mlp`, `txt_mlp`;
    the LayerNorms have no weights)."""

    def __init__(self, dim: int, heads: int, head_dim: int, mlp_hidden: int, ops: Any, factory: dict[str, Any]) -> None:
        super().__init__()
        self.img_mod = nn.Sequential(nn.SiLU(), ops.Linear(dim, 6 * dim, bias=True, **factory))
        self.txt_mod = nn.Sequential(nn.SiLU(), ops.Linear(dim, 6 * dim, bias=True, **factory))
        self.attn = JointAttention(dim, heads, head_dim, ops, factory)
        self.img_mlp = FeedForward(dim, mlp_hidden, ops, factory)
        self.txt_mlp = FeedForward(dim, mlp_hidden, ops, factory)

    def forward(self, hidden_states: torch.Tensor, encoder_hidden_states: torch.Tensor, temb: torch.Tensor,
                image_rotary_emb: torch.Tensor | None, attention_mask: torch.Tensor | None = None,
                timestep_zero_index: int | None = None,
                transformer_options: dict[str, Any] | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """hidden_states (image) `[B, Ni, D]`, encoder_hidden_states (text) `[B, Nt, D]`, temb
        `[B, D]` (`[2B, D]` with `timestep_zero_index`) -> (text, image), ComfyUI's order."""
        img, txt = hidden_states, encoder_hidden_states
        img_mod1, img_mod2 = self.img_mod(temb).chunk(2, dim=-1)  # [B|2B, 3D] each
        txt_temb = temb if timestep_zero_index is None else temb[:img.shape[0]]
        txt_mod1, txt_mod2 = self.txt_mod(txt_temb).chunk(2, dim=-1)
        dim = img.shape[-1]
        img_in, img_gate1 = modulate(F.layer_norm(img, (dim,), eps=1e-6), img_mod1, timestep_zero_index)
        txt_in, txt_gate1 = modulate(F.layer_norm(txt, (dim,), eps=1e-6), txt_mod1, None)
        img_attn, txt_attn = self.attn(img_in, txt_in, image_rotary_emb, attention_mask, transformer_options or {})
        img = img + img_gate1 * img_attn
        txt = txt + txt_gate1 * txt_attn
        img_in2, img_gate2 = modulate(F.layer_norm(img, (dim,), eps=1e-6), img_mod2, timestep_zero_index)
        img = img + img_gate2 * self.img_mlp(img_in2)
        txt_in2, txt_gate2 = modulate(F.layer_norm(txt, (dim,), eps=1e-6), txt_mod2, None)
        txt = txt + txt_gate2 * self.txt_mlp(txt_in2)
        if img.dtype == torch.float16:  # keep fp16 finite, as diffusers
            img, txt = img.clip(-65504, 65504), txt.clip(-65504, 65504)
        return txt, img


class LastLayer(nn.Module):
    """`norm_out`: LayerNorm (no weights) then `x * (1 + scale) + shift` from `linear(SiLU(temb))`,
    scale first (diffusers' `AdaLayerNormContinuous`)."""

    def __init__(self, dim: int, ops: Any, factory: dict[str, Any]) -> None:
        super().__init__()
        self.linear = ops.Linear(dim, 2 * dim, bias=True, **factory)

    def forward(self, x: torch.Tensor, temb: torch.Tensor) -> torch.Tensor:
        scale, shift = self.linear(F.silu(temb)).chunk(2, dim=1)  # [B, D] each
        return F.layer_norm(x, (x.shape[-1],), eps=1e-6) * (1 + scale[:, None]) + shift[:, None]


# --- the network -------------------------------------------------------------------------------------

def image_tokens(x: torch.Tensor, p: int, index: int = 0, h_offset: int = 0,
                 w_offset: int = 0) -> tuple[torch.Tensor, torch.Tensor, tuple[int, int]]:
    """`x` `[B, C, H, W]` or `[B, C, T, H, W]` padded (circularly) and cut into `p x p` patches:
    tokens `[B, T*h*w, C*p*p]` (frame, row, col order; channel-major within a token), their ids
    `[B, T*h*w, 3]` float32 = (frame, row, col) with rows and columns centred on 0 (`i - n // 2`)
    and shifted by the offsets (latent pixels, rounded to patches), and the grid `(h, w)` in
    patches. The frame id is `index` for one frame; several frames (Qwen-Image-Layered's layers)
    are numbered 0..T-1 whatever `index` is, as ComfyUI's `process_img`."""
    x5 = x if x.ndim == 5 else x.unsqueeze(2)  # [B, C, T, H, W]
    b, c, t = x5.shape[:3]
    x5 = pad_to_patch_size(x5.flatten(1, 2), (p, p)).unflatten(1, (c, t))
    h_len, w_len = x5.shape[-2] // p, x5.shape[-1] // p
    tokens = x5.reshape(b, c, t, h_len, p, w_len, p).permute(0, 2, 3, 5, 1, 4, 6).reshape(b, t * h_len * w_len,
                                                                                          c * p * p)
    h_offset, w_offset = (h_offset + p // 2) // p, (w_offset + p // 2) // p
    frames = torch.arange(t, device=x.device, dtype=torch.float32) if t > 1 else \
        torch.full((1,), float(index), device=x.device)
    rows = torch.arange(h_len, device=x.device, dtype=torch.float32) + h_offset - h_len // 2
    cols = torch.arange(w_len, device=x.device, dtype=torch.float32) + w_offset - w_len // 2
    grid = (t, h_len, w_len)
    ids = torch.stack([frames.view(-1, 1, 1).expand(grid), rows.view(1, -1, 1).expand(grid),
                       cols.view(1, 1, -1).expand(grid)], dim=-1)  # [T, h, w, 3]
    return tokens, ids.reshape(1, t * h_len * w_len, 3).expand(b, -1, -1), (h_len, w_len)


def _check_rank(x: torch.Tensor, what: str) -> torch.Tensor:
    """A 4-D latent `[B, C, H, W]` or a 5-D one `[B, C, T, H, W]` (T frames: Layered's layers)."""
    if x.ndim not in (4, 5) or (x.ndim == 5 and x.shape[2] < 1):
        raise QwenImageInputError(f"Qwen-Image: {what} must be [B, C, H, W] or [B, C, T, H, W], got "
                                  f"{tuple(x.shape)}")
    return x


@comfyui_name("QwenImageTransformer2DModel")
class QwenImageTransformer(nn.Module):
    """The Qwen-Image MMDiT (see the module docstring); `params` are `QwenImageConfig`'s fields."""

    # DIFFUSION_MODEL wrappers' positional arguments, ComfyUI's `_forward` order (comfy_core/models/diffusion.py)
    wrapper_arguments = ("x", "timesteps", "context", "attention_mask", "guidance", "ref_latents",
                         "transformer_options")

    def __init__(self, image_model: Any = None, final_layer: bool = True, dtype: Any = None, device: Any = None,
                 operations: Any = None, **params: Any) -> None:
        super().__init__()
        ops = operations_or_default(operations)
        try:
            config = QwenImageConfig(**params)
        except TypeError as error:
            raise QwenImageConfigError(f"Qwen-Image: {error}") from None
        factory = {"dtype": dtype, "device": device}
        dim = config.hidden_size
        self.dtype = dtype
        self.config = config
        self.patch_size = config.patch_size
        self.in_channels = config.in_channels
        self.out_channels = config.out_channels
        self.inner_dim = dim
        self.pe_embedder = EmbedND(dim=config.attention_head_dim, theta=ROPE_THETA, axes_dim=config.axes_dims_rope)
        self.time_text_embed = TimeTextEmbed(dim, ops, factory, config.use_additional_t_cond)
        self.txt_norm = RMSNorm(config.joint_attention_dim, elementwise_affine=True, eps=1e-6, **factory)
        self.img_in = ops.Linear(config.in_channels, dim, bias=True, **factory)
        self.txt_in = ops.Linear(config.joint_attention_dim, dim, bias=True, **factory)
        self.transformer_blocks = nn.ModuleList(
            QwenImageTransformerBlock(dim, config.num_attention_heads, config.attention_head_dim,
                                      config.mlp_hidden_dim, ops, factory)
            for _ in range(config.num_layers))
        if final_layer:
            self.norm_out = LastLayer(dim, ops, factory)
            self.proj_out = ops.Linear(dim, config.patch_size ** 2 * config.out_channels, bias=True, **factory)

    @classmethod
    def from_config(cls, config: QwenImageConfig, **kwargs: Any) -> "QwenImageTransformer":
        return cls(**kwargs, **config.params())

    def lora_key_map(self, names: list[str]) -> dict[str, Any]:
        """LoRA layer name -> target (`comfy_core.lora.dit_keymap`; the spellings: `keys.lora_key_map`)."""
        from comfy_core.families.qwen_image.keys import lora_key_map

        return lora_key_map(names)

    def reference_tokens(self, refs: Sequence[torch.Tensor], method: str,
                         batch: int) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
        """The tokens and ids of the reference latents (see the module docstring for the methods)."""
        if method not in REF_LATENTS_METHODS:
            raise QwenImageInputError(f"Qwen-Image: unknown ref_latents_method {method!r}; expected one of "
                                      f"{REF_LATENTS_METHODS}")
        tokens, ids = [], []
        h = w = index = 0
        for ref in refs:
            ref = _check_rank(ref, "a reference latent")
            if ref.shape[1] * self.patch_size ** 2 != self.in_channels:
                raise QwenImageInputError(f"Qwen-Image: a reference latent has {ref.shape[1]} channels, the network "
                                          f"takes {self.in_channels // self.patch_size ** 2}")
            if ref.shape[0] != batch:
                if batch % ref.shape[0]:
                    raise QwenImageInputError(f"Qwen-Image: a reference latent of batch {ref.shape[0]} does not "
                                              f"tile the batch {batch}")
                ref = ref.repeat(batch // ref.shape[0], *([1] * (ref.ndim - 1)))
            h_offset = w_offset = 0
            if method in ("offset", "uxo"):
                index = 1
                if ref.shape[-2] + h > ref.shape[-1] + w:
                    w_offset = w
                else:
                    h_offset = h
                h = max(h, ref.shape[-2] + h_offset)
                w = max(w, ref.shape[-1] + w_offset)
            elif method == "negative_index":  # Qwen-Image-Layered: the input image on frame -1
                index -= 1
            else:
                index += 1
            t, i, _ = image_tokens(ref, self.patch_size, index, h_offset, w_offset)
            tokens.append(t)
            ids.append(i)
        return tokens, ids

    def forward(self, x: torch.Tensor, timestep: torch.Tensor, context: torch.Tensor,
                attention_mask: torch.Tensor | None = None, guidance: torch.Tensor | None = None,
                ref_latents: Sequence[torch.Tensor] | None = None, transformer_options: Mapping[str, Any] = {},
                control: Mapping[str, Any] | None = None, **kwargs: Any) -> torch.Tensor:
        """x `[B, C, H, W]` or `[B, C, T, H, W]` (T > 1: Qwen-Image-Layered's layers, frames 0..T-1),
        timestep (sigma) `[B]`, context `[B, Nt, joint_attention_dim]`, ref_latents: latents of
        any size (4-D or 5-D), `additional_t_cond` (Layered: `[B]` of 0/1, default 0) -> the
        velocity in x's shape. `guidance` is ignored (Qwen-Image has no guidance embedding), as
        ComfyUI's."""
        _check_rank(x, "the latent")
        bs, c, h_orig, w_orig = x.shape[0], x.shape[1], x.shape[-2], x.shape[-1]
        frames = x.shape[2] if x.ndim == 5 else 1
        if c * self.patch_size ** 2 != self.in_channels:
            raise QwenImageInputError(f"Qwen-Image: the latent has {c} channels, the network takes "
                                      f"{self.in_channels // self.patch_size ** 2}")
        if context.ndim != 3 or context.shape[-1] != self.config.joint_attention_dim:
            raise QwenImageInputError(f"Qwen-Image: context must be [B, tokens, {self.config.joint_attention_dim}], "
                                      f"got {tuple(context.shape)}")
        options = dict(transformer_options or {})
        p = self.patch_size
        img, img_ids, (h_len, w_len) = image_tokens(x, p)
        n_img = img.shape[1]
        split = None
        if ref_latents:
            method = kwargs.get("ref_latents_method") or options.get("ref_latents_method") \
                or self.config.default_ref_method
            tokens, ids = self.reference_tokens(ref_latents, method, bs)
            img = torch.cat([img, *tokens], dim=1)  # [B, Ni + Nref, C*p*p]
            img_ids = torch.cat([img_ids, *ids], dim=1)
            if method == "index_timestep_zero":
                split = n_img
        txt_start = max(h_len // 2, w_len // 2)
        n_txt = context.shape[1]
        txt_ids = (torch.arange(n_txt, device=x.device, dtype=torch.float32) + txt_start).view(1, -1, 1)
        txt_ids = txt_ids.expand(bs, n_txt, 3)
        pe = self.pe_embedder(torch.cat([txt_ids, img_ids], dim=1))  # [B, 1, Nt+Ni, d/2, 2, 2]

        # Computed in x's dtype (the model's compute dtype: fp8-stored layers cast their weights).
        hidden = self.img_in(img)  # [B, Ni, D]
        txt = self.txt_in(self.txt_norm(context.to(x.dtype)))  # [B, Nt, D]
        timestep = timestep.reshape(-1)
        if split is not None:
            timestep = torch.cat([timestep, timestep * 0])  # [2B]: the references at timestep 0
        addition_t_cond = kwargs.get("additional_t_cond")
        if addition_t_cond is not None and split is not None:
            addition_t_cond = torch.cat([addition_t_cond.reshape(-1)] * 2)
        temb = self.time_text_embed(timestep, hidden.dtype, addition_t_cond)  # [B|2B, D]
        mask = None
        if attention_mask is not None:
            if attention_mask.shape != (bs, n_txt):
                raise QwenImageInputError(f"Qwen-Image: attention_mask must be [B, tokens] = {(bs, n_txt)}, got "
                                          f"{tuple(attention_mask.shape)}")
            keep = torch.cat([attention_mask.to(torch.bool),
                              torch.ones(bs, hidden.shape[1], dtype=torch.bool, device=x.device)], dim=1)
            mask = keep[:, None, None, :]  # [B, 1, 1, Nt+Ni]

        hidden, txt = self._blocks(hidden, txt, temb, pe, mask, split, x, options, control)
        base = temb if split is None else temb[:bs]
        out = self.proj_out(self.norm_out(hidden, base))[:, :n_img]  # [B, Ni, out*p*p]
        out = out.reshape(bs, frames, h_len, w_len, self.out_channels, p, p).permute(0, 4, 1, 2, 5, 3, 6)
        out = out.reshape(bs, self.out_channels, frames, h_len * p, w_len * p)[..., :h_orig, :w_orig]
        return out if x.ndim == 5 else out[:, :, 0]

    def _blocks(self, img: torch.Tensor, txt: torch.Tensor, temb: torch.Tensor, pe: torch.Tensor,
                mask: torch.Tensor | None, split: int | None, x: torch.Tensor, options: dict[str, Any],
                control: Mapping[str, Any] | None) -> tuple[torch.Tensor, torch.Tensor]:
        """The transformer blocks with ComfyUI's patch points (see the module docstring)."""
        blocks_replace = (options.get("patches_replace", {}) or {}).get("dit", {}) or {}
        patches = (options.get("patches", {}) or {}).get("double_block", ()) or ()
        options["total_blocks"] = len(self.transformer_blocks)
        options["block_type"] = "double"

        def run(streams: dict, indices: range) -> dict:
            img, txt = streams["img"], streams["txt"]
            for i in indices:
                block = self.transformer_blocks[i]
                options["block_index"] = i
                if ("double_block", i) in blocks_replace:
                    def original(args: dict, block: nn.Module = block) -> dict:
                        out_txt, out_img = block(args["img"], args["txt"], args["vec"], args["pe"], mask, split,
                                                 args.get("transformer_options"))
                        return {"img": out_img, "txt": out_txt}

                    out = blocks_replace[("double_block", i)](
                        {"img": img, "txt": txt, "vec": temb, "pe": pe, "transformer_options": options},
                        {"original_block": original})
                    img, txt = out["img"], out["txt"]
                else:
                    txt, img = block(img, txt, temb, pe, mask, split, options)
                for patch in patches:
                    out = patch({"img": img, "txt": txt, "x": x, "block_index": i, "transformer_options": options})
                    img, txt = out.get("img", img), out.get("txt", txt)
                if control is not None:
                    adds = control.get("input") or ()
                    if i < len(adds) and adds[i] is not None:
                        img[:, :adds[i].shape[1]] += adds[i]
            return {"img": img, "txt": txt}

        # the first block, then the rest: the first-block hook point (comfy_core/wrappers.py)
        n = len(self.transformer_blocks)
        first = range(min(1, n))
        out = run_split_blocks(options, lambda streams: run(streams, first),
                               lambda streams: run(streams, range(len(first), n)), {"img": img, "txt": txt})
        return out["img"], out["txt"]

