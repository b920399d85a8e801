"""Flux.1 (dev, schnell, Kontext): the rectified-flow transformer of Black Forest Labs, and
`FluxConfig` read from weights.

Architecture of BFL's Flux.1 (github.com/black-forest-labs/flux, `flux/model.py`): the latent
`[B, 16, H, W]` is cut into 2x2 patches (64 channels per token), text tokens (T5) and image tokens
go through double-stream blocks (separate weights, joint attention) then single-stream blocks over
the concatenation, with 3-axis RoPE over position ids `(index, row, col)` (text ids are zeros),
adaLN modulation from `vec = time_in(t) + guidance_in(g) + vector_in(pooled CLIP)`, and a
modulated final layer. Kontext (BFL 2025, "FLUX.1 Kontext") appends reference-latent tokens with
ids whose first axis (or offsets) tells them apart and cuts the output back to the image tokens.

The constructor, forward arguments, state-dict names and the behaviour at the patch points are
those of ComfyUI's `comfy/ldm/flux/model.py` (`Flux(image_model=None, final_layer=True, dtype,
device, operations, **params)`, `forward(x, timestep, context, y, guidance, ref_latents, control,
transformer_options, **kwargs)`), written here:

- `timestep` is sigma in 0..1 (ComfyUI's flow sampling, multiplier 1); the embedding scales it
  (and the guidance value) by 1000.
- `transformer_options["patches_replace"]["dit"][("double_block", i)]` / `[("single_block", i)]`
  replace a block: called with `{"img", "txt", "vec", "pe", "attn_mask", "transformer_options"}`
  (single blocks: no "txt", "img" is the joint `[txt, img]` sequence) and
  `{"original_block": fn}` (fn takes such a dict and returns `{"img", "txt"}` / `{"img"}`), and
  return that dict. `transformer_options["patches"]["post_input"]` functions get and return
  `{"img", "txt", "img_ids", "txt_ids"}` after the input projections.
- `transformer_options["patches"]["attn1_patch"]` functions get each block's joint q, k, v
  (`[B, H, Nt+Ni, d]`), `pe=`, `attn_mask=` and `extra_options=` and return a dict that may
  replace any of them; `["attn1_output_patch"]` functions get the attention output
  `[B, Nt+Ni, C]` before the projection and `extra_options`, and return it. `extra_options`
  carries `img_slice` (the image tokens' `[start, end)`; set for the single stack as today's
  ComfyUI does) (`blocks.py: patched_self_attention`; NAG uses the output patch).
- `transformer_options["block_type"]` ("double"/"single"), `["block_index"]` and
  `["total_blocks"]` are set for each block (newer ComfyUI does; 0.3.64 does not), on a shallow
  copy of the caller's dict.
- `control["input"][i]` is added to the image tokens after double block i,
  `control["output"][i]` to the image part of the joint sequence after single block i.
- `ref_latents_method` (kwarg, else `transformer_options`): "offset" (default), "index" or "uxo",
  as ComfyUI's `_forward`.
- `attention_mask` (kwarg) is passed to every attention as `attn_mask`.

ComfyUI's DIFFUSION_MODEL wrappers are not run here: our `DiffusionModel` runs them around the
call to this module (comfy_core/models/diffusion.py).
"""
from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Callable, Mapping, Sequence

import torch
import torch.nn.functional as F
from torch import nn

from comfy_core.attention.rope import ROPE_OPTIONS, rope_axis_positions
from comfy_core.families.flux.blocks import (DoubleStreamBlock, EmbedND, LastLayer, MLPEmbedder, SingleStreamBlock,
                                             timestep_embedding)
from comfy_core.models.comfyui_names import comfyui_name
from comfy_core.models.unet_blocks import operations_or_default
from comfy_core.models.weight_shapes import count_numbered as count_entries, shape_reader
from comfy_core.wrappers import run_split_blocks

REF_LATENTS_METHODS = ("offset", "index", "uxo")


class FluxConfigError(ValueError):
    """The Flux weights are incomplete or inconsistent, or the parameters are impossible."""


