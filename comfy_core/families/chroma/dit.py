"""Chroma (lodestones 2025, huggingface.co/lodestones/Chroma): a Flux.1-schnell derivative without
CLIP, and `ChromaConfig` read from weights.

The network is Flux.1's (`comfy_core/families/flux/dit.py`: 2x2 patches, double-stream then
single-stream blocks, 3-axis RoPE, T5-XXL context) with the per-block adaLN projections and the
`time_in` / `vector_in` / `guidance_in` embedders pruned; one `Approximator`
(`distilled_guidance_layer`, `blocks.py`) maps, for each of `mod_index_length` rows,
`[emb16(t), emb16(guidance), emb32(row index)]` (sinusoidal embeddings of 1000 x the value) to a
`[hidden]` vector, and the rows are dealt out as ComfyUI's `Chroma.get_modulations` does:

    single block i : rows 3i .. 3i+2                          (shift, scale, gate)
    double block i : img rows 3S + 6i .., txt rows 3S + 6D + 6i ..  (two triples each)
    final layer    : the last two rows                        (shift, scale)

with S single and D double blocks. ComfyUI fixes the row count at 344 (= 3*38 + 12*19 + 2, the
released model); here it is `max(344, 3S + 12D + 2)`, so the released model gets ComfyUI's rows
exactly and a smaller one (the tiny test models) takes its final modulation from rows 342, 343
as in ComfyUI, while a larger one still has a row per vector (ComfyUI would fail).

Constructor, forward arguments, state-dict names and patch points are those of ComfyUI's
`comfy/ldm/chroma/model.py` (`Chroma(image_model=None, final_layer=True, dtype, device,
operations, **ChromaParams)`, `forward(x, timestep, context, guidance, control,
transformer_options, **kwargs)`; `in_channels` / `out_channels` are the patched widths, 64):

- `timestep` is sigma in 0..1 (flow sampling with multiplier 1), `guidance` `[B]` (Chroma's
  default is 0; None is taken as 0, where ComfyUI would fail);
- `transformer_options["patches_replace"]["dit"][("double_block", i)]` / `("single_block", i)`
  replace a block: called with `{"img", "txt", "vec", "pe", "attn_mask", "transformer_options"}`
  (`vec`: the block's modulations; single blocks: no "txt") and `{"original_block": fn}`;
  `transformer_options["block_type"]`, `["block_index"]`, `["total_blocks"]` are set per block on
  a shallow copy, as our Flux does;
- `skip_mmdit` / `skip_dit` (lists of double / single block indices) skip those blocks;
- `control["input"][i]` is added to the image tokens after double block i, `control["output"][i]`
  to the image part of the joint sequence after single block i;
- `attention_mask` (kwarg) is passed to every attention as `attn_mask`; `y` (pooled text) and
  other keyword arguments are ignored, as ComfyUI's `**kwargs`.

ComfyUI's DIFFUSION_MODEL wrappers are not run here: our `DiffusionModel` runs them around the
call to this module. Diffusers' `ChromaTransformer2DModel` names convert to these
(`convert_diffusers_state_dict`, over Flux's key map plus the approximator's names).
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Callable, Mapping

import torch
from torch import nn

from comfy_core.families.flux.dit import (FluxConfigError, StreamTransformerParams, count_numbered, default_axes_dim,
                                          expect_shape, image_tokens, run_stream_blocks, stream_blocks,
                                          tokens_to_image)
from comfy_core.families.flux.blocks import EmbedND, timestep_embedding
from comfy_core.families.chroma.blocks import (Approximator, ChromaModulationOut, DoubleStreamBlock, LastLayer,
                                               SingleStreamBlock)
from comfy_core.models.unet_blocks import operations_or_default
from comfy_core.models.weight_shapes import shape_reader

GUIDANCE_LAYER = "distilled_guidance_layer."
# ComfyUI's `mod_index_length` (the released Chroma: 3 * 38 + 2 * 6 * 19 + 2).
COMFY_MOD_INDEX_LENGTH = 344
# The approximator's input: sinusoidal embeddings of the timestep (16), guidance (16), row index (32).
APPROXIMATOR_IN_DIM = 64
_TIME_DIM, _INDEX_DIM = 16, 32


class ChromaConfigError(ValueError):
    """The Chroma weights are incomplete or inconsistent, or the parameters are impossible."""


@dataclass(frozen=True)
class ChromaConfig(StreamTransformerParams):
    """ComfyUI's `ChromaParams` (the released Chroma's values as defaults), `axes_dim` a tuple."""

    _error = ChromaConfigError
    _name = "Chroma"
    image_model = "chroma"

    in_channels: int = 64  # patched: latent channels * patch_size**2
    out_channels: int = 64
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
    in_dim: int = 64  # approximator input
    out_dim: int = 3072  # approximator output (= hidden_size)
    hidden_dim: int = 5120  # approximator width
    n_layers: int = 5  # approximator residual MLPs

    def __post_init__(self) -> None:
        self._check_heads()
        if self.in_dim != APPROXIMATOR_IN_DIM:
            raise ChromaConfigError(f"Chroma: the approximator takes {APPROXIMATOR_IN_DIM} channels (timestep, "
                                    f"guidance and index embeddings), not {self.in_dim}")
        if self.out_dim != self.hidden_size:
            raise ChromaConfigError(f"Chroma: the approximator gives {self.out_dim} channels, the blocks are "
                                    f"{self.hidden_size} wide")

    @property
    def latent_channels(self) -> int:
        return self.in_channels // (self.patch_size * self.patch_size)

    @property
    def mod_index_length(self) -> int:
        """Rows of the approximator's output (see the module docstring)."""
        return max(COMFY_MOD_INDEX_LENGTH, 3 * self.depth_single_blocks + 12 * self.depth + 2)

    @classmethod
    def detect_from_weights(cls, tensors: Mapping[str, Any], prefix: str = "") -> "ChromaConfig":
        """The structure of the Chroma transformer under `prefix` from names and shapes only.

        Widths from `img_in` (hidden, patched input), `txt_in` (context), `final_layer.linear`
        (patched output), the approximator's `in_proj` / `out_proj` / numbered `layers.N` and
        `norms.N`; heads from the QK-norm scale width; depths from the numbered blocks; no
        `vector_in`, `time_in` or `guidance_in` (those are Flux's). Patch size 2, theta 10000 and
        the RoPE split are not in the weights (ComfyUI's model_detection assumes them too).
        Raises `ChromaConfigError` naming the key when the weights are incomplete or inconsistent."""
        shape = shape_reader(tensors, prefix, ChromaConfigError, "Chroma")
        if prefix + GUIDANCE_LAYER + "in_proj.weight" not in tensors:
            raise ChromaConfigError(f"Chroma: no {prefix}{GUIDANCE_LAYER}in_proj.weight (not a Chroma transformer)")
        for flux_only in ("vector_in.in_layer.weight", "time_in.in_layer.weight", "guidance_in.in_layer.weight"):
            if prefix + flux_only in tensors:
                raise ChromaConfigError(f"Chroma: {prefix}{flux_only} is a Flux embedder, which Chroma does not have")
        patch_size = 2
        area = patch_size * patch_size
        hidden, in_channels = shape("img_in.weight")
        txt_hidden, context_in_dim = shape("txt_in.weight")
        out_channels, final_in = shape("final_layer.linear.weight")
        approx_hidden, in_dim = shape(GUIDANCE_LAYER + "in_proj.weight")
        out_dim, approx_in = shape(GUIDANCE_LAYER + "out_proj.weight")
        for name, width in (("txt_in.weight", txt_hidden), ("final_layer.linear.weight", final_in)):
            if width != hidden:
                raise ChromaConfigError(f"Chroma: {prefix}{name} has width {width}, img_in has {hidden}")
        for name, channels in (("img_in.weight", in_channels), ("final_layer.linear.weight", out_channels)):
            if channels % area:
                raise ChromaConfigError(f"Chroma: {prefix}{name} has {channels} channels, not a multiple of the "
                                        f"{area} of a {patch_size}x{patch_size} patch")
        if approx_in != approx_hidden:
            raise ChromaConfigError(f"Chroma: {prefix}{GUIDANCE_LAYER}out_proj.weight takes {approx_in} channels, "
                                    f"in_proj gives {approx_hidden}")
        n_layers = _count(tensors, prefix, GUIDANCE_LAYER + "layers")
        if _count(tensors, prefix, GUIDANCE_LAYER + "norms") != n_layers:
            raise ChromaConfigError(f"Chroma: {prefix}{GUIDANCE_LAYER} has {n_layers} layers but "
                                    f"{_count(tensors, prefix, GUIDANCE_LAYER + 'norms')} norms")
        for i in range(n_layers):
            for layer in ("in_layer", "out_layer"):
                _expect(shape, f"{GUIDANCE_LAYER}layers.{i}.{layer}.weight", (approx_hidden, approx_hidden), prefix)
            _expect(shape, f"{GUIDANCE_LAYER}norms.{i}.scale", (approx_hidden,), prefix)
        blocks = stream_blocks(tensors, prefix, hidden, shape, ChromaConfigError, "Chroma")
        depth, depth_single, head_dim = blocks.depth, blocks.depth_single, blocks.head_dim
        mlp_hidden, qkv_bias = blocks.mlp_hidden, blocks.qkv_bias
        try:
            axes_dim = default_axes_dim(head_dim)
        except FluxConfigError as exc:
            raise ChromaConfigError(str(exc).replace("Flux", "Chroma", 1)) from None
        return cls(in_channels=in_channels, out_channels=out_channels, context_in_dim=context_in_dim,
                   hidden_size=hidden, mlp_ratio=mlp_hidden / hidden, num_heads=hidden // head_dim, depth=depth,
                   depth_single_blocks=depth_single, axes_dim=axes_dim, theta=10000, patch_size=patch_size,
                   qkv_bias=qkv_bias, in_dim=in_dim, out_dim=out_dim, hidden_dim=approx_hidden, n_layers=n_layers)


