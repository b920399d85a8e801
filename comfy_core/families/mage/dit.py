"""Mage-Flow's DiT (Microsoft Mage, "Mage-Flow": a 4B native-resolution MMDiT) and `MageFlowConfig`
read from weights.

Qwen-Image's double-stream block (`comfy_core/families/qwen_image/dit.py`: the same module names,
LayerNorms without weights, per-head RMS norms on q / k, GELU-tanh MLPs, joint attention over
`[text, image]`, adaLN from the timestep alone) reused as it is, in a smaller network (the release:
3072 wide, 24 heads of 128, 12 blocks, MLP 12288, text width 2560 = Qwen3-VL 4B) with four
differences, read from the stored implementations (vLLM-Omni's `mage_flow` transformer layers,
which keep the upstream checkpoint's names; a Scala port describing the released shapes; a port
notes file quoting ComfyUI's `comfy/ldm/mage_flow/model.py` and `model_base.MageFlow`):

- patch 1: every latent pixel of the 128-channel latent (Flux.2's VAE-anchored space, no packing)
  is one token, `img_in` `[D, 128]`, `proj_out` `[128, D]`;
- positions: 3 RoPE axes (image index, row, column; 16 / 56 / 56 channels of a 128-channel head,
  theta 10000, adjacent pairs rotated), the target on index 0 and reference k on index k, rows
  and columns centred as `r - ceil(n / 2)` (Qwen-Image: `r - n // 2`); the text is not rotated
  (every text position 0 on every axis);
- the timestep sinusoid (`1000 * sigma`, cosines first, 256 channels) is computed as the released
  model runs it in bf16: sigma and the frequency table rounded to bf16 before their product
  (ComfyUI's `model_base.MageFlow` keeps that rounding on purpose; upstream's comment: it moves
  the high frequencies by up to about a radian, so the fp32 table is not interchangeable);
- Mage-Flow-Edit's reference latents (`ref_latents`, each VAE-encoded at the output size) are
  appended to the image tokens on index 1, 2, ... (one row of the timestep embedding: the
  references are modulated at the sampled timestep), and the output is cut back to the target's
  tokens; only the "index" method exists.

State-dict names: diffusers-style, bare in the split files (Comfy-Org/Mage-Flow's
`mage_flow*_int8_convrot.safetensors`: `img_in`, `txt_norm`, `txt_in`,
`time_text_embed.timestep_embedder.linear_1/2`, `transformer_blocks.N.*`, `norm_out.linear`,
`proj_out`), as the upstream checkpoint; ComfyUI's own key layout for Mage is not stored here, so
these names are taken from upstream (unverified against ComfyUI's loader).
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any, Mapping, Sequence

import torch
from torch import nn

from comfy_core.families.flux.blocks import EmbedND
from comfy_core.families.qwen_image.dit import (LastLayer, QwenImageTransformer, QwenImageTransformerBlock,
                                                TimestepEmbedder, default_axes_dims, double_block_shapes)
from comfy_core.families.sd3.mmdit_blocks import RMSNorm
from comfy_core.models.comfyui_names import comfyui_name
from comfy_core.models.unet_blocks import operations_or_default
from comfy_core.models.weight_shapes import count_numbered, shape_reader

IMAGE_MODEL = "mage_flow"
LATENT_CHANNELS = 128  # the Mage-VAE's latent (Flux.2-anchored), one token per latent pixel
ROPE_THETA = 10000
TIME_CHANNELS = 256
REF_LATENTS_METHODS = ("index",)
# Qwen-Image's markers that a Mage-Flow file never carries (Layered's extra timestep row, 2511's flag).
QWEN_ONLY = ("time_text_embed.addition_t_embedding.weight", "__index_timestep_zero__")


class MageFlowConfigError(ValueError):
    """The Mage-Flow weights are incomplete or inconsistent, or the parameters are impossible."""


class MageFlowInputError(ValueError):
    """An input the Mage-Flow network cannot take (rank, channels, reference method)."""


@dataclass(frozen=True)
class MageFlowConfig:
    """The network's shape (the release's defaults); `in_channels` = latent channels (patch 1)."""

    in_channels: int = LATENT_CHANNELS
    num_layers: int = 12
    attention_head_dim: int = 128
    num_attention_heads: int = 24
    joint_attention_dim: int = 2560
    mlp_hidden_dim: int = 12288
    axes_dims_rope: tuple[int, int, int] = (16, 56, 56)

    def __post_init__(self) -> None:
        object.__setattr__(self, "axes_dims_rope", tuple(int(a) for a in self.axes_dims_rope))
        if sum(self.axes_dims_rope) != self.attention_head_dim or any(a % 2 for a in self.axes_dims_rope):
            raise MageFlowConfigError(f"Mage-Flow: axes_dims_rope {list(self.axes_dims_rope)} must be even and sum "
                                      f"to the head width {self.attention_head_dim}")

    @property
    def hidden_size(self) -> int:
        return self.num_attention_heads * self.attention_head_dim

    def params(self) -> dict[str, Any]:
        params = asdict(self)
        params["axes_dims_rope"] = list(self.axes_dims_rope)
        return params

    def comfy_unet_config(self) -> dict[str, Any]:
        """ComfyUI's `unet_config`: `image_model` plus our arguments."""
        return {"image_model": IMAGE_MODEL, **self.params()}

    @classmethod
    def detect_from_weights(cls, tensors: Mapping[str, Any], prefix: str = "") -> "MageFlowConfig":
        """The structure under `prefix` from names and shapes only: Qwen-Image's names with a
        patch-1 input and output of the 128 latent channels (`img_in` `[D, 128]`, `proj_out`
        `[128, D]`: Qwen-Image's are 64 = 16 x 2x2), and none of Qwen-Image's variant markers;
        widths, heads (from the q-norm width), depth, MLP and text widths read, every block's
        shapes checked. Raises `MageFlowConfigError` naming the key otherwise."""
        shape = shape_reader(tensors, prefix, MageFlowConfigError, "Mage-Flow")
        for marker in QWEN_ONLY:
            if prefix + marker in tensors:
                raise MageFlowConfigError(f"Mage-Flow: {prefix}{marker} belongs to a Qwen-Image variant")
        hidden, in_channels = shape("img_in.weight")
        if in_channels != LATENT_CHANNELS:
            raise MageFlowConfigError(f"Mage-Flow: {prefix}img_in.weight takes {in_channels} channels, not the "
                                      f"{LATENT_CHANNELS} latent channels of one latent pixel")
        (joint,) = shape("txt_norm.weight")
        (head_dim,) = shape("transformer_blocks.0.attn.norm_q.weight")
        if head_dim <= 0 or hidden % head_dim:
            raise MageFlowConfigError(f"Mage-Flow: width {hidden} is not a multiple of the head width {head_dim}")
        mlp_hidden = shape("transformer_blocks.0.img_mlp.net.0.proj.weight")[0]
        expected = {"txt_in.weight": (hidden, joint), "proj_out.weight": (LATENT_CHANNELS, hidden),
                    "time_text_embed.timestep_embedder.linear_1.weight": (hidden, TIME_CHANNELS),
                    "time_text_embed.timestep_embedder.linear_2.weight": (hidden, hidden),
                    "norm_out.linear.weight": (2 * hidden, hidden)}
        layers = count_numbered(tensors, prefix, "transformer_blocks", MageFlowConfigError, "Mage-Flow")
        expected.update(double_block_shapes(layers, hidden, head_dim, mlp_hidden))
        for key, want in expected.items():
            found = shape(key)
            if found != want:
                raise MageFlowConfigError(f"Mage-Flow: {prefix}{key} has shape {found}, expected {want}")
        try:
            axes = default_axes_dims(head_dim)  # 16 / 56 / 56 for heads of 128 (the Scala port's rule too)
        except ValueError as error:
            raise MageFlowConfigError(str(error)) from None
        return cls(in_channels=in_channels, num_layers=layers, attention_head_dim=head_dim,
                   num_attention_heads=hidden // head_dim, joint_attention_dim=joint, mlp_hidden_dim=mlp_hidden,
                   axes_dims_rope=axes)