def default_axes_dim(head_dim: int) -> tuple[int, int, int]:
    """RoPE channels per position axis `(index, row, col)` for a head of `head_dim` channels.

    Flux.1's heads have 128 channels split `(16, 56, 56)` (ComfyUI assumes that split: it is not in
    the weights). For other widths (tiny test models) the same proportions: the row and column
    axes get equal even shares of 7/16 of the head each, the index axis the rest."""
    if head_dim % 2 or head_dim < 6:
        raise FluxConfigError(f"Flux: a head of {head_dim} channels cannot carry 3-axis RoPE")
    spatial = max(2, (head_dim * 7 // 16) // 2 * 2)
    return head_dim - 2 * spatial, spatial, spatial


class StreamTransformerParams:
    """What the configs of Flux-style transformers (Flux's `FluxConfig`, Chroma's `ChromaConfig`)
    share: the head checks, `head_dim`, `params()` and ComfyUI's `unet_config`. A subclass is a
    frozen dataclass with the fields `hidden_size`, `num_heads`, `axes_dim` and sets `_error`,
    `_name` and `image_model` (ComfyUI's `unet_config["image_model"]`)."""

    _error: type[ValueError] = ValueError
    _name = "Flux"
    image_model = "flux"

    def _check_heads(self) -> None:
        object.__setattr__(self, "axes_dim", tuple(int(a) for a in self.axes_dim))
        if self.num_heads <= 0 or self.hidden_size % self.num_heads:
            raise self._error(f"{self._name}: hidden size {self.hidden_size} must be divisible by num_heads "
                              f"{self.num_heads}")
        if sum(self.axes_dim) != self.head_dim:
            raise self._error(f"{self._name}: axes_dim {list(self.axes_dim)} must sum to the head width "
                              f"{self.head_dim}")

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_heads

    def params(self) -> dict[str, Any]:
        """The keyword arguments of the network (`Flux(**params)`, `Chroma(**params)`: ComfyUI's
        unet_config entries)."""
        params = asdict(self)
        params["axes_dim"] = list(self.axes_dim)
        return params

    def comfy_unet_config(self) -> dict[str, Any]:
        """ComfyUI's `unet_config` of this model (`image_model` and the network's arguments)."""
        return {"image_model": self.image_model, **self.params()}


@dataclass(frozen=True)
class FluxConfig(StreamTransformerParams):
    """ComfyUI's `FluxParams` (the Flux.1 dev defaults), `axes_dim` a tuple."""

    _error = FluxConfigError

    in_channels: int = 16
    out_channels: int = 16
    vec_in_dim: int = 768
    context_in_dim: int = 4096
    hidden_size: int = 3072
    mlp_ratio: float = 4.0
    num_heads: int = 24
    depth: int = 19
    depth_single_blocks: int = 38
    axes_dim: tuple[int, ...] = (16, 56, 56)
    theta: int = 10000
    patch_size: int = 2
    qkv_bias: bool = True
    guidance_embed: bool = True

    def __post_init__(self) -> None:
        self._check_heads()

    @property
    def variant(self) -> str:
        """"dev" (guidance-distilled: a guidance embedding) or "schnell" (none). Kontext has dev's
        architecture; the weights cannot tell it apart."""
        return "dev" if self.guidance_embed else "schnell"

    @classmethod
    def detect_from_weights(cls, tensors: Mapping[str, Any], prefix: str = "") -> "FluxConfig":
        """The structure of the Flux transformer under `prefix` from names and shapes only
        (`tensors[name].shape`; a safetensors header is enough).

        Widths from `img_in` (hidden, in_channels * patch area), `txt_in` (context), `vector_in`
        (pooled width), `final_layer.linear` (out channels), the MLP from `img_mlp.0` (or
        `linear1`); heads from the QK-norm scale width (the head width); depths from the numbered
        `double_blocks.N` / `single_blocks.N`; `guidance_in` present = dev, absent = schnell;
        `qkv_bias` from `img_attn.qkv.bias`. Patch size 2, theta 10000 and the RoPE split
        (`default_axes_dim`) are Flux.1's, not in the weights (as ComfyUI's model_detection).
        Raises `FluxConfigError` naming the key when the weights are incomplete or inconsistent.
        """
        shape = shape_reader(tensors, prefix, FluxConfigError, "Flux")
        patch_size = 2
        area = patch_size * patch_size
        hidden, img_in = shape("img_in.weight")
        if img_in % area:
            raise FluxConfigError(f"Flux: {prefix}img_in.weight takes {img_in} channels, not a multiple of the "
                                  f"{area} of a {patch_size}x{patch_size} patch")
        txt_hidden, context_in_dim = shape("txt_in.weight")
        vec_hidden, vec_in_dim = shape("vector_in.in_layer.weight")
        time_hidden, time_in = shape("time_in.in_layer.weight")
        final_out, final_in = shape("final_layer.linear.weight")
        for name, width in (("txt_in.weight", txt_hidden), ("vector_in.in_layer.weight", vec_hidden),
                            ("time_in.in_layer.weight", time_hidden), ("final_layer.linear.weight", final_in)):
            if width != hidden:
                raise FluxConfigError(f"Flux: {prefix}{name} has width {width}, img_in has {hidden}")
        if time_in != 256:
            raise FluxConfigError(f"Flux: {prefix}time_in.in_layer.weight takes {time_in} channels, not 256")
        if final_out % area:
            raise FluxConfigError(f"Flux: {prefix}final_layer.linear.weight gives {final_out} channels, not a "
                                  f"multiple of the patch area {area}")
        blocks = stream_blocks(tensors, prefix, hidden, shape)
        depth, depth_single, head_dim = blocks.depth, blocks.depth_single, blocks.head_dim
        mlp_hidden, qkv_bias = blocks.mlp_hidden, blocks.qkv_bias
        guidance = prefix + "guidance_in.in_layer.weight" in tensors
        if guidance:
            expect_shape(shape, "guidance_in.in_layer.weight", (hidden, 256), prefix)
        return cls(in_channels=img_in // area, out_channels=final_out // area, vec_in_dim=vec_in_dim,
                   context_in_dim=context_in_dim, hidden_size=hidden, mlp_ratio=mlp_hidden / hidden,
                   num_heads=hidden // head_dim, depth=depth, depth_single_blocks=depth_single,
                   axes_dim=default_axes_dim(head_dim), theta=10000, patch_size=patch_size, qkv_bias=qkv_bias,
                   guidance_embed=guidance)


def is_flux(tensors: Mapping[str, Any], prefix: str = "") -> bool:
    """Whether the names under `prefix` are a Flux.1 transformer in the BFL layout (ComfyUI's test:
    QK-normed double blocks and an `img_in`; Chroma, which has no `vector_in`, is not)."""
    return (prefix + "double_blocks.0.img_attn.norm.key_norm.scale" in tensors and prefix + "img_in.weight" in tensors
            and prefix + "vector_in.in_layer.weight" in tensors)


def count_numbered(tensors: Mapping[str, Any], prefix: str, group: str, error: type[ValueError] = None,
                   name: str = "Flux") -> int:
    """How many `group.N.` entries there are under `prefix`; a gap in the numbering is `error`."""
    return count_entries(tensors, prefix, group, error or FluxConfigError, name)


@dataclass(frozen=True)
class StreamBlocks:
    """The double- and single-stream blocks of a Flux-style transformer, read from its weights."""

    depth: int
    depth_single: int
    head_dim: int
    mlp_hidden: int
    qkv_bias: bool


def stream_blocks(tensors: Mapping[str, Any], prefix: str, hidden: int, shape: Callable[[str], tuple[int, ...]],
                  error: type[ValueError] = None, name: str = "Flux") -> StreamBlocks:
    """Depths, head width (the QK-norm scale), MLP width and q/k/v bias of the blocks under
    `prefix`, every block's shapes checked (Flux and Chroma share these blocks)."""
    error = error or FluxConfigError
    depth = count_numbered(tensors, prefix, "double_blocks", error, name)
    depth_single = count_numbered(tensors, prefix, "single_blocks", error, name)
    if depth:
        head_dim = shape("double_blocks.0.img_attn.norm.query_norm.scale")[0]
        mlp_hidden = shape("double_blocks.0.img_mlp.0.weight")[0]
        qkv_bias = prefix + "double_blocks.0.img_attn.qkv.bias" in tensors
    elif depth_single:
        head_dim = shape("single_blocks.0.norm.query_norm.scale")[0]
        mlp_hidden = shape("single_blocks.0.linear1.weight")[0] - 3 * hidden
        qkv_bias = True
    else:
        raise error(f"{name}: no {prefix}double_blocks.N or {prefix}single_blocks.N weights")
    if head_dim <= 0 or hidden % head_dim:
        raise error(f"{name}: hidden size {hidden} is not a multiple of the head width {head_dim} (the QK-norm scale)")
    for i in range(depth):
        for stream in ("img", "txt"):
            expect_shape(shape, f"double_blocks.{i}.{stream}_attn.qkv.weight", (3 * hidden, hidden), prefix, error, name)
            expect_shape(shape, f"double_blocks.{i}.{stream}_mlp.0.weight", (mlp_hidden, hidden), prefix, error, name)
    for i in range(depth_single):
        expect_shape(shape, f"single_blocks.{i}.linear1.weight", (3 * hidden + mlp_hidden, hidden), prefix, error, name)
        expect_shape(shape, f"single_blocks.{i}.linear2.weight", (hidden, hidden + mlp_hidden), prefix, error, name)
    return StreamBlocks(depth, depth_single, head_dim, mlp_hidden, qkv_bias)


def expect_shape(shape: Callable[[str], tuple[int, ...]], key: str, expected: tuple[int, ...], prefix: str,
                 error: type[ValueError] = None, name: str = "Flux") -> None:
    """`error` naming `name` and the key when `shape(key)` is not `expected`."""
    found = shape(key)
    if found != expected:
        raise (error or FluxConfigError)(f"{name}: {prefix}{key} has shape {found}, expected {expected}")


def pad_to_patch_size(img: torch.Tensor, patch_size: Sequence[int] = (2, 2),
                      padding_mode: str = "circular") -> torch.Tensor:
    """`img` `[B, C, *spatial]` padded at the end of each spatial axis to a multiple of the patch
    size (circularly, as ComfyUI's `common_dit.pad_to_patch_size`)."""
    pad: tuple[int, ...] = ()
    for i in range(img.ndim - 2):
        pad = (0, (patch_size[i] - img.shape[i + 2] % patch_size[i]) % patch_size[i]) + pad
    if not any(pad):
        return img
    return F.pad(img, pad, mode=padding_mode)


def _replace_call(fn: Callable[..., dict], args: dict[str, Any], original: Callable[[dict], dict]) -> dict:
    return fn(args, {"original_block": original})


def run_stream_blocks(double_blocks: Sequence[nn.Module], single_blocks: Sequence[nn.Module], img: torch.Tensor,
                      txt: torch.Tensor, pe: torch.Tensor | None, options: dict[str, Any],
                      double_vec: Callable[[int], Any], single_vec: Callable[[int], Any],
                      control: Mapping[str, Any] | None = None, attn_mask: torch.Tensor | None = None,
                      skip_double: Sequence[int] = (), skip_single: Sequence[int] = (),
                      clamp_fp16: bool = True) -> torch.Tensor:
    """The double-stream then single-stream blocks of a Flux-style transformer (Flux, Chroma)
    with ComfyUI's patch points (see the module docstring): img `[B, Ni, C]`, txt `[B, Nt, C]`
    -> the image tokens `[B, Ni, C]` after the last single block. `double_vec(i)` /
    `single_vec(i)`: what block i is given as `vec` (Flux: the conditioning vector; Chroma: the
    block's modulations); `skip_double` / `skip_single`: block indices left out (Chroma's
    `skip_mmdit` / `skip_dit`); `clamp_fp16`: Flux's finite clamp of fp16 image tokens between
    the two stacks. `options` (a copy of the caller's transformer_options) gets `block_type`,
    `block_index` and `total_blocks` per block."""
    blocks_replace = (options.get("patches_replace", {}) or {}).get("dit", {}) or {}

    def run_double(i: int, img: torch.Tensor, txt: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        options["total_blocks"] = len(double_blocks)
        options["block_type"] = "double"
        options["block_index"] = i
        block, vec = double_blocks[i], double_vec(i)
        if ("double_block", i) in blocks_replace:
            def original(args: dict, block: nn.Module = block) -> dict:
                out_img, out_txt = block(img=args["img"], txt=args["txt"], vec=args["vec"], pe=args["pe"],
                                         attn_mask=args.get("attn_mask"),
                                         transformer_options=args.get("transformer_options"))
                return {"img": out_img, "txt": out_txt}

            out = _replace_call(blocks_replace[("double_block", i)],
                                {"img": img, "txt": txt, "vec": vec, "pe": pe, "attn_mask": attn_mask,
                                 "transformer_options": options}, original)
            img, txt = out["img"], out["txt"]
        else:
            img, txt = block(img=img, txt=txt, vec=vec, pe=pe, attn_mask=attn_mask, transformer_options=options)
        if control is not None:
            adds = control.get("input") or ()
            if i < len(adds) and adds[i] is not None:
                img[:, :adds[i].shape[1]] += adds[i]
        return img, txt

    def doubles(streams: dict, indices: range) -> dict:
        img, txt = streams["img"], streams["txt"]
        for i in indices:
            if i not in skip_double:
                img, txt = run_double(i, img, txt)
        return {"img": img, "txt": txt}

    def rest(streams: dict) -> dict:
        after = doubles(streams, range(1, len(double_blocks)))
        img, txt = after["img"], after["txt"]
        if clamp_fp16 and img.dtype == torch.float16:
            img = torch.nan_to_num(img, nan=0.0, posinf=65504, neginf=-65504)
        n_txt = txt.shape[1]
        img = torch.cat((txt, img), 1)  # [B, Nt+Ni, C]

        options["total_blocks"] = len(single_blocks)
        options["block_type"] = "single"
        options["img_slice"] = [n_txt, img.shape[1]]  # the image tokens of the joint stream (ComfyUI's)
        for i, block in enumerate(single_blocks):
            if i in skip_single:
                continue
            options["block_index"] = i
            vec = single_vec(i)
            if ("single_block", i) in blocks_replace:
                def original(args: dict, block: nn.Module = block) -> dict:
                    return {"img": block(args["img"], vec=args["vec"], pe=args["pe"], attn_mask=args.get("attn_mask"),
                                         transformer_options=args.get("transformer_options"))}

                out = _replace_call(blocks_replace[("single_block", i)],
                                    {"img": img, "vec": vec, "pe": pe, "attn_mask": attn_mask,
                                     "transformer_options": options}, original)
                img = out["img"]
            else:
                img = block(img, vec=vec, pe=pe, attn_mask=attn_mask, transformer_options=options)
            if control is not None:
                adds = control.get("output") or ()
                if i < len(adds) and adds[i] is not None:
                    img[:, n_txt:n_txt + adds[i].shape[1], ...] += adds[i]
        return {"img": img[:, n_txt:, ...]}  # [B, Ni, C]

    # the first double block, then the rest: the first-block hook point (comfy_core/wrappers.py)
    return run_split_blocks(options, lambda streams: doubles(streams, range(min(1, len(double_blocks)))), rest,
                            {"img": img, "txt": txt})["img"]


def image_tokens(x: torch.Tensor, p: int, index: int = 0, h_offset: int = 0, w_offset: int = 0, *,
                 rope_options: Mapping[str, Any] | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """`x` `[B, C, H, W]` padded and cut into `p x p` patches: tokens `[B, h*w, C*p*p]` (channel-major
    within a token) and their ids `[B, h*w, 3]` = `(index, row + h_offset, col + w_offset)`, the
    offsets given in latent pixels (rounded to patches), in `x`'s dtype; ScaleROPE's `rope_options`
    scale and shift rows and columns and shift the index (`shift_t`), as ComfyUI's `process_img`."""
    b, c, h, w = x.shape
    x = pad_to_patch_size(x, (p, p))
    rows, cols = x.shape[-2] // p, x.shape[-1] // p
    img = x.reshape(b, c, rows, p, cols, p).permute(0, 2, 4, 1, 3, 5).reshape(b, rows * cols, c * p * p)
    h_len, w_len = (h + p // 2) // p, (w + p // 2) // p
    h_offset, w_offset = (h_offset + p // 2) // p, (w_offset + p // 2) // p
    axis = dict(rope_options=rope_options, device=x.device, dtype=x.dtype)
    ids = torch.zeros((h_len, w_len, 3), device=x.device, dtype=x.dtype)
    ids[:, :, 0] = ids[:, :, 0] + rope_axis_positions(1, "t", start=index, **axis)
    ids[:, :, 1] = ids[:, :, 1] + rope_axis_positions(h_len, "y", start=h_offset, **axis).unsqueeze(1)
    ids[:, :, 2] = ids[:, :, 2] + rope_axis_positions(w_len, "x", start=w_offset, **axis).unsqueeze(0)
    return img, ids.reshape(1, h_len * w_len, 3).repeat(b, 1, 1)


def tokens_to_image(out: torch.Tensor, h_len: int, w_len: int, p: int) -> torch.Tensor:
    """Tokens `[B, h*w, c*p*p]` back to the latent `[B, c, h*p, w*p]` (the inverse of `image_tokens`)."""
    bs = out.shape[0]
    c = out.shape[-1] // (p * p)
    return out.reshape(bs, h_len, w_len, c, p, p).permute(0, 3, 1, 4, 2, 5).reshape(bs, c, h_len * p, w_len * p)


@comfyui_name("Flux")
class FluxTransformer(nn.Module):
    """The Flux.1 transformer (see the module docstring); `params` are `FluxConfig`'s fields."""

    # DIFFUSION_MODEL wrappers' positional arguments, ComfyUI's `_forward` order (comfy_core/models/diffusion.py)
    wrapper_arguments = ("x", "timesteps", "context", "y", "guidance", "ref_latents", "control", "transformer_options")

    def __init__(self, image_model: Any = None, final_layer: bool = True, dtype: Any = None, device: Any = None,
                 operations: Any = None, **params: Any) -> None:
        super().__init__()
        ops = operations_or_default(operations)
        try:
            config = FluxConfig(**params)
        except TypeError as error:
            raise FluxConfigError(f"Flux: {error}") from None
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
        self.vector_in = MLPEmbedder(config.vec_in_dim, self.hidden_size, operations=ops, **factory)
        self.guidance_in = (MLPEmbedder(256, self.hidden_size, operations=ops, **factory)
                            if config.guidance_embed else nn.Identity())
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

    @classmethod
    def from_config(cls, config: FluxConfig, **kwargs: Any) -> "FluxTransformer":
        """`Flux(**config.params(), **kwargs)` (kwargs: image_model, final_layer, dtype, device, operations)."""
        return cls(**kwargs, **config.params())

    def lora_key_map(self, names: list[str]) -> dict[str, Any]:
        """LoRA layer name -> target, given the state-dict names under `diffusion_model.` of the
        model holding this network (`comfy_core.lora.dit_keymap`; the spellings: `keys.lora_key_map`)."""
        from comfy_core.families.flux.keys import lora_key_map

        return lora_key_map(self.config, names)

    # -- the transformer on token sequences -------------------------------------------------------

    def forward_orig(self, img: torch.Tensor, img_ids: torch.Tensor | None, txt: torch.Tensor, txt_ids: torch.Tensor,
                     timesteps: torch.Tensor, y: torch.Tensor | None, guidance: torch.Tensor | None = None,
                     control: Mapping[str, Any] | None = None, transformer_options: Mapping[str, Any] = {},
                     attn_mask: torch.Tensor | None = None) -> torch.Tensor:
        """Tokens in, tokens out: img `[B, Ni, in*p*p]`, img_ids `[B, Ni, 3]`, txt `[B, Nt, context]`,
        txt_ids `[B, Nt, 3]`, timesteps/guidance `[B]`, y `[B, vec_in_dim]` -> `[B, Ni, out*p*p]`."""
        if img.ndim != 3 or txt.ndim != 3:
            raise ValueError("Flux: img and txt token tensors must have 3 dimensions")
        if y is None:
            y = torch.zeros((img.shape[0], self.config.vec_in_dim), device=img.device, dtype=img.dtype)
        options = dict(transformer_options or {})
        patches = options.get("patches", {}) or {}

        img = self.img_in(img)  # [B, Ni, C]
        vec = self.time_in(timestep_embedding(timesteps, 256).to(img.dtype))  # [B, C]
        if self.config.guidance_embed and guidance is not None:
            vec = vec + self.guidance_in(timestep_embedding(guidance, 256).to(img.dtype))
        vec = vec + self.vector_in(y[:, :self.config.vec_in_dim])
        txt = self.txt_in(txt)  # [B, Nt, C]

        for patch in patches.get("post_input", ()):
            out = patch({"img": img, "txt": txt, "img_ids": img_ids, "txt_ids": txt_ids})
            img, txt, img_ids, txt_ids = out["img"], out["txt"], out["img_ids"], out["txt_ids"]

        pe = self.pe_embedder(torch.cat((txt_ids, img_ids), dim=1)) if img_ids is not None else None
        img = run_stream_blocks(self.double_blocks, self.single_blocks, img, txt, pe, options, lambda i: vec,
                                lambda i: vec, control, attn_mask)  # [B, Ni, C]
        return self.final_layer(img, vec)  # [B, Ni, out*p*p]

    # -- latents <-> tokens -----------------------------------------------------------------------

    def process_img(self, x: torch.Tensor, index: int = 0, h_offset: int = 0, w_offset: int = 0, *,
                    rope_options: Mapping[str, Any] | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """`x` `[B, C, H, W]` as tokens and ids (`image_tokens` with this network's patch size)."""
        return image_tokens(x, self.patch_size, index, h_offset, w_offset, rope_options=rope_options)

    def reference_tokens(self, img: torch.Tensor, img_ids: torch.Tensor, ref_latents: Sequence[torch.Tensor],
                         method: str, h_len: int, w_len: int,
                         rope_options: Mapping[str, Any] | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """Kontext: the reference latents' tokens and ids appended to the image's, as ComfyUI's
        `_forward`. "offset": index 1, each reference placed after the previous ones along the
        axis that keeps the canvas squarer; "index": index 1, 2, ... and no offset; "uxo": index 0,
        offset past the image (and the previous references) along both axes. `rope_options` move
        the references' ids too (LongCat-Image's text shift, `longcat_dit.py`); Flux passes none."""
        if method not in REF_LATENTS_METHODS:
            raise ValueError(f"Flux: unknown ref_latents_method {method!r}; expected one of {REF_LATENTS_METHODS}")
        p = self.patch_size
        h = w = index = 0
        for ref in ref_latents:
            if method == "index":
                index += 1
                h_offset = w_offset = 0
            elif method == "uxo":
                index = 0
                h_offset, w_offset = h_len * p + h, w_len * p + w
                h += ref.shape[-2]
                w += ref.shape[-1]
            else:
                index = 1
                h_offset = w_offset = 0
                if ref.shape[-2] + h > ref.shape[-1] + w:
                    w_offset = w
                else:
                    h_offset = h
                h = max(h, ref.shape[-2] + h_offset)
                w = max(w, ref.shape[-1] + w_offset)
            tokens, ids = self.process_img(ref, index=index, h_offset=h_offset, w_offset=w_offset,
                                           rope_options=rope_options)
            img = torch.cat([img, tokens], dim=1)
            img_ids = torch.cat([img_ids, ids], dim=1)
        return img, img_ids

    def forward(self, x: torch.Tensor, timestep: torch.Tensor, context: torch.Tensor, y: torch.Tensor | None = None,
                guidance: torch.Tensor | None = None, ref_latents: Sequence[torch.Tensor] | None = None,
                control: Mapping[str, Any] | None = None, transformer_options: Mapping[str, Any] = {},
                **kwargs: Any) -> torch.Tensor:
        """x `[B, in_channels, H, W]`, timestep (sigma) `[B]`, context `[B, Nt, context_in_dim]`,
        y `[B, vec_in_dim]` (pooled CLIP), guidance `[B]` (dev), ref_latents: `[B, in_channels, h, w]`
        each -> `[B, out_channels, H, W]`."""
        bs, _, h_orig, w_orig = x.shape
        p = self.patch_size
        h_len, w_len = (h_orig + p // 2) // p, (w_orig + p // 2) // p
        # ScaleROPE's options move the image's positions, not the references' (ComfyUI's `_forward`)
        img, img_ids = self.process_img(x, rope_options=(transformer_options or {}).get(ROPE_OPTIONS))
        img_tokens = img.shape[1]
        if ref_latents is not None:
            method = kwargs.get("ref_latents_method", (transformer_options or {}).get("ref_latents_method", "offset"))
            img, img_ids = self.reference_tokens(img, img_ids, ref_latents, method, h_len, w_len)
        txt_ids = torch.zeros((bs, context.shape[1], 3), device=x.device, dtype=x.dtype)
        out = self.forward_orig(img, img_ids, context, txt_ids, timestep, y, guidance, control, transformer_options,
                                attn_mask=kwargs.get("attention_mask"))
        out = tokens_to_image(out[:, :img_tokens], h_len, w_len, p)  # [B, out, h*p, w*p]
        return out[:, :, :h_orig, :w_orig]