def is_chroma(tensors: Mapping[str, Any], prefix: str = "") -> bool:
    """Whether the names under `prefix` are a Chroma transformer in the BFL layout (ComfyUI's test:
    QK-normed double blocks and the approximator's first norm; no Flux `vector_in`)."""
    return (prefix + "double_blocks.0.img_attn.norm.key_norm.scale" in tensors
            and prefix + GUIDANCE_LAYER + "norms.0.scale" in tensors
            and prefix + "vector_in.in_layer.weight" not in tensors)


def _count(tensors: Mapping[str, Any], prefix: str, group: str) -> int:
    return count_numbered(tensors, prefix, group, ChromaConfigError, "Chroma")


def _expect(shape: Callable[[str], tuple[int, ...]], key: str, expected: tuple[int, ...], prefix: str) -> None:
    expect_shape(shape, key, expected, prefix, ChromaConfigError, "Chroma")


class Chroma(nn.Module):
    """The Chroma transformer (see the module docstring); `params` are `ChromaConfig`'s fields."""

    # DIFFUSION_MODEL wrappers' positional arguments, ComfyUI's `_forward` order (comfy_core/models/diffusion.py)
    wrapper_arguments = ("x", "timesteps", "context", "guidance", "control", "transformer_options")

    def __init__(self, image_model: Any = None, final_layer: bool = True, dtype: Any = None, device: Any = None,
                 operations: Any = None, **params: Any) -> None:
        super().__init__()
        ops = operations_or_default(operations)
        try:
            config = ChromaConfig(**params)
        except TypeError as error:
            raise ChromaConfigError(f"Chroma: {error}") from None
        factory = {"dtype": dtype, "device": device}
        self.dtype = dtype
        self.config = config
        self.params = config  # ComfyUI's attribute name (ChromaParams)
        self.patch_size = config.patch_size
        self.in_channels = config.in_channels
        self.out_channels = config.out_channels
        self.hidden_size = config.hidden_size
        self.num_heads = config.num_heads
        self.in_dim, self.out_dim = config.in_dim, config.out_dim
        self.hidden_dim, self.n_layers = config.hidden_dim, config.n_layers
        self.pe_embedder = EmbedND(dim=config.head_dim, theta=config.theta, axes_dim=config.axes_dim)
        self.img_in = ops.Linear(self.in_channels, self.hidden_size, bias=True, **factory)
        self.txt_in = ops.Linear(config.context_in_dim, self.hidden_size, **factory)
        self.distilled_guidance_layer = Approximator(in_dim=self.in_dim, hidden_dim=self.hidden_dim,
                                                     out_dim=self.out_dim, n_layers=self.n_layers, operations=ops,
                                                     **factory)
        self.double_blocks = nn.ModuleList(
            DoubleStreamBlock(self.hidden_size, self.num_heads, mlp_ratio=config.mlp_ratio, qkv_bias=config.qkv_bias,
                              operations=ops, **factory)
            for _ in range(config.depth))
        self.single_blocks = nn.ModuleList(
            SingleStreamBlock(self.hidden_size, self.num_heads, mlp_ratio=config.mlp_ratio, operations=ops, **factory)
            for _ in range(config.depth_single_blocks))
        if final_layer:
            self.final_layer = LastLayer(self.hidden_size, 1, self.out_channels, operations=ops, **factory)
        self.skip_mmdit: list[int] = []
        self.skip_dit: list[int] = []
        self.lite = False

    @classmethod
    def from_config(cls, config: ChromaConfig, **kwargs: Any) -> "Chroma":
        """`Chroma(**config.params(), **kwargs)` (kwargs: image_model, final_layer, dtype, device, operations)."""
        return cls(**kwargs, **config.params())

    def get_modulations(self, tensor: torch.Tensor, block_type: str, *, idx: int = 0) -> Any:
        """Block `idx`'s modulations from the approximator's output `tensor` `[B, L, C]` (ComfyUI's
        layout: single blocks, then double blocks' image rows, then their text rows, the final
        layer's two last): "single" -> one `ChromaModulationOut`, "double_img" / "double_txt" ->
        two, "final" -> `(shift, scale)` each `[B, 1, C]`."""
        if block_type == "final":
            return tensor[:, -2:-1, :], tensor[:, -1:, :]
        if block_type == "single":
            return ChromaModulationOut.from_offset(tensor, 3 * idx)
        if block_type in ("double_img", "double_txt"):
            offset = 6 * idx + 3 * self.config.depth_single_blocks
            if block_type == "double_txt":
                offset += 6 * self.config.depth
            return ChromaModulationOut.from_offset(tensor, offset), ChromaModulationOut.from_offset(tensor, offset + 3)
        raise ValueError(f"Chroma: unknown block_type {block_type!r}")

    def modulation_vectors(self, timesteps: torch.Tensor, guidance: torch.Tensor | None, batch: int,
                           dtype: torch.dtype, device: torch.device) -> torch.Tensor:
        """The approximator's output `[B, mod_index_length, hidden]` for timesteps / guidance `[B]`."""
        length = self.config.mod_index_length
        if guidance is None:
            guidance = torch.zeros_like(timesteps)
        t_emb = timestep_embedding(timesteps.detach().reshape(-1), _TIME_DIM).to(device, dtype)  # [B, 16]
        g_emb = timestep_embedding(guidance.detach().reshape(-1), _TIME_DIM).to(device, dtype)  # [B, 16]
        t_emb, g_emb = t_emb.expand(batch, -1), g_emb.expand(batch, -1)
        index = timestep_embedding(torch.arange(length, device=device), _INDEX_DIM).to(device, dtype)  # [L, 32]
        time_guidance = torch.cat([t_emb, g_emb], dim=1)[:, None, :].expand(-1, length, -1)  # [B, L, 32]
        input_vec = torch.cat([time_guidance, index[None].expand(batch, -1, -1)], dim=-1)  # [B, L, 64]
        return self.distilled_guidance_layer(input_vec)  # [B, L, hidden]

    # -- the transformer on token sequences -------------------------------------------------------

    def forward_orig(self, img: torch.Tensor, img_ids: torch.Tensor, txt: torch.Tensor, txt_ids: torch.Tensor,
                     timesteps: torch.Tensor, guidance: torch.Tensor | None = None,
                     control: Mapping[str, Any] | None = None, transformer_options: Mapping[str, Any] = {},
                     attn_mask: torch.Tensor | None = None) -> torch.Tensor:
        """Tokens in, tokens out: img `[B, Ni, in_channels]`, img_ids `[B, Ni, 3]`, txt `[B, Nt, context]`,
        txt_ids `[B, Nt, 3]`, timesteps / guidance `[B]` -> `[B, Ni, out_channels]`."""
        options = dict(transformer_options or {})

        img = self.img_in(img)  # [B, Ni, C]
        mod_vectors = self.modulation_vectors(timesteps, guidance, img.shape[0], img.dtype, img.device)
        txt = self.txt_in(txt)  # [B, Nt, C]
        pe = self.pe_embedder(torch.cat((txt_ids, img_ids), dim=1))

        img = run_stream_blocks(
            self.double_blocks, self.single_blocks, img, txt, pe, options,
            lambda i: (self.get_modulations(mod_vectors, "double_img", idx=i),
                       self.get_modulations(mod_vectors, "double_txt", idx=i)),
            lambda i: self.get_modulations(mod_vectors, "single", idx=i),
            control, attn_mask, skip_double=self.skip_mmdit, skip_single=self.skip_dit,
            clamp_fp16=False)  # [B, Ni, C]
        if hasattr(self, "final_layer"):
            img = self.final_layer(img, vec=self.get_modulations(mod_vectors, "final"))  # [B, Ni, out_channels]
        return img

    # -- latents <-> tokens -----------------------------------------------------------------------

    def forward(self, x: torch.Tensor, timestep: torch.Tensor, context: torch.Tensor,
                guidance: torch.Tensor | None = None, control: Mapping[str, Any] | None = None,
                transformer_options: Mapping[str, Any] = {}, **kwargs: Any) -> torch.Tensor:
        """x `[B, C, H, W]` (C = in_channels / patch area), timestep (sigma) `[B]`, context
        `[B, Nt, context_in_dim]`, guidance `[B]` -> `[B, out_channels / patch area, H, W]`."""
        bs, c, h, w = x.shape
        p = self.patch_size
        img, img_ids = image_tokens(x, p)  # [B, h*w, c*p*p], [B, h*w, 3]
        if context.ndim != 3:
            raise ValueError("Chroma: img and txt token tensors must have 3 dimensions")
        h_len, w_len = (h + p // 2) // p, (w + p // 2) // p
        txt_ids = torch.zeros((bs, context.shape[1], 3), device=x.device, dtype=x.dtype)
        out = self.forward_orig(img, img_ids, context, txt_ids, timestep, guidance, control, transformer_options,
                                attn_mask=kwargs.get("attention_mask"))  # [B, h*w, out*p*p]
        return tokens_to_image(out, h_len, w_len, p)[:, :, :h, :w]


# -- diffusers' ChromaTransformer2DModel layout ---------------------------------------------------

def is_diffusers_chroma(tensors: Mapping[str, Any], prefix: str = "") -> bool:
    """Whether the names under `prefix` are a diffusers `ChromaTransformer2DModel` (Flux's diffusers
    names without `time_text_embed.*`, plus the approximator's `layers.N.linear_1`)."""
    return (prefix + "x_embedder.weight" in tensors
            and prefix + GUIDANCE_LAYER + "layers.0.linear_1.weight" in tensors
            and prefix + "time_text_embed.timestep_embedder.linear_1.weight" not in tensors)


def _approximator_name(name: str) -> str:
    """diffusers' approximator names -> ComfyUI's (`layers.N.linear_1/2` -> `in_layer/out_layer`,
    `norms.N.weight` -> `norms.N.scale`); `in_proj` / `out_proj` keep theirs."""
    name = re.sub(r"^layers\.(\d+)\.linear_1\.", r"layers.\1.in_layer.", name)
    name = re.sub(r"^layers\.(\d+)\.linear_2\.", r"layers.\1.out_layer.", name)
    return re.sub(r"^norms\.(\d+)\.weight$", r"norms.\1.scale", name)


def convert_diffusers_state_dict(state: Mapping[str, torch.Tensor], prefix: str = "",
                                 output_prefix: str = "") -> dict[str, torch.Tensor]:
    """ComfyUI-named tensors (with `output_prefix`) from a diffusers `ChromaTransformer2DModel` state
    dict under `prefix`: the approximator renamed, everything else through Flux's diffusers map
    (fused q/k/v, `linear1` from q/k/v/proj_mlp; Chroma has no adaLN linears to convert). Raises
    `comfy_core.families.flux.keys.FluxKeyError` for unknown tensors and fused tensors missing slices."""
    from comfy_core.families.flux.keys import convert_diffusers_state_dict as convert_flux

    approximator = prefix + GUIDANCE_LAYER
    out = {output_prefix + GUIDANCE_LAYER + _approximator_name(k[len(approximator):]): v
           for k, v in state.items() if k.startswith(approximator)}
    rest = {k: v for k, v in state.items() if k.startswith(prefix) and not k.startswith(approximator)}
    out.update(convert_flux(rest, prefix=prefix, output_prefix=output_prefix))
    return out


__all__ = ["COMFY_MOD_INDEX_LENGTH", "Chroma", "ChromaConfig", "ChromaConfigError", "convert_diffusers_state_dict",
           "is_chroma", "is_diffusers_chroma"]