def mage_timestep_sinusoid(timestep: torch.Tensor, dim: int = TIME_CHANNELS, max_period: float = 10000.0
                           ) -> torch.Tensor:
    """`[B]` sigma -> `[B, dim]` float32: `[cos, sin]` of `1000 * sigma * f_i`, `f_i =
    exp(-ln(max_period) * i / (dim / 2))`, with sigma and `f` rounded to bf16 first (the released
    model's arithmetic: upstream `get_timestep_embedding` casts the table to the timestep's
    dtype, and ComfyUI runs Mage's timestep in bf16); the product in float32."""
    half = dim // 2
    t = timestep.reshape(-1).to(torch.bfloat16).float()
    exponent = -math.log(max_period) * torch.arange(half, dtype=torch.float32, device=timestep.device) / half
    freqs = torch.exp(exponent).to(torch.bfloat16).float()  # [half]
    args = 1000.0 * t[:, None] * freqs[None, :]  # [B, half]
    return torch.cat([torch.cos(args), torch.sin(args)], dim=-1)


class MageTimeEmbed(nn.Module):
    """`time_text_embed`: Mage's rounded sinusoid through `timestep_embedder` (256 -> D -> D)."""

    def __init__(self, dim: int, ops: Any, factory: dict[str, Any]) -> None:
        super().__init__()
        self.timestep_embedder = TimestepEmbedder(dim, ops, factory)

    def forward(self, timestep: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
        return self.timestep_embedder(mage_timestep_sinusoid(timestep).to(dtype))  # [B, D]


def image_ids(h: int, w: int, index: int, device: Any) -> torch.Tensor:
    """`[h*w, 3]` float32 positions of an `h x w` latent (row-major): (index, r - ceil(h/2),
    c - ceil(w/2))."""
    rows = torch.arange(h, device=device, dtype=torch.float32) - (h - h // 2)
    cols = torch.arange(w, device=device, dtype=torch.float32) - (w - w // 2)
    grid = (h, w)
    ids = torch.stack([torch.full(grid, float(index), device=device), rows.view(-1, 1).expand(grid),
                       cols.view(1, -1).expand(grid)], dim=-1)
    return ids.reshape(h * w, 3)


def _tokens(x: torch.Tensor) -> torch.Tensor:
    """`[B, C, h, w]` -> `[B, h*w, C]` (one token per latent pixel, row-major)."""
    return x.flatten(2).transpose(1, 2)


@comfyui_name("MageFlow")
class MageFlowTransformer(nn.Module):
    """The Mage-Flow DiT (see the module docstring); `params` are `MageFlowConfig`'s fields."""

    def __init__(self, image_model: Any = None, dtype: Any = None, device: Any = None, operations: Any = None,
                 **params: Any) -> None:
        super().__init__()
        ops = operations_or_default(operations)
        try:
            config = MageFlowConfig(**params)
        except TypeError as error:
            raise MageFlowConfigError(f"Mage-Flow: {error}") from None
        factory = {"dtype": dtype, "device": device}
        dim = config.hidden_size
        self.dtype = dtype
        self.config = config
        self.patch_size = 1
        self.in_channels = self.out_channels = config.in_channels
        self.inner_dim = dim
        self.pe_embedder = EmbedND(dim=config.attention_head_dim, theta=ROPE_THETA, axes_dim=config.axes_dims_rope)
        self.time_text_embed = MageTimeEmbed(dim, ops, factory)
        self.txt_norm = RMSNorm(config.joint_attention_dim, elementwise_affine=True, eps=1e-6, **factory)
        self.img_in = ops.Linear(config.in_channels, dim, bias=True, **factory)
        self.txt_in = ops.Linear(config.joint_attention_dim, dim, bias=True, **factory)
        self.transformer_blocks = nn.ModuleList(
            QwenImageTransformerBlock(dim, config.num_attention_heads, config.attention_head_dim,
                                      config.mlp_hidden_dim, ops, factory)
            for _ in range(config.num_layers))
        self.norm_out = LastLayer(dim, ops, factory)
        self.proj_out = ops.Linear(dim, config.in_channels, bias=True, **factory)

    @classmethod
    def from_config(cls, config: MageFlowConfig, **kwargs: Any) -> "MageFlowTransformer":
        return cls(**kwargs, **config.params())

    def lora_key_map(self, names: list[str]) -> dict[str, Any]:
        """LoRA layer name -> target: Qwen-Image's spellings (the same module names)."""
        from comfy_core.families.qwen_image.keys import lora_key_map

        return lora_key_map(names)

    # Qwen-Image's block loop with ComfyUI's patch points (`patches_replace` "dit" double blocks,
    # `patches` "double_block", ControlNet residuals, the first-block hook), on the same blocks.
    _blocks = QwenImageTransformer._blocks

    def _check_latent(self, x: torch.Tensor, what: str) -> torch.Tensor:
        if x.ndim == 5 and x.shape[2] == 1:
            x = x[:, :, 0]
        if x.ndim != 4 or x.shape[1] != self.in_channels:
            raise MageFlowInputError(f"Mage-Flow: {what} must be [B, {self.in_channels}, h, w], got {tuple(x.shape)}")
        return x

    def reference_tokens(self, refs: Sequence[torch.Tensor], method: str | None,
                         batch: int) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
        """The tokens `[B, h*w, C]` and ids `[h*w, 3]` of the reference latents, reference k (1, 2,
        ...) on image index k, each centred on its own grid."""
        if method not in (None, *REF_LATENTS_METHODS):
            raise MageFlowInputError(f"Mage-Flow: ref_latents_method {method!r} is not supported; Mage-Flow places "
                                     f"references by {REF_LATENTS_METHODS}")
        tokens, ids = [], []
        for index, ref in enumerate(refs, start=1):
            ref = self._check_latent(ref, "a reference latent")
            if ref.shape[0] != batch:
                if batch % ref.shape[0]:
                    raise MageFlowInputError(f"Mage-Flow: a reference latent of batch {ref.shape[0]} does not tile "
                                             f"the batch {batch}")
                ref = ref.repeat(batch // ref.shape[0], 1, 1, 1)
            tokens.append(_tokens(ref))
            ids.append(image_ids(ref.shape[-2], ref.shape[-1], index, ref.device))
        return tokens, ids

    def forward(self, x: torch.Tensor, timestep: torch.Tensor, context: torch.Tensor,
                attention_mask: torch.Tensor | None = None, guidance: torch.Tensor | None = None,
                ref_latents: Sequence[torch.Tensor] | None = None, transformer_options: Mapping[str, Any] = {},
                control: Mapping[str, Any] | None = None, **kwargs: Any) -> torch.Tensor:
        """x `[B, 128, h, w]`, timestep (sigma) `[B]`, context `[B, Nt, joint_attention_dim]`,
        ref_latents: latents `[B or 1, 128, h', w']` of any size -> the velocity `[B, 128, h, w]`.
        `attention_mask` `[B, Nt]` (1 = keep) masks text keys; `guidance` is ignored."""
        five = x.ndim == 5
        x = self._check_latent(x, "the latent")
        bs, _, h, w = x.shape
        if context.ndim != 3 or context.shape[-1] != self.config.joint_attention_dim:
            raise MageFlowInputError(f"Mage-Flow: context must be [B, tokens, {self.config.joint_attention_dim}], "
                                     f"got {tuple(context.shape)}")
        options = dict(transformer_options or {})
        img = _tokens(x)  # [B, h*w, C]
        n_img = img.shape[1]
        ids = [image_ids(h, w, 0, x.device)]
        if ref_latents:
            method = kwargs.get("ref_latents_method") or options.get("ref_latents_method")
            tokens, ref_ids = self.reference_tokens(ref_latents, method, bs)
            img = torch.cat([img, *tokens], dim=1)  # [B, Ni + Nref, C]
            ids.extend(ref_ids)
        n_txt = context.shape[1]
        all_ids = torch.cat([torch.zeros(n_txt, 3, device=x.device), *ids], dim=0)  # text unrotated
        pe = self.pe_embedder(all_ids.unsqueeze(0).expand(bs, -1, -1))  # [B, 1, Nt+Ni, d/2, 2, 2]

        hidden = self.img_in(img)  # [B, Ni, D]
        txt = self.txt_in(self.txt_norm(context.to(x.dtype)))  # [B, Nt, D]
        temb = self.time_text_embed(timestep.reshape(-1), hidden.dtype)  # [B, D]
        mask = None
        if attention_mask is not None:
            if attention_mask.shape != (bs, n_txt):
                raise MageFlowInputError(f"Mage-Flow: attention_mask must be [B, tokens] = {(bs, n_txt)}, got "
                                         f"{tuple(attention_mask.shape)}")
            keep = torch.cat([attention_mask.to(torch.bool),
                              torch.ones(bs, hidden.shape[1], dtype=torch.bool, device=x.device)], dim=1)
            mask = keep[:, None, None, :]  # [B, 1, 1, Nt+Ni]
        hidden, txt = self._blocks(hidden, txt, temb, pe, mask, None, x, options, control)
        out = self.proj_out(self.norm_out(hidden[:, :n_img], temb))  # [B, h*w, C]
        out = out.transpose(1, 2).reshape(bs, self.out_channels, h, w)
        return out.unsqueeze(2) if five else out


__all__ = ["IMAGE_MODEL", "LATENT_CHANNELS", "MageFlowConfig", "MageFlowConfigError", "MageFlowInputError",
           "MageFlowTransformer", "image_ids", "mage_timestep_sinusoid"]
