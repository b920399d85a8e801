"""Qwen-Image ControlNets: the networks and their structure read from names and shapes.

Behaviour of ComfyUI's `comfy/ldm/qwen_image/controlnet.py` (`QwenImageControlNetModel`,
`QwenImageFunControlNetModel`) and `comfy/controlnet.py` (`load_controlnet_qwen_instantx`,
`load_controlnet_qwen_fun`), read there and written here; numerics of the first after diffusers'
`QwenImageControlNetModel`.

- InstantX's ControlNets (`Qwen-Image-ControlNet-Union`, `-Inpainting`; files hold
  `controlnet_blocks.N.weight` and a Qwen-Image transformer without `norm_out` / `proj_out`):
  the hint latent's 2x2 tokens go through `controlnet_x_embedder` (64 features, 68 for the
  inpainting one: 16 latent channels and the mask) and are added to `img_in`'s image tokens; the
  transformer blocks run as the main model's, and block `i`'s image tokens through
  `controlnet_blocks.i` are the residual of main blocks `i * r .. i * r + r - 1`, with
  `r = ceil(60 / blocks)` (ComfyUI spaces them over the released model's 60 blocks, whatever the
  main model's depth).
- VideoX-Fun's union ControlNets for Qwen-Image 2512 (`Qwen-Image-2512-Fun-Controlnet-Union`;
  `control_img_in.weight`, `control_blocks.N.after_proj.weight`): a VACE-like side stream of
  Qwen-Image transformer blocks that borrows the main model's input layers (`img_in`,
  `txt_norm`, `txt_in`, `time_text_embed`, RoPE). The hint latent (16 channels, plus one zero mask
  channel and 16 zero inpaint channels when the file takes 33) in 2x2 tokens through
  `control_img_in`; block 0 takes `before_proj(c) + image tokens`, each block the previous one's
  image output and text stream, and `after_proj` of block k's image output is the residual of
  main block `12 k` (blocks k = 0..4, ComfyUI's injection layers 0, 12, 24, 36, 48).

Both return `{"input": [residual or None per main block]}`, 60 entries, that the Qwen-Image
network adds to its first image tokens after each block.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Mapping

import torch
import torch.nn.functional as F
from torch import nn

from comfy_core.families.qwen_image.dit import (QwenImageConfig, QwenImageConfigError, QwenImageTransformer,
                                                QwenImageTransformerBlock, image_tokens)
from comfy_core.models.unet_blocks import operations_or_default
from comfy_core.models.weight_shapes import count_numbered, shape_reader

INSTANTX_MARKER = "transformer_blocks.0.img_mlp.net.0.proj.weight"  # with controlnet_blocks.0.weight
FUN_MARKERS = ("control_blocks.0.after_proj.weight", "control_img_in.weight")
MAIN_MODEL_DOUBLE = 60  # the released Qwen-Image's blocks, over which ComfyUI spaces the residuals
FUN_INJECTION_LAYERS = (0, 12, 24, 36, 48)
INPAINT_CHANNELS = 68  # InstantX inpainting: (16 latent + 1 mask) x 2x2
FUN_CONTROL_CHANNELS = 16  # the Wan 2.1 VAE's latent
FUN_INPAINT_CHANNELS = 33  # control latent, mask, inpaint latent


class QwenImageControlNetError(ValueError):
    """A Qwen-Image ControlNet that cannot run as called (no hint, no base model)."""


def is_qwen_instantx_controlnet(names: Any) -> bool:
    """ComfyUI's test: `controlnet_blocks.0.weight` with Qwen-Image transformer blocks (and not an
    SD3 ControlNet's `pos_embed_input` or a Flux XLabs one's `double_blocks`)."""
    return ("controlnet_blocks.0.weight" in names and INSTANTX_MARKER in names
            and "pos_embed_input.proj.weight" not in names
            and "double_blocks.0.img_attn.norm.key_norm.scale" not in names)


def is_qwen_fun_controlnet(names: Any) -> bool:
    """ComfyUI's test for VideoX-Fun's Qwen-Image ControlNets."""
    return all(name in names for name in FUN_MARKERS)


@dataclass(frozen=True)
class QwenImageControlNetConfig:
    """InstantX's layout: the transformer (no final layer) and the hint's extra channels per token."""

    dit: QwenImageConfig
    extra_condition_channels: int = 0

    @property
    def concat_mask(self) -> bool:
        """The inpainting ControlNet: the runner concatenates the mask to the hint latent."""
        return self.dit.in_channels + self.extra_condition_channels == INPAINT_CHANNELS

    @classmethod
    def detect_from_weights(cls, tensors: Mapping[str, Any], prefix: str = "") -> "QwenImageControlNetConfig":
        """From names and shapes; `QwenImageConfigError` naming the key when inconsistent."""
        dit = QwenImageConfig.detect_from_weights(tensors, prefix, final_layer=False)
        shape = shape_reader(tensors, prefix, QwenImageConfigError, "Qwen-Image ControlNet")
        hidden = dit.hidden_size
        embedder = shape("controlnet_x_embedder.weight")
        if len(embedder) != 2 or embedder[0] != hidden or embedder[1] < dit.in_channels:
            raise QwenImageConfigError(f"Qwen-Image ControlNet: {prefix}controlnet_x_embedder.weight has shape "
                                       f"{embedder}, expected [{hidden}, {dit.in_channels} or more]")
        for i in range(dit.num_layers):
            found = shape(f"controlnet_blocks.{i}.weight")
            if found != (hidden, hidden):
                raise QwenImageConfigError(f"Qwen-Image ControlNet: {prefix}controlnet_blocks.{i}.weight has shape "
                                           f"{found}, expected {(hidden, hidden)}")
        return cls(dit=dit, extra_condition_channels=embedder[1] - dit.in_channels)


@dataclass(frozen=True)
class QwenImageFunControlNetConfig:
    """VideoX-Fun's layout (ComfyUI's `load_controlnet_qwen_fun` reads the same shapes)."""

    control_in_features: int = 132
    inner_dim: int = 3072
    num_attention_heads: int = 24
    attention_head_dim: int = 128
    mlp_hidden_dim: int = 12288
    num_control_blocks: int = 5

    @classmethod
    def detect_from_weights(cls, tensors: Mapping[str, Any], prefix: str = "") -> "QwenImageFunControlNetConfig":
        shape = shape_reader(tensors, prefix, QwenImageConfigError, "Qwen-Image Fun ControlNet")
        inner, in_features = shape("control_img_in.weight")
        (head_dim,) = shape("control_blocks.0.attn.norm_q.weight")
        heads = shape("control_blocks.0.attn.to_q.weight")[0] // max(1, head_dim)
        if head_dim <= 0 or heads * head_dim != inner:
            raise QwenImageConfigError(f"Qwen-Image Fun ControlNet: {prefix}control_blocks.0.attn.to_q.weight does "
                                       f"not give whole heads of {head_dim} over the width {inner}")
        mlp_hidden = shape("control_blocks.0.img_mlp.net.0.proj.weight")[0]
        blocks = count_numbered(tensors, prefix, "control_blocks", QwenImageConfigError, "Qwen-Image Fun ControlNet")
        if blocks > len(FUN_INJECTION_LAYERS):
            raise QwenImageConfigError(f"Qwen-Image Fun ControlNet: {blocks} control blocks; ComfyUI injects at most "
                                       f"{len(FUN_INJECTION_LAYERS)} (main blocks {list(FUN_INJECTION_LAYERS)})")
        expected = {"control_blocks.0.before_proj.weight": (inner, inner)}
        for i in range(blocks):
            b = f"control_blocks.{i}."
            expected[b + "after_proj.weight"] = (inner, inner)
            for stream in ("img", "txt"):
                expected[f"{b}{stream}_mod.1.weight"] = (6 * inner, inner)
                expected[f"{b}{stream}_mlp.net.0.proj.weight"] = (mlp_hidden, inner)
                expected[f"{b}{stream}_mlp.net.2.weight"] = (inner, mlp_hidden)
            for name in ("to_q", "to_k", "to_v", "add_q_proj", "add_k_proj", "add_v_proj", "to_out.0", "to_add_out"):
                expected[f"{b}attn.{name}.weight"] = (inner, inner)
        for key, want in expected.items():
            found = shape(key)
            if found != want:
                raise QwenImageConfigError(f"Qwen-Image Fun ControlNet: {prefix}{key} has shape {found}, expected "
                                           f"{want}")
        return cls(control_in_features=in_features, inner_dim=inner, num_attention_heads=heads,
                   attention_head_dim=head_dim, mlp_hidden_dim=mlp_hidden, num_control_blocks=blocks)


def _text_positions(x: torch.Tensor, grid: tuple[int, int], tokens: int) -> torch.Tensor:
    """Text ids `[B, Nt, 3]`: the diagonal after the image grid, as the Qwen-Image network."""
    start = max(grid[0] // 2, grid[1] // 2)
    ids = (torch.arange(tokens, device=x.device, dtype=torch.float32) + start).view(1, -1, 1)
    return ids.expand(x.shape[0], tokens, 3)


def _keep_mask(attention_mask: torch.Tensor | None, img: torch.Tensor) -> torch.Tensor | None:
    """A text mask `[B, Nt]` (1 = keep) as the joint attention's `[B, 1, 1, Nt + Ni]` keep mask,
    the image tokens all kept (as the Qwen-Image network builds it)."""
    if attention_mask is None:
        return None
    keep = torch.ones(img.shape[0], img.shape[1], dtype=torch.bool, device=img.device)
    return torch.cat([attention_mask.to(device=img.device, dtype=torch.bool), keep], dim=1)[:, None, None, :]


class QwenImageControlNetModel(QwenImageTransformer):
    """InstantX's Qwen-Image ControlNet (ComfyUI's class name): `forward(x, timesteps, context,
    hint=...)` -> `{"input": [...]}` (see the module docstring)."""

    def __init__(self, extra_condition_channels: int = 0, dtype: Any = None, device: Any = None,
                 operations: Any = None, **params: Any) -> None:
        params.pop("final_layer", None)
        super().__init__(final_layer=False, dtype=dtype, device=device, operations=operations, **params)
        ops = operations_or_default(operations)
        self.main_model_double = MAIN_MODEL_DOUBLE
        self.controlnet_blocks = nn.ModuleList(
            ops.Linear(self.inner_dim, self.inner_dim, bias=True, dtype=dtype, device=device)
            for _ in range(len(self.transformer_blocks)))
        self.controlnet_x_embedder = ops.Linear(self.in_channels + extra_condition_channels, self.inner_dim,
                                                bias=True, dtype=dtype, device=device)

    def forward(self, x: torch.Tensor, timesteps: torch.Tensor, context: torch.Tensor,  # type: ignore[override]
                attention_mask: torch.Tensor | None = None, guidance: torch.Tensor | None = None,
                ref_latents: Any = None, hint: torch.Tensor | None = None,
                transformer_options: Mapping[str, Any] = {}, **kwargs: Any) -> dict[str, list[torch.Tensor | None]]:
        """x `[B, 16, (1,) H, W]` (the scaled noisy latent), timesteps `[B]` (sigma), context
        `[B, Nt, joint_attention_dim]`, hint `[B, 16 (+1 mask), (1,) H, W]` (the hint latent);
        `guidance` and `ref_latents` are not used (ComfyUI's signature)."""
        if hint is None:
            raise QwenImageControlNetError("Qwen-Image ControlNet: no hint latent")
        options = dict(transformer_options or {})
        img, img_ids, grid = image_tokens(x, self.patch_size)
        hint_tokens, _, _ = image_tokens(hint, self.patch_size)  # [B, Ni, (16 + extra) * 4]
        if hint_tokens.shape[1] != img.shape[1] or hint_tokens.shape[-1] != self.controlnet_x_embedder.in_features:
            raise QwenImageControlNetError(f"Qwen-Image ControlNet: the hint latent {tuple(hint.shape)} does not fit "
                                           f"the latent {tuple(x.shape)} and "
                                           f"{self.controlnet_x_embedder.in_features // 4} hint channels")
        pe = self.pe_embedder(torch.cat([_text_positions(x, grid, context.shape[1]), img_ids], dim=1))
        hidden = self.img_in(img) + self.controlnet_x_embedder(hint_tokens.to(img.dtype))  # [B, Ni, D]
        txt = self.txt_in(self.txt_norm(context.to(x.dtype)))  # [B, Nt, D]
        temb = self.time_text_embed(timesteps.reshape(-1), hidden.dtype)
        mask = _keep_mask(attention_mask, hidden)
        repeat = math.ceil(self.main_model_double / len(self.controlnet_blocks))
        residuals: list[torch.Tensor | None] = []
        for block, project in zip(self.transformer_blocks, self.controlnet_blocks):
            txt, hidden = block(hidden, txt, temb, pe, mask, None, options)
            # The same tensor repeated: the merge scales a shared residual once.
            residuals.extend([project(hidden)] * repeat)
        return {"input": residuals[:self.main_model_double]}


class QwenImageFunControlBlock(QwenImageTransformerBlock):
    """A Qwen-Image transformer block with `after_proj` (and `before_proj` for the first)."""

    def __init__(self, dim: int, heads: int, head_dim: int, mlp_hidden: int, ops: Any, factory: dict[str, Any],
                 has_before_proj: bool) -> None:
        super().__init__(dim, heads, head_dim, mlp_hidden, ops, factory)
        self.has_before_proj = has_before_proj
        if has_before_proj:
            self.before_proj = ops.Linear(dim, dim, bias=True, **factory)
        self.after_proj = ops.Linear(dim, dim, bias=True, **factory)


def fun_hint_tokens(hint: torch.Tensor, features: int) -> torch.Tensor:
    """The Fun ControlNet's hint tokens: a 16-channel latent gets a zero mask channel and a zero
    inpaint latent when the file takes 33 channels; zero-padded to even sizes and cut into 2x2
    tokens `[B, T*h*w, C*4]`, then zero-filled or cut to `features` (ComfyUI's
    `_process_hint_tokens`)."""
    if hint.ndim == 4:
        hint = hint.unsqueeze(2)  # [B, C, 1, H, W]
    if hint.shape[1] == FUN_CONTROL_CHANNELS and features // 4 == FUN_INPAINT_CHANNELS:
        hint = torch.cat([hint, torch.zeros_like(hint[:, :1]), torch.zeros_like(hint)], dim=1)
    b, c, t, h, w = hint.shape
    hint = F.pad(hint, (0, w % 2, 0, h % 2))
    hh, ww = hint.shape[-2] // 2, hint.shape[-1] // 2
    tokens = hint.reshape(b, c, t, hh, 2, ww, 2).permute(0, 2, 3, 5, 1, 4, 6).reshape(b, t * hh * ww, c * 4)
    if tokens.shape[-1] < features:
        tokens = torch.cat([tokens, tokens.new_zeros(b, tokens.shape[1], features - tokens.shape[-1])], dim=-1)
    return tokens[..., :features]


class QwenImageFunControlNetModel(nn.Module):
    """VideoX-Fun's Qwen-Image ControlNet (ComfyUI's class name): `forward(x, timesteps, context,
    hint=..., base_model=...)` -> `{"input": [...]}` (see the module docstring)."""

    def __init__(self, control_in_features: int = 132, inner_dim: int = 3072, num_attention_heads: int = 24,
                 attention_head_dim: int = 128, mlp_hidden_dim: int | None = None, num_control_blocks: int = 5,
                 main_model_double: int = MAIN_MODEL_DOUBLE,
                 injection_layers: tuple[int, ...] = FUN_INJECTION_LAYERS, dtype: Any = None, device: Any = None,
                 operations: Any = None) -> None:
        super().__init__()
        ops = operations_or_default(operations)
        factory = {"dtype": dtype, "device": device}
        self.dtype = dtype
        self.main_model_double = main_model_double
        self.injection_layers = tuple(injection_layers)
        self.hint_scale = 1.0
        self.control_img_in = ops.Linear(control_in_features, inner_dim, bias=True, **factory)
        mlp_hidden = mlp_hidden_dim or 4 * inner_dim
        self.control_blocks = nn.ModuleList(
            QwenImageFunControlBlock(inner_dim, num_attention_heads, attention_head_dim, mlp_hidden, ops, factory,
                                     has_before_proj=i == 0)
            for i in range(num_control_blocks))

    @classmethod
    def from_config(cls, config: QwenImageFunControlNetConfig, **kwargs: Any) -> "QwenImageFunControlNetModel":
        return cls(control_in_features=config.control_in_features, inner_dim=config.inner_dim,
                   num_attention_heads=config.num_attention_heads, attention_head_dim=config.attention_head_dim,
                   mlp_hidden_dim=config.mlp_hidden_dim, num_control_blocks=config.num_control_blocks, **kwargs)

    def forward(self, x: torch.Tensor, timesteps: torch.Tensor, context: torch.Tensor,
                attention_mask: torch.Tensor | None = None, guidance: torch.Tensor | None = None,
                hint: torch.Tensor | None = None, transformer_options: Mapping[str, Any] = {},
                base_model: nn.Module | None = None, **kwargs: Any) -> dict[str, list[torch.Tensor | None]]:
        """x `[B, 16, (1,) H, W]`, timesteps `[B]` (sigma), context `[B, Nt, C]`, hint the hint
        latent, base_model the Qwen-Image network the run samples (its input layers are used).
        The text mask is not used, as ComfyUI (VideoX-Fun's blocks attend to every text token)."""
        if base_model is None:
            raise QwenImageControlNetError("Qwen-Image Fun ControlNet: it needs the Qwen-Image model it runs with "
                                           "(base_model)")
        if hint is None:
            raise QwenImageControlNetError("Qwen-Image Fun ControlNet: no hint latent")
        options = dict(transformer_options or {})
        img, img_ids, grid = image_tokens(x, base_model.patch_size)
        hint_tokens = fun_hint_tokens(hint, self.control_img_in.in_features)
        if hint_tokens.shape[1] != img.shape[1]:  # ComfyUI keeps the shorter length
            n = min(hint_tokens.shape[1], img.shape[1])
            hint_tokens, img, img_ids = hint_tokens[:, :n], img[:, :n], img_ids[:, :n]
        pe = base_model.pe_embedder(torch.cat([_text_positions(x, grid, context.shape[1]), img_ids], dim=1))
        hidden = base_model.img_in(img)  # [B, Ni, D]
        txt = base_model.txt_in(base_model.txt_norm(context.to(x.dtype)))
        temb = base_model.time_text_embed(timesteps.reshape(-1), hidden.dtype)
        c = self.control_img_in(hint_tokens.to(hidden.dtype))  # [B, Ni, D]
        hints: list[torch.Tensor] = []
        for i, block in enumerate(self.control_blocks):
            c_in = block.before_proj(c) + hidden if i == 0 else c
            txt, c = block(c_in, txt, temb, pe, None, None, options)
            hints.append(block.after_proj(c) * self.hint_scale)
        residuals: list[torch.Tensor | None] = [None] * self.main_model_double
        for local, main in enumerate(self.injection_layers):
            if local < len(hints) and main < len(residuals):
                residuals[main] = hints[local]
        return {"input": residuals}


def build_instantx_controlnet(config: QwenImageControlNetConfig, *, dtype: Any = None, device: Any = None,
                              operations: Any = None) -> QwenImageControlNetModel:
    params = config.dit.params()
    return QwenImageControlNetModel(extra_condition_channels=config.extra_condition_channels, dtype=dtype,
                                    device=device, operations=operations, **params)


__all__ = ["FUN_INJECTION_LAYERS", "MAIN_MODEL_DOUBLE", "QwenImageControlNetConfig", "QwenImageControlNetError",
           "QwenImageControlNetModel", "QwenImageFunControlBlock", "QwenImageFunControlNetConfig",
           "QwenImageFunControlNetModel", "build_instantx_controlnet", "fun_hint_tokens", "is_qwen_fun_controlnet",
           "is_qwen_instantx_controlnet"]
