"""LongCat-Image's transformer (Meituan 2025, "LongCat-Image", arXiv 2512.07584,
github.com/meituan-longcat/LongCat-Image): Flux.1's double-stream / single-stream network (the
same blocks, names and shapes) with three changes, as today's ComfyUI runs it (its Flux class with
`vec_in_dim=None`, `guidance_embed=False`, `txt_ids_dims=[1, 2]`, and `model_base.LongCatImage`'s
RoPE shift):

- the conditioning vector is the timestep embedding alone (no `vector_in`, no `guidance_in`);
- text tokens get RoPE positions `(0, i, i)` (index i on the row and column axes, in float32);
- the image tokens (and the edit model's reference tokens) are moved past the text: index axis
  `+1`, rows and columns `+T` for a context of T tokens (ComfyUI's `rope_options` defaults
  `shift_t = 1`, `shift_y = shift_x = T`, which a ScaleROPE patch overrides), so `(1, T + row,
  T + col)` for the image -- diffusers' `prepare_pos_ids(modality_id=1, start=(512, 512))` for the
  512-token prompts the text encoder gives.

The released model: 19 double and 38 single blocks of 3072 (24 heads of 128, RoPE 16 / 56 / 56,
theta 10000), 3584-wide text (Qwen2.5-VL 7B), Flux.1's 16-channel latents in 2x2 patches. Widths,
heads, depths and the MLP width are read from the weights here, so tiny files load; theta, the
patch size and the RoPE split are not in the weights (ComfyUI's model_detection fixes them).
Numerics follow diffusers' `LongCatImageTransformer2DModel` (tests/comfy_core/test_longcat_image.py).

The blocks and their loop with ComfyUI's patch points are Flux's (`flux/blocks.py`,
`flux/dit.py: run_stream_blocks`); the reference-latent placement is Flux's `reference_tokens`
(ComfyUI's `_forward`: "offset", "index", "uxo"), with the RoPE options applied to the references
too, as today's ComfyUI's `process_img` does.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import torch
from torch import nn

from comfy_core.attention.rope import ROPE_OPTIONS
from comfy_core.families.flux.blocks import (DoubleStreamBlock, EmbedND, LastLayer, MLPEmbedder, SingleStreamBlock,
                                             timestep_embedding)
from comfy_core.families.flux.dit import (REF_LATENTS_METHODS, FluxTransformer, StreamTransformerParams,
                                          default_axes_dim, expect_shape, image_tokens, run_stream_blocks,
                                          stream_blocks, tokens_to_image)
from comfy_core.models.comfyui_names import comfyui_name
from comfy_core.models.unet_blocks import operations_or_default
from comfy_core.models.weight_shapes import shape_reader

TXT_IDS_DIMS = (1, 2)
# Names that tell another Flux-style network: Flux.1 (pooled CLIP, guidance), Ovis-Image (SwiGLU,
# text norm), Chroma (its approximator), FLUX.2 (global modulation).
FOREIGN = ("vector_in.in_layer.weight", "guidance_in.in_layer.weight", "double_blocks.0.img_mlp.gate_proj.weight",
           "txt_norm.scale", "txt_norm.weight", "distilled_guidance_layer.in_proj.weight",
           "double_stream_modulation_img.lin.weight")


class LongCatImageConfigError(ValueError):
    """The LongCat-Image weights are incomplete or inconsistent, or the parameters are impossible."""


@dataclass(frozen=True)
class LongCatImageConfig(StreamTransformerParams):
    """The network's parameters (ComfyUI's FluxParams for this model, the fixed ones left out)."""

    _error = LongCatImageConfigError
    _name = "LongCat-Image"

    in_channels: int = 16
    out_channels: int = 16
    context_in_dim: int = 3584
    hidden_size: int = 3072
    mlp_ratio: float = 4.0
    num_heads: int = 24
    depth: int = 19
    depth_single_blocks: int = 38
    axes_dim: tuple[int, ...] = (16, 56, 56)
    theta: int = 10000
    patch_size: int = 2
    qkv_bias: bool = True

    def __post_init__(self) -> None:
        self._check_heads()
        if len(self.axes_dim) != 3:
            raise LongCatImageConfigError(f"LongCat-Image: axes_dim {list(self.axes_dim)} must have 3 axes")

    def comfy_unet_config(self) -> dict[str, Any]:
        """ComfyUI's `unet_config` of this model (its Flux class's arguments, model_detection's
        LongCat-Image branch)."""
        return {**super().comfy_unet_config(), "vec_in_dim": None, "guidance_embed": False,
                "txt_ids_dims": list(TXT_IDS_DIMS)}

    @classmethod
    def detect_from_weights(cls, tensors: Mapping[str, Any], prefix: str = "") -> "LongCatImageConfig":
        """The structure under `prefix` from names and shapes only: widths from `img_in`, `txt_in`,
        `time_in`, `final_layer.linear`; heads, MLP width, q/k/v bias and depths from the blocks
        (Flux's `stream_blocks`, every block's shapes checked). Raises `LongCatImageConfigError`
        naming the key when the weights are incomplete or inconsistent, or carry a name of another
        Flux-style network (`vector_in`, `guidance_in`, SwiGLU MLPs, `txt_norm`, Chroma's approximator,
        FLUX.2's global modulation). ComfyUI tells the release by a 3584-wide `txt_in` without
        `vector_in`; the width is read here, so reduced test files load too."""
        name = "LongCat-Image"
        for key in FOREIGN:
            if prefix + key in tensors:
                raise LongCatImageConfigError(f"{name}: {prefix}{key} is present (LongCat-Image has none)")
        shape = shape_reader(tensors, prefix, LongCatImageConfigError, name)
        patch = 2
        area = patch * patch
        hidden, img_in = shape("img_in.weight")
        if img_in % area:
            raise LongCatImageConfigError(f"{name}: {prefix}img_in.weight takes {img_in} channels, not a multiple of "
                                          f"the {area} of a 2x2 patch")
        txt_hidden, context = shape("txt_in.weight")
        time_hidden, time_in = shape("time_in.in_layer.weight")
        final_out, final_in = shape("final_layer.linear.weight")
        for key, width in (("txt_in.weight", txt_hidden), ("time_in.in_layer.weight", time_hidden),
                           ("final_layer.linear.weight", final_in)):
            if width != hidden:
                raise LongCatImageConfigError(f"{name}: {prefix}{key} has width {width}, img_in has {hidden}")
        if time_in != 256:
            raise LongCatImageConfigError(f"{name}: {prefix}time_in.in_layer.weight takes {time_in} channels, not 256")
        if final_out % area:
            raise LongCatImageConfigError(f"{name}: {prefix}final_layer.linear.weight gives {final_out} channels, "
                                          f"not a multiple of the patch area {area}")
        expect_shape(shape, "final_layer.adaLN_modulation.1.weight", (2 * hidden, hidden), prefix,
                     LongCatImageConfigError, name)
        blocks = stream_blocks(tensors, prefix, hidden, shape, LongCatImageConfigError, name)
        return cls(in_channels=img_in // area, out_channels=final_out // area, context_in_dim=context,
                   hidden_size=hidden, mlp_ratio=blocks.mlp_hidden / hidden, num_heads=hidden // blocks.head_dim,
                   depth=blocks.depth, depth_single_blocks=blocks.depth_single,
                   axes_dim=default_axes_dim(blocks.head_dim), theta=10000, patch_size=patch,
                   qkv_bias=blocks.qkv_bias)


def text_ids(batch: int, length: int, device: Any) -> torch.Tensor:
    """RoPE positions of `length` text tokens `[B, T, 3]` float32: `(0, i, i)` (ComfyUI's
    `txt_ids_dims` [1, 2], written in float32 whatever the model's dtype)."""
    ids = torch.zeros((batch, length, 3), device=device, dtype=torch.float32)
    positions = torch.linspace(0, length - 1, steps=length, device=device, dtype=torch.float32)
    for axis in TXT_IDS_DIMS:
        ids[:, :, axis] = positions
    return ids


def longcat_rope_options(rope_options: Mapping[str, Any] | None, text_length: int) -> dict[str, Any]:
    """ComfyUI's `model_base.LongCatImage._apply_model`: the caller's `rope_options` (ScaleROPE's)
    with `shift_t` 1 and `shift_y` / `shift_x` the text length where they are not set."""
    options = dict(rope_options or {})
    options.setdefault("shift_t", 1.0)
    options.setdefault("shift_y", float(text_length))
    options.setdefault("shift_x", float(text_length))
    return options


@comfyui_name("Flux")
class LongCatImageTransformer(nn.Module):
    """LongCat-Image's transformer (see the module docstring), with the constructor arguments,
    state-dict names and forward arguments of ComfyUI's Flux class for this model."""

    def __init__(self, config: LongCatImageConfig, final_layer: bool = True, dtype: Any = None, device: Any = None,
                 operations: Any = None) -> None:
        super().__init__()
        ops = operations_or_default(operations)
        factory = {"dtype": dtype, "device": device}
        self.dtype = dtype
        self.config = config
        self.params = config  # ComfyUI's attribute name (FluxParams)
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
        self.txt_in = ops.Linear(config.context_in_dim, self.hidden_size, **factory)
        self.double_blocks = nn.ModuleList(
            DoubleStreamBlock(self.hidden_size, self.num_heads, mlp_ratio=config.mlp_ratio, qkv_bias=config.qkv_bias,
                              operations=ops, **factory)
            for _ in range(config.depth))
        self.single_blocks = nn.ModuleList(
            SingleStreamBlock(self.hidden_size, self.num_heads, mlp_ratio=config.mlp_ratio, operations=ops, **factory)
            for _ in range(config.depth_single_blocks))
        if final_layer:
            self.final_layer = LastLayer(self.hidden_size, 1, self.out_channels, operations=ops, **factory)

    def lora_key_map(self, names: list[str]) -> dict[str, Any]:
        """LoRA layer name -> target (Flux's spellings: `flux/keys.py: lora_key_map`)."""
        from comfy_core.families.flux.keys import lora_key_map

        return lora_key_map(self.config, names)

    def forward_orig(self, img: torch.Tensor, img_ids: torch.Tensor | None, txt: torch.Tensor, txt_ids: torch.Tensor,
                     timesteps: torch.Tensor, y: torch.Tensor | None = None, guidance: torch.Tensor | None = None,
                     control: Mapping[str, Any] | None = None, transformer_options: Mapping[str, Any] = {},
                     attn_mask: torch.Tensor | None = None) -> torch.Tensor:
        """Tokens in, tokens out: img `[B, Ni, in*p*p]`, img_ids `[B, Ni, 3]`, txt `[B, Nt, context]`,
        txt_ids `[B, Nt, 3]`, timesteps `[B]` -> `[B, Ni, out*p*p]` (`y` and `guidance` are
        accepted and unused: this network has neither input)."""
        if img.ndim != 3 or txt.ndim != 3:
            raise ValueError("LongCat-Image: img and txt token tensors must have 3 dimensions")
        if txt.shape[-1] != self.config.context_in_dim:
            raise ValueError(f"LongCat-Image: text states are {txt.shape[-1]} wide, the model takes "
                             f"{self.config.context_in_dim}")
        options = dict(transformer_options or {})
        patches = options.get("patches", {}) or {}
        img = self.img_in(img)  # [B, Ni, C]
        vec = self.time_in(timestep_embedding(timesteps, 256).to(img.dtype))  # [B, C]
        txt = self.txt_in(txt)  # [B, Nt, C]
        for patch in patches.get("post_input", ()):
            out = patch({"img": img, "txt": txt, "img_ids": img_ids, "txt_ids": txt_ids})
            img, txt, img_ids, txt_ids = out["img"], out["txt"], out["img_ids"], out["txt_ids"]
        pe = self.pe_embedder(torch.cat((txt_ids, img_ids), dim=1)) if img_ids is not None else None
        img = run_stream_blocks(self.double_blocks, self.single_blocks, img, txt, pe, options, lambda i: vec,
                                lambda i: vec, control, attn_mask)  # [B, Ni, C]
        return self.final_layer(img, vec)  # [B, Ni, out*p*p]

    def process_img(self, x: torch.Tensor, index: int = 0, h_offset: int = 0, w_offset: int = 0, *,
                    rope_options: Mapping[str, Any] | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """`x` `[B, C, H, W]` as tokens and ids (Flux's `image_tokens` with this network's patch size)."""
        return image_tokens(x, self.patch_size, index, h_offset, w_offset, rope_options=rope_options)

    # Kontext-style placement of reference latents: Flux's, given the RoPE options (see the module doc).
    reference_tokens = FluxTransformer.reference_tokens

    def forward(self, x: torch.Tensor, timestep: torch.Tensor, context: torch.Tensor, y: torch.Tensor | None = None,
                guidance: torch.Tensor | None = None, ref_latents: Sequence[torch.Tensor] | None = None,
                control: Mapping[str, Any] | None = None, transformer_options: Mapping[str, Any] = {},
                **kwargs: Any) -> torch.Tensor:
        """x `[B, in_channels, H, W]`, timestep (sigma) `[B]`, context `[B, Nt, context_in_dim]`,
        ref_latents `[B, in_channels, h, w]` each (the edit model's input image) -> `[B, out_channels, H, W]`."""
        bs, _, h_orig, w_orig = x.shape
        p = self.patch_size
        h_len, w_len = (h_orig + p // 2) // p, (w_orig + p // 2) // p
        options = transformer_options or {}
        rope = longcat_rope_options(options.get(ROPE_OPTIONS), context.shape[1])
        img, img_ids = self.process_img(x, rope_options=rope)
        img_tokens = img.shape[1]
        if ref_latents is not None:
            method = kwargs.get("ref_latents_method", options.get("ref_latents_method", "offset"))
            if method not in REF_LATENTS_METHODS:
                raise ValueError(f"LongCat-Image: unknown ref_latents_method {method!r}; expected one of "
                                 f"{REF_LATENTS_METHODS}")
            img, img_ids = self.reference_tokens(img, img_ids, ref_latents, method, h_len, w_len, rope_options=rope)
        txt_ids = text_ids(bs, context.shape[1], x.device)
        out = self.forward_orig(img, img_ids, context, txt_ids, timestep, y, guidance, control, transformer_options,
                                attn_mask=kwargs.get("attention_mask"))
        out = tokens_to_image(out[:, :img_tokens], h_len, w_len, p)  # [B, out, h*p, w*p]
        return out[:, :, :h_orig, :w_orig]
