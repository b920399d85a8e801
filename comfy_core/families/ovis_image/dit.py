"""Ovis-Image's transformer (AIDC-AI 2025, "Ovis-Image", github.com/AIDC-AI/Ovis-Image): Flux.1's
double-stream / single-stream network with three changes, as ComfyUI runs it (its Flux class with
`yak_mlp`, `txt_norm`, `vec_in_dim=None`, `guidance_embed=False`, `txt_ids_dims=[1, 2]`):

- every MLP is a SwiGLU with biases: double blocks have `img_mlp` / `txt_mlp` =
  `down_proj(silu(gate_proj(x)) * up_proj(x))`; a single block's `linear1` gives q, k, v and then
  `2 * mlp_hidden` channels, the first half the value, the second the gate
  (`linear2([attn, silu(gate) * value])`);
- the text states go through an RMS norm (`txt_norm.scale`, eps 1e-6) before `txt_in`;
- the conditioning vector is the timestep embedding alone (no `vector_in`, no `guidance_in`);
- text tokens get RoPE positions `(0, i, i)` (index i on the row and column axes), image tokens
  `(0, row, col)` as Flux's.

The released model: 6 double and 27 single blocks of 3072 (24 heads of 128, RoPE split 16/56/56),
2048-wide text (Ovis 2.5's Qwen3-2B), Flux.1's 16-channel latents in 2x2 patches. Widths, heads,
depths and the MLP width are read from the weights here, so tiny files load; theta 10000 and the
patch size are not in the weights (ComfyUI's model_detection fixes them). Numerics follow diffusers'
`OvisImageTransformer2DModel` (tests/comfy_core/test_ovis_image.py).

The blocks are Flux's (comfy_core/families/flux/blocks.py) with the MLPs swapped; the block loop
with ComfyUI's patch points is Flux's `run_stream_blocks`.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Mapping

import torch
from torch import nn

from comfy_core.families.flux import math as flux_math
from comfy_core.families.flux.blocks import (DoubleStreamBlock, EmbedND, LastLayer, MLPEmbedder, RMSNorm,
                                             SingleStreamBlock, _clamp_fp16, _heads, apply_mod, timestep_embedding)
from comfy_core.families.flux.dit import (count_numbered, default_axes_dim, expect_shape, image_tokens,
                                          run_stream_blocks, tokens_to_image)
from comfy_core.models.comfyui_names import comfyui_name
from comfy_core.models.unet_blocks import operations_or_default
from comfy_core.models.weight_shapes import shape_reader

MARKER = "double_blocks.0.img_mlp.gate_proj.weight"  # ComfyUI's yak_mlp test
TXT_NORM = "txt_norm.scale"
TXT_IDS_DIMS = (1, 2)


class OvisImageConfigError(ValueError):
    """The Ovis-Image weights are incomplete or inconsistent, or the parameters are impossible."""


@dataclass(frozen=True)
class OvisImageConfig:
    """The network's parameters (ComfyUI's FluxParams for this model, the fixed ones left out)."""

    in_channels: int = 16
    out_channels: int = 16
    context_in_dim: int = 2048
    hidden_size: int = 3072
    mlp_ratio: float = 4.0
    num_heads: int = 24
    depth: int = 6
    depth_single_blocks: int = 27
    axes_dim: tuple[int, ...] = (16, 56, 56)
    theta: int = 10000
    patch_size: int = 2
    qkv_bias: bool = True

    def __post_init__(self) -> None:
        object.__setattr__(self, "axes_dim", tuple(int(a) for a in self.axes_dim))
        if self.num_heads <= 0 or self.hidden_size % self.num_heads:
            raise OvisImageConfigError(f"Ovis-Image: hidden size {self.hidden_size} must be divisible by num_heads "
                                       f"{self.num_heads}")
        if len(self.axes_dim) != 3 or sum(self.axes_dim) != self.head_dim:
            raise OvisImageConfigError(f"Ovis-Image: axes_dim {list(self.axes_dim)} must be 3 axes summing to the "
                                       f"head width {self.head_dim}")

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_heads

    @property
    def mlp_hidden(self) -> int:
        return int(self.hidden_size * self.mlp_ratio)

    def comfy_unet_config(self) -> dict[str, Any]:
        """ComfyUI's `unet_config` of this model (its Flux class's arguments)."""
        params = asdict(self)
        params["axes_dim"] = list(self.axes_dim)
        return {"image_model": "flux", **params, "vec_in_dim": None, "guidance_embed": False, "yak_mlp": True,
                "txt_norm": True, "txt_ids_dims": list(TXT_IDS_DIMS)}

    @classmethod
    def detect_from_weights(cls, tensors: Mapping[str, Any], prefix: str = "") -> "OvisImageConfig":
        """The structure under `prefix` from names and shapes only: widths from `img_in`, `txt_in`,
        `txt_norm`, `final_layer.linear`; the head width from the QK-norm scale; the MLP width
        from `img_mlp.gate_proj`; depths from the numbered blocks. Raises `OvisImageConfigError`
        naming the key when the weights are incomplete or inconsistent, or when they carry
        `vector_in` / `guidance_in` (then they are not Ovis-Image's)."""
        shape = shape_reader(tensors, prefix, OvisImageConfigError, "Ovis-Image")
        for extra in ("vector_in.in_layer.weight", "guidance_in.in_layer.weight"):
            if prefix + extra in tensors:
                raise OvisImageConfigError(f"Ovis-Image: {prefix}{extra} is present (Ovis-Image has none)")
        patch = 2
        area = patch * patch
        hidden, img_in = shape("img_in.weight")
        if img_in % area:
            raise OvisImageConfigError(f"Ovis-Image: {prefix}img_in.weight takes {img_in} channels, not a multiple "
                                       f"of the {area} of a 2x2 patch")
        txt_hidden, context = shape("txt_in.weight")
        (norm_width,) = shape(TXT_NORM)
        final_out, final_in = shape("final_layer.linear.weight")
        time_hidden, time_in = shape("time_in.in_layer.weight")
        for key, width in (("txt_in.weight", txt_hidden), ("final_layer.linear.weight", final_in),
                           ("time_in.in_layer.weight", time_hidden)):
            if width != hidden:
                raise OvisImageConfigError(f"Ovis-Image: {prefix}{key} has width {width}, img_in has {hidden}")
        if norm_width != context:
            raise OvisImageConfigError(f"Ovis-Image: {prefix}{TXT_NORM} has width {norm_width}, txt_in takes {context}")
        if time_in != 256:
            raise OvisImageConfigError(f"Ovis-Image: {prefix}time_in.in_layer.weight takes {time_in} channels, not 256")
        if final_out % area:
            raise OvisImageConfigError(f"Ovis-Image: {prefix}final_layer.linear.weight gives {final_out} channels, "
                                       f"not a multiple of the patch area {area}")
        depth = count_numbered(tensors, prefix, "double_blocks", OvisImageConfigError, "Ovis-Image")
        depth_single = count_numbered(tensors, prefix, "single_blocks", OvisImageConfigError, "Ovis-Image")
        if not depth:
            raise OvisImageConfigError(f"Ovis-Image: no {prefix}double_blocks.N weights")
        (head_dim,) = shape("double_blocks.0.img_attn.norm.query_norm.scale")
        if head_dim <= 0 or hidden % head_dim:
            raise OvisImageConfigError(f"Ovis-Image: hidden size {hidden} is not a multiple of the head width "
                                       f"{head_dim} (the QK-norm scale)")
        mlp_hidden = shape(MARKER)[0]
        err = (OvisImageConfigError, "Ovis-Image")
        for i in range(depth):
            for stream in ("img", "txt"):
                expect_shape(shape, f"double_blocks.{i}.{stream}_attn.qkv.weight", (3 * hidden, hidden), prefix, *err)
                for proj in ("gate_proj", "up_proj"):
                    expect_shape(shape, f"double_blocks.{i}.{stream}_mlp.{proj}.weight", (mlp_hidden, hidden),
                                 prefix, *err)
                expect_shape(shape, f"double_blocks.{i}.{stream}_mlp.down_proj.weight", (hidden, mlp_hidden),
                             prefix, *err)
        for i in range(depth_single):
            expect_shape(shape, f"single_blocks.{i}.linear1.weight", (3 * hidden + 2 * mlp_hidden, hidden), prefix,
                         *err)
            expect_shape(shape, f"single_blocks.{i}.linear2.weight", (hidden, hidden + mlp_hidden), prefix, *err)
        return cls(in_channels=img_in // area, out_channels=final_out // area, context_in_dim=context,
                   hidden_size=hidden, mlp_ratio=mlp_hidden / hidden, num_heads=hidden // head_dim, depth=depth,
                   depth_single_blocks=depth_single, axes_dim=default_axes_dim(head_dim), theta=10000,
                   patch_size=patch, qkv_bias=prefix + "double_blocks.0.img_attn.qkv.bias" in tensors)


@comfyui_name("YakMLP")
class YakMLP(nn.Module):
    """SwiGLU MLP with biases (ComfyUI's `YakMLP`): `down_proj(silu(gate_proj(x)) * up_proj(x))`."""

    def __init__(self, hidden_size: int, intermediate_size: int, dtype: Any = None, device: Any = None,
                 operations: Any = None) -> None:
        super().__init__()
        ops = operations_or_default(operations)
        factory = {"dtype": dtype, "device": device}
        self.hidden_size, self.intermediate_size = hidden_size, intermediate_size
        self.gate_proj = ops.Linear(hidden_size, intermediate_size, bias=True, **factory)
        self.up_proj = ops.Linear(hidden_size, intermediate_size, bias=True, **factory)
        self.down_proj = ops.Linear(intermediate_size, hidden_size, bias=True, **factory)
        self.act_fn = nn.SiLU()

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # [B, N, C] -> [B, N, C]
        return self.down_proj(self.act_fn(self.gate_proj(x)) * self.up_proj(x))


class OvisDoubleStreamBlock(DoubleStreamBlock):
    """Flux's double block with SwiGLU MLPs in both streams."""

    def __init__(self, hidden_size: int, num_heads: int, mlp_ratio: float, qkv_bias: bool = True,
                 dtype: Any = None, device: Any = None, operations: Any = None) -> None:
        super().__init__(hidden_size, num_heads, mlp_ratio, qkv_bias=qkv_bias, dtype=dtype, device=device,
                         operations=operations)
        mlp_hidden = int(hidden_size * mlp_ratio)
        for stream in ("img", "txt"):
            setattr(self, f"{stream}_mlp", YakMLP(hidden_size, mlp_hidden, dtype=dtype, device=device,
                                                  operations=operations))
        self.yak_mlp = True


class OvisSingleStreamBlock(SingleStreamBlock):
    """Flux's single block whose MLP half of `linear1` is SwiGLU: `2 * mlp_hidden` channels, value
    then gate (ComfyUI's `yak_mlp`: `silu(mlp[half:]) * mlp[:half]`)."""

    def __init__(self, hidden_size: int, num_heads: int, mlp_ratio: float = 4.0, dtype: Any = None,
                 device: Any = None, operations: Any = None) -> None:
        super().__init__(hidden_size, num_heads, mlp_ratio, dtype=dtype, device=device, operations=operations)
        ops = operations_or_default(operations)
        self.yak_mlp = True
        self.mlp_hidden_dim_first = 2 * self.mlp_hidden_dim
        self.linear1 = ops.Linear(hidden_size, hidden_size * 3 + self.mlp_hidden_dim_first, dtype=dtype, device=device)
        self.mlp_act = nn.SiLU()

    def modulated_forward(self, x: torch.Tensor, mod: Any, pe: torch.Tensor | None,
                          attn_mask: torch.Tensor | None = None, modulation_dims: Any = None,
                          transformer_options: dict[str, Any] | None = None) -> torch.Tensor:
        modulated = apply_mod(self.pre_norm(x), 1 + mod.scale, mod.shift, modulation_dims)
        qkv, mlp = torch.split(self.linear1(modulated), [3 * self.hidden_size, self.mlp_hidden_dim_first], dim=-1)
        q, k, v = _heads(qkv, self.num_heads)  # each [B, H, N, d]
        q, k = self.norm(q, k, v)
        attn = flux_math.run_attention(q, k, v, pe=pe, mask=attn_mask, transformer_options=transformer_options)
        value, gate = mlp[..., :self.mlp_hidden_dim], mlp[..., self.mlp_hidden_dim:]
        output = self.linear2(torch.cat((attn, self.mlp_act(gate) * value), 2))  # [B, N, C]
        return _clamp_fp16(x + apply_mod(output, mod.gate, None, modulation_dims))


def text_ids(batch: int, length: int, device: Any, dtype: torch.dtype) -> torch.Tensor:
    """RoPE positions of `length` text tokens `[B, T, 3]`: `(0, i, i)` (ComfyUI's `txt_ids_dims` [1, 2])."""
    ids = torch.zeros((batch, length, 3), device=device, dtype=dtype)
    positions = torch.arange(length, device=device, dtype=dtype)
    for axis in TXT_IDS_DIMS:
        ids[:, :, axis] = positions
    return ids


@comfyui_name("Flux")
class OvisImageTransformer(nn.Module):
    """Ovis-Image's transformer (see the module docstring), with the constructor arguments, state-dict
    names and forward arguments of ComfyUI's Flux class for this model."""

    def __init__(self, config: OvisImageConfig, final_layer: bool = True, dtype: Any = None, device: Any = None,
                 operations: Any = None) -> None:
        super().__init__()
        ops = operations_or_default(operations)
        factory = {"dtype": dtype, "device": device}
        self.dtype = dtype
        self.config = config
        self.params = config
        self.patch_size = config.patch_size
        self.in_channels = config.in_channels * config.patch_size ** 2
        self.out_channels = config.out_channels * config.patch_size ** 2
        self.hidden_size = config.hidden_size
        self.num_heads = config.num_heads
        self.pe_embedder = EmbedND(dim=config.head_dim, theta=config.theta, axes_dim=config.axes_dim)
        self.img_in = ops.Linear(self.in_channels, self.hidden_size, bias=True, **factory)
        self.time_in = MLPEmbedder(256, self.hidden_size, operations=ops, **factory)
        self.vector_in = None
        self.guidance_in = nn.Identity()
        self.txt_norm = RMSNorm(config.context_in_dim, operations=ops, **factory)
        self.txt_in = ops.Linear(config.context_in_dim, self.hidden_size, **factory)
        self.double_blocks = nn.ModuleList(
            OvisDoubleStreamBlock(self.hidden_size, self.num_heads, config.mlp_ratio, qkv_bias=config.qkv_bias,
                                  operations=ops, **factory)
            for _ in range(config.depth))
        self.single_blocks = nn.ModuleList(
            OvisSingleStreamBlock(self.hidden_size, self.num_heads, config.mlp_ratio, operations=ops, **factory)
            for _ in range(config.depth_single_blocks))
        if final_layer:
            self.final_layer = LastLayer(self.hidden_size, 1, self.out_channels, operations=ops, **factory)

    def forward_orig(self, img: torch.Tensor, img_ids: torch.Tensor | None, txt: torch.Tensor, txt_ids: torch.Tensor,
                     timesteps: torch.Tensor, y: torch.Tensor | None = None, guidance: torch.Tensor | None = None,
                     control: Mapping[str, Any] | None = None, transformer_options: Mapping[str, Any] = {},
                     attn_mask: torch.Tensor | None = None) -> torch.Tensor:
        """Tokens in, tokens out: img `[B, Ni, in*p*p]`, img_ids `[B, Ni, 3]`, txt `[B, Nt, context]`,
        txt_ids `[B, Nt, 3]`, timesteps `[B]` -> `[B, Ni, out*p*p]` (`y` and `guidance` are
        accepted and unused: this network has neither input)."""
        if img.ndim != 3 or txt.ndim != 3:
            raise ValueError("Ovis-Image: img and txt token tensors must have 3 dimensions")
        if txt.shape[-1] != self.config.context_in_dim:
            raise ValueError(f"Ovis-Image: text states are {txt.shape[-1]} wide, the model takes "
                             f"{self.config.context_in_dim}")
        options = dict(transformer_options or {})
        patches = options.get("patches", {}) or {}
        img = self.img_in(img)  # [B, Ni, C]
        vec = self.time_in(timestep_embedding(timesteps, 256).to(img.dtype))  # [B, C]
        txt = self.txt_in(self.txt_norm(txt))  # [B, Nt, C]
        for patch in patches.get("post_input", ()):
            out = patch({"img": img, "txt": txt, "img_ids": img_ids, "txt_ids": txt_ids})
            img, txt, img_ids, txt_ids = out["img"], out["txt"], out["img_ids"], out["txt_ids"]
        pe = self.pe_embedder(torch.cat((txt_ids, img_ids), dim=1)) if img_ids is not None else None
        img = run_stream_blocks(self.double_blocks, self.single_blocks, img, txt, pe, options, lambda i: vec,
                                lambda i: vec, control, attn_mask)  # [B, Ni, C]
        return self.final_layer(img, vec)  # [B, Ni, out*p*p]

    def forward(self, x: torch.Tensor, timestep: torch.Tensor, context: torch.Tensor, y: torch.Tensor | None = None,
                guidance: torch.Tensor | None = None, control: Mapping[str, Any] | None = None,
                transformer_options: Mapping[str, Any] = {}, **kwargs: Any) -> torch.Tensor:
        """x `[B, in_channels, H, W]`, timestep (sigma) `[B]`, context `[B, Nt, context_in_dim]`
        -> `[B, out_channels, H, W]`."""
        bs, _, h_orig, w_orig = x.shape
        p = self.patch_size
        h_len, w_len = (h_orig + p // 2) // p, (w_orig + p // 2) // p
        img, img_ids = image_tokens(x, p)
        txt_ids = text_ids(bs, context.shape[1], x.device, x.dtype)
        out = self.forward_orig(img, img_ids, context, txt_ids, timestep, y, guidance, control, transformer_options,
                                attn_mask=kwargs.get("attention_mask"))
        return tokens_to_image(out, h_len, w_len, p)[:, :, :h_orig, :w_orig]  # [B, out, H, W]

