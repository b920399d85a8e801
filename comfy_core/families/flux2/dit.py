"""Flux.2 (dev, Klein): Black Forest Labs' 2025 rectified-flow transformer, and `Flux2Config` read
from weights.

What differs from Flux.1 (comfy_core/families/flux/dit.py), as BFL's FLUX.2 release and diffusers'
`Flux2Transformer2DModel` define it (the maths written here, reusing Flux.1's RoPE, QK-norm,
modulated LayerNorm and joint attention):

- no biases anywhere (input, time / guidance embedders, attention, MLP, modulation, final layer);
- the modulations are global, not per block: `double_stream_modulation_img` / `_txt` (6 chunks:
  shift, scale, gate for attention, then for the MLP) and `single_stream_modulation` (3 chunks),
  each `lin(silu(vec))`, shared by every block of their kind;
- the MLP is SwiGLU with the gate and value projections fused in `img_mlp.0` (`[2 * mlp, C]`:
  gate rows first, `silu(gate) * value`), mlp ratio 3; single blocks fuse q/k/v and both MLP
  projections in `linear1` (`[3C + 2 * mlp, C]`) and `linear2` takes `[attention, swiglu]`;
- 128 input channels (the VAE's 32 channels in 2x2 patches, so the network's patch size is 1),
  no pooled vector, the text states (Mistral Small 3 for dev: 3 x 5120; Qwen3 for Klein: 3 x its
  width) projected by `txt_in`;
- 4-axis RoPE (32 channels each for 128-channel heads), base 2000, over position ids
  `(t, row, col, l)`: image tokens `(0, row, col, 0)`, text tokens `(0, 0, 0, index)`, reference
  latents `(10 * k, row, col, 0)` for the k-th reference (ComfyUI's default "index" method);
- `vec = time_in(t) + guidance_in(g)` (dev; Klein has no guidance embedding); timestep and
  guidance scaled by 1000 before the sinusoidal embedding, as Flux.1.

Reference latents: "index" (the default) runs them with the image's modulations; "index_timestep_zero"
(ComfyUI's name; the Klein 9B KV model's placement, diffusers' `ref_fixed_timestep=0`) modulates the
reference tokens of every block with `vec` at timestep 0 (same guidance) while the image and text
tokens keep timestep t. `default_ref_method` (an attribute of the network, object-patched by
FluxKVCache) is the method when the conditioning names none. A reference K/V cache
(`transformer_options[REFERENCE_KV]`, comfy_core/model_patches/flux_kv_cache.py) makes the
attention keep the reference tokens' rotated K/V on the run's first call and, on later calls, run
only the text and image tokens against the kept K/V.

ComfyUI's forward arguments and patch points are Flux.1's (the double/single block replacements,
`post_input`, `block_index`, ControlNet adds); the block replacements receive `vec` as the
modulations the block uses (the global ones), as in newer ComfyUI with its global modulation.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Mapping, Sequence

import torch
import torch.nn.functional as F
from torch import nn

from comfy_core.attention.rope import ROPE_OPTIONS, rope_axis_positions, rotate_pairs
from comfy_core.families.flux import math as flux_math
from comfy_core.families.flux.blocks import (EmbedND, ModulationOut, QKNorm, apply_mod, patched_self_attention,
                                            timestep_embedding)
from comfy_core.families.flux.dit import count_numbered, run_stream_blocks, tokens_to_image
from comfy_core.models.comfyui_names import comfyui_name
from comfy_core.models.unet_blocks import operations_or_default
from comfy_core.models.weight_shapes import shape_reader

FLUX2_THETA = 2000
FLUX2_REF_INDEX_SCALE = 10  # reference k gets time index 10 * k (ComfyUI / diffusers)
FLUX2_REF_METHODS = ("index", "index_timestep_zero")
REFERENCE_KV = "flux_reference_kv"  # transformer_options: a run's reference K/V cache (model_patches/flux_kv_cache)
REFERENCE_KV_CALL = "flux_reference_kv_call"  # transformer_options of one network call: its cache slot
TEXT_ID_AXIS = 3


class Flux2ConfigError(ValueError):
    """The Flux.2 weights are incomplete or inconsistent, or the parameters are impossible."""


def flux2_axes_dim(head_dim: int) -> tuple[int, int, int, int]:
    """RoPE channels per axis `(t, row, col, l)`: a quarter of the head each (Flux.2's 128-channel
    heads: 32 x 4; not in the weights)."""
    if head_dim % 8:
        raise Flux2ConfigError(f"Flux.2: a head of {head_dim} channels cannot carry 4 even RoPE axes")
    return (head_dim // 4,) * 4


@dataclass(frozen=True)
class Flux2Config:
    """The structure of a Flux.2 transformer (the FLUX.2 dev defaults)."""

    in_channels: int = 128
    out_channels: int = 128
    context_in_dim: int = 15360
    hidden_size: int = 6144
    mlp_ratio: float = 3.0
    num_heads: int = 48
    depth: int = 8
    depth_single_blocks: int = 48
    axes_dim: tuple[int, ...] = (32, 32, 32, 32)
    theta: int = FLUX2_THETA
    patch_size: int = 1
    guidance_embed: bool = True

    image_model = "flux2"

    def __post_init__(self) -> None:
        object.__setattr__(self, "axes_dim", tuple(int(a) for a in self.axes_dim))
        if self.num_heads <= 0 or self.hidden_size % self.num_heads:
            raise Flux2ConfigError(f"Flux.2: hidden size {self.hidden_size} must be divisible by num_heads "
                                   f"{self.num_heads}")
        if sum(self.axes_dim) != self.head_dim:
            raise Flux2ConfigError(f"Flux.2: axes_dim {list(self.axes_dim)} must sum to the head width {self.head_dim}")

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_heads

    @property
    def mlp_hidden(self) -> int:
        return int(self.hidden_size * self.mlp_ratio)

    @property
    def variant(self) -> str:
        """"dev" (a guidance embedding) or "klein" (none)."""
        return "dev" if self.guidance_embed else "klein"

    def params(self) -> dict[str, Any]:
        params = asdict(self)
        params["axes_dim"] = list(self.axes_dim)
        return params

    def comfy_unet_config(self) -> dict[str, Any]:
        """ComfyUI's `unet_config` of this model (`image_model` "flux2" and the network's arguments)."""
        return {"image_model": self.image_model, **self.params()}

    @classmethod
    def detect_from_weights(cls, tensors: Mapping[str, Any], prefix: str = "") -> "Flux2Config":
        """The structure of the Flux.2 transformer under `prefix` from names and shapes only.

        Width and input channels from `img_in`, text width from `txt_in`, output channels from
        `final_layer.linear`, head width from the QK-norm scale, MLP width from `img_mlp.0` (half
        its rows: gate and value), depths from the numbered blocks, guidance from `guidance_in`.
        Raises `Flux2ConfigError` naming the key when the weights are not a Flux.2 transformer."""
        shape = shape_reader(tensors, prefix, Flux2ConfigError, "Flux.2")
        if prefix + "double_stream_modulation_img.lin.weight" not in tensors:
            raise Flux2ConfigError(f"Flux.2: no {prefix}double_stream_modulation_img.lin.weight (global modulation)")
        if prefix + "vector_in.in_layer.weight" in tensors:
            raise Flux2ConfigError(f"Flux.2: {prefix}vector_in is Flux.1's pooled-text input")
        hidden, in_channels = shape("img_in.weight")
        txt_hidden, context = shape("txt_in.weight")
        out_channels, final_in = shape("final_layer.linear.weight")
        time_hidden, time_in = shape("time_in.in_layer.weight")
        for key, width in (("txt_in.weight", txt_hidden), ("final_layer.linear.weight", final_in),
                           ("time_in.in_layer.weight", time_hidden)):
            if width != hidden:
                raise Flux2ConfigError(f"Flux.2: {prefix}{key} has width {width}, img_in has {hidden}")
        if time_in != 256:
            raise Flux2ConfigError(f"Flux.2: {prefix}time_in.in_layer.weight takes {time_in} channels, not 256")
        expect = _expecter(shape, prefix)
        expect("double_stream_modulation_img.lin.weight", (6 * hidden, hidden))
        expect("double_stream_modulation_txt.lin.weight", (6 * hidden, hidden))
        expect("single_stream_modulation.lin.weight", (3 * hidden, hidden))
        expect("final_layer.adaLN_modulation.1.weight", (2 * hidden, hidden))
        depth = count_numbered(tensors, prefix, "double_blocks", Flux2ConfigError, "Flux.2")
        depth_single = count_numbered(tensors, prefix, "single_blocks", Flux2ConfigError, "Flux.2")
        if depth:
            (head_dim,) = shape("double_blocks.0.img_attn.norm.query_norm.scale")
            mlp2 = shape("double_blocks.0.img_mlp.0.weight")[0]
        elif depth_single:
            (head_dim,) = shape("single_blocks.0.norm.query_norm.scale")
            mlp2 = shape("single_blocks.0.linear1.weight")[0] - 3 * hidden
        else:
            raise Flux2ConfigError(f"Flux.2: no {prefix}double_blocks.N or {prefix}single_blocks.N weights")
        if head_dim <= 0 or hidden % head_dim:
            raise Flux2ConfigError(f"Flux.2: hidden size {hidden} is not a multiple of the head width {head_dim}")
        if mlp2 % 2:
            raise Flux2ConfigError(f"Flux.2: the SwiGLU input has {mlp2} rows, not gate + value halves")
        mlp = mlp2 // 2
        for i in range(depth):
            for stream in ("img", "txt"):
                expect(f"double_blocks.{i}.{stream}_attn.qkv.weight", (3 * hidden, hidden))
                expect(f"double_blocks.{i}.{stream}_attn.proj.weight", (hidden, hidden))
                expect(f"double_blocks.{i}.{stream}_mlp.0.weight", (2 * mlp, hidden))
                expect(f"double_blocks.{i}.{stream}_mlp.2.weight", (hidden, mlp))
        for i in range(depth_single):
            expect(f"single_blocks.{i}.linear1.weight", (3 * hidden + 2 * mlp, hidden))
            expect(f"single_blocks.{i}.linear2.weight", (hidden, hidden + mlp))
        guidance = prefix + "guidance_in.in_layer.weight" in tensors
        if guidance:
            expect("guidance_in.in_layer.weight", (hidden, 256))
        return cls(in_channels=in_channels, out_channels=out_channels, context_in_dim=context, hidden_size=hidden,
                   mlp_ratio=mlp / hidden, num_heads=hidden // head_dim, depth=depth,
                   depth_single_blocks=depth_single, axes_dim=flux2_axes_dim(head_dim), guidance_embed=guidance)


def _expecter(shape: Any, prefix: str) -> Any:
    def expect(key: str, expected: tuple[int, ...]) -> None:
        found = shape(key)
        if found != expected:
            raise Flux2ConfigError(f"Flux.2: {prefix}{key} has shape {found}, expected {expected}")
    return expect


def is_flux2(tensors: Mapping[str, Any], prefix: str = "") -> bool:
    """Whether the names under `prefix` are a Flux.2 transformer in BFL's (ComfyUI's) layout."""
    return prefix + "double_stream_modulation_img.lin.weight" in tensors and prefix + "img_in.weight" in tensors


# -- blocks -----------------------------------------------------------------------------------------

class Embedder(nn.Module):
    """`Linear(in, hidden) -> SiLU -> Linear(hidden, hidden)` without biases (`in_layer`, `out_layer`)."""

    def __init__(self, in_dim: int, hidden: int, ops: Any, factory: dict[str, Any]) -> None:
        super().__init__()
        self.in_layer = ops.Linear(in_dim, hidden, bias=False, **factory)
        self.out_layer = ops.Linear(hidden, hidden, bias=False, **factory)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out_layer(F.silu(self.in_layer(x)))


class GlobalModulation(nn.Module):
    """`lin(silu(vec))` (no bias) in 3 x `sets` chunks: shift, scale, gate per set."""

    def __init__(self, hidden: int, sets: int, ops: Any, factory: dict[str, Any]) -> None:
        super().__init__()
        self.sets = sets
        self.lin = ops.Linear(hidden, 3 * sets * hidden, bias=False, **factory)

    def forward(self, vec: torch.Tensor) -> tuple[ModulationOut, ...]:
        if vec.ndim == 2:
            vec = vec[:, None, :]  # [B, 1, C]
        chunks = self.lin(F.silu(vec)).chunk(3 * self.sets, dim=-1)
        return tuple(ModulationOut(*chunks[3 * i:3 * i + 3]) for i in range(self.sets))


def swiglu(x: torch.Tensor) -> torch.Tensor:
    """`silu(gate) * value` of `x = [gate, value]` along the last axis (Shazeer 2020, "GLU Variants")."""
    gate, value = x.chunk(2, dim=-1)
    return F.silu(gate) * value


class StreamAttention(nn.Module):
    """One stream's attention weights (`qkv`, `norm`, `proj`), no biases."""

    def __init__(self, hidden: int, num_heads: int, ops: Any, factory: dict[str, Any]) -> None:
        super().__init__()
        self.qkv = ops.Linear(hidden, 3 * hidden, bias=False, **factory)
        self.norm = QKNorm(hidden // num_heads, operations=ops, **factory)
        self.proj = ops.Linear(hidden, hidden, bias=False, **factory)


class SwiGLUMLP(nn.Sequential):
    """`0`: Linear(C, 2 * mlp) (gate, value), SwiGLU, `2`: Linear(mlp, C); no biases."""

    def __init__(self, hidden: int, mlp: int, ops: Any, factory: dict[str, Any]) -> None:
        super().__init__(ops.Linear(hidden, 2 * mlp, bias=False, **factory), _SwiGLU(),
                         ops.Linear(mlp, hidden, bias=False, **factory))


class _SwiGLU(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return swiglu(x)


def _heads(qkv: torch.Tensor, num_heads: int) -> torch.Tensor:
    b, n, _ = qkv.shape
    return qkv.view(b, n, 3, num_heads, -1).permute(2, 0, 3, 1, 4)  # [3, B, H, N, d]


def _joint_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, pe: torch.Tensor | None,
                     mask: torch.Tensor | None, options: dict[str, Any] | None) -> torch.Tensor:
    """Flux's attention over one block's joint sequence (q/k/v `[B, H, L, d]` -> `[B, L, H*d]`); with
    a reference K/V slot in `options` (REFERENCE_KV_CALL) q and k are rotated here so the slot
    keeps (or supplies) the reference tokens' keys after RoPE, as they were at their own positions."""
    slot = (options or {}).get(REFERENCE_KV_CALL)
    if slot is None:
        return flux_math.run_attention(q, k, v, pe=pe, mask=mask, transformer_options=options)
    if pe is not None:
        q = rotate_pairs(q, pe, v.dtype, fused=False)
        k = rotate_pairs(k, pe, v.dtype, fused=False)
    k, v, mask = slot.keys_for(options.get("block_type"), options.get("block_index"), k, v, mask)
    return flux_math.run_attention(q, k, v, pe=None, mask=mask, transformer_options=options)


def _timestep_zero_tail(mods_t: tuple[ModulationOut, ...], mods_0: tuple[ModulationOut, ...], n_t: int,
                        n_zero: int) -> tuple[ModulationOut, ...]:
    """Per-token modulations: the first `n_t` tokens at timestep t, the last `n_zero` at timestep 0
    (each field `[B, n_t + n_zero, C]`)."""
    def join(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return torch.cat((a.expand(-1, n_t, -1), b.expand(-1, n_zero, -1)), dim=1)

    return tuple(ModulationOut(join(a.shift, b.shift), join(a.scale, b.scale), join(a.gate, b.gate))
                 for a, b in zip(mods_t, mods_0))


class Flux2DoubleBlock(nn.Module):
    """Image and text streams with their own weights and one joint attention over `[txt, img]`;
    `vec` is the pair of global modulations `((img_attn, img_mlp), (txt_attn, txt_mlp))`."""

    def __init__(self, hidden: int, num_heads: int, mlp: int, ops: Any, factory: dict[str, Any]) -> None:
        super().__init__()
        self.num_heads = num_heads
        for stream in ("img", "txt"):
            setattr(self, f"{stream}_norm1", ops.LayerNorm(hidden, elementwise_affine=False, eps=1e-6, **factory))
            setattr(self, f"{stream}_attn", StreamAttention(hidden, num_heads, ops, factory))
            setattr(self, f"{stream}_norm2", ops.LayerNorm(hidden, elementwise_affine=False, eps=1e-6, **factory))
            setattr(self, f"{stream}_mlp", SwiGLUMLP(hidden, mlp, ops, factory))

    def _qkv(self, stream: str, x: torch.Tensor, mod: ModulationOut) -> tuple[torch.Tensor, ...]:
        attn = getattr(self, f"{stream}_attn")
        q, k, v = _heads(attn.qkv(apply_mod(getattr(self, f"{stream}_norm1")(x), 1 + mod.scale, mod.shift)),
                         self.num_heads)  # each [B, H, N, d]
        q, k = attn.norm(q, k, v)
        return q, k, v

    def _residuals(self, stream: str, x: torch.Tensor, out: torch.Tensor, mod1: ModulationOut,
                   mod2: ModulationOut) -> torch.Tensor:
        x = x + mod1.gate * getattr(self, f"{stream}_attn").proj(out)
        hidden = apply_mod(getattr(self, f"{stream}_norm2")(x), 1 + mod2.scale, mod2.shift)
        return x + mod2.gate * getattr(self, f"{stream}_mlp")(hidden)

    def forward(self, img: torch.Tensor, txt: torch.Tensor, vec: Any, pe: torch.Tensor | None,
                attn_mask: torch.Tensor | None = None,
                transformer_options: dict[str, Any] | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        # img [B, Ni, C], txt [B, Nt, C], pe [B, 1, Nt+Ni, d/2, 2, 2]
        (img_mod1, img_mod2), (txt_mod1, txt_mod2) = vec
        iq, ik, iv = self._qkv("img", img, img_mod1)
        tq, tk, tv = self._qkv("txt", txt, txt_mod1)
        n_txt = txt.shape[1]
        attn = patched_self_attention(torch.cat((tq, iq), dim=2), torch.cat((tk, ik), dim=2),
                                      torch.cat((tv, iv), dim=2),
                                      pe, attn_mask, transformer_options, (n_txt, n_txt + img.shape[1]),
                                      attend=_joint_attention)  # [B, Nt+Ni, C]
        img = self._residuals("img", img, attn[:, n_txt:], img_mod1, img_mod2)
        txt = self._residuals("txt", txt, attn[:, :n_txt], txt_mod1, txt_mod2)
        if txt.dtype == torch.float16:
            txt = torch.nan_to_num(txt, nan=0.0, posinf=65504, neginf=-65504)
        return img, txt


class Flux2SingleBlock(nn.Module):
    """The parallel block over `[txt, img]`: `linear1` gives q, k, v and the SwiGLU input,
    `linear2` projects `[attention, swiglu]`; `vec` is the global single-stream modulation."""

    def __init__(self, hidden: int, num_heads: int, mlp: int, ops: Any, factory: dict[str, Any]) -> None:
        super().__init__()
        self.hidden_size = hidden
        self.num_heads = num_heads
        self.mlp_hidden_dim = mlp
        self.linear1 = ops.Linear(hidden, 3 * hidden + 2 * mlp, bias=False, **factory)
        self.linear2 = ops.Linear(hidden + mlp, hidden, bias=False, **factory)
        self.norm = QKNorm(hidden // num_heads, operations=ops, **factory)
        self.pre_norm = ops.LayerNorm(hidden, elementwise_affine=False, eps=1e-6, **factory)

    def forward(self, x: torch.Tensor, vec: Any, pe: torch.Tensor | None, attn_mask: torch.Tensor | None = None,
                transformer_options: dict[str, Any] | None = None) -> torch.Tensor:
        (mod,) = vec
        qkv, mlp = torch.split(self.linear1(apply_mod(self.pre_norm(x), 1 + mod.scale, mod.shift)),
                               [3 * self.hidden_size, 2 * self.mlp_hidden_dim], dim=-1)
        q, k, v = _heads(qkv, self.num_heads)
        q, k = self.norm(q, k, v)
        attn = patched_self_attention(q, k, v, pe, attn_mask, transformer_options, attend=_joint_attention)
        x = x + mod.gate * self.linear2(torch.cat((attn, swiglu(mlp)), dim=2))  # [B, N, C]
        if x.dtype == torch.float16:
            x = torch.nan_to_num(x, nan=0.0, posinf=65504, neginf=-65504)
        return x


class Flux2LastLayer(nn.Module):
    """Modulated final LayerNorm (`adaLN_modulation.1`: shift then scale, no bias) and the output
    projection (no bias)."""

    def __init__(self, hidden: int, out: int, ops: Any, factory: dict[str, Any]) -> None:
        super().__init__()
        self.norm_final = ops.LayerNorm(hidden, elementwise_affine=False, eps=1e-6, **factory)
        self.linear = ops.Linear(hidden, out, bias=False, **factory)
        self.adaLN_modulation = nn.Sequential(nn.SiLU(), ops.Linear(hidden, 2 * hidden, bias=False, **factory))

    def forward(self, x: torch.Tensor, vec: torch.Tensor) -> torch.Tensor:
        shift, scale = self.adaLN_modulation(vec[:, None, :]).chunk(2, dim=-1)  # [B, 1, C] each
        return self.linear(apply_mod(self.norm_final(x), 1 + scale, shift))


# -- the network --------------------------------------------------------------------------------------

def flux2_image_tokens(x: torch.Tensor, index: float = 0.0, *,
                       rope_options: Mapping[str, Any] | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """`x` `[B, C, h, w]` (patch size 1) -> tokens `[B, h*w, C]` and ids `[B, h*w, 4]` = `(index, row, col, 0)`;
    ScaleROPE's `rope_options` scale and shift rows and columns and shift the index (ComfyUI's Flux
    `process_img`, which Flux.2 runs)."""
    b, c, h, w = x.shape
    tokens = x.reshape(b, c, h * w).transpose(1, 2)
    axis = dict(rope_options=rope_options, device=x.device, dtype=torch.float32)
    ids = torch.zeros((h, w, 4), device=x.device, dtype=torch.float32)
    ids[..., 0] = rope_axis_positions(1, "t", start=index, **axis)
    ids[..., 1] = rope_axis_positions(h, "y", **axis)[:, None]
    ids[..., 2] = rope_axis_positions(w, "x", **axis)[None, :]
    return tokens, ids.reshape(1, h * w, 4).repeat(b, 1, 1)


def flux2_text_ids(batch: int, length: int, device: Any) -> torch.Tensor:
    """Text position ids `[B, T, 4]`: `(0, 0, 0, index)`."""
    ids = torch.zeros((batch, length, 4), device=device, dtype=torch.float32)
    ids[..., TEXT_ID_AXIS] = torch.arange(length, device=device, dtype=torch.float32)
    return ids


@comfyui_name("Flux")
class Flux2Transformer(nn.Module):
    """The Flux.2 transformer (see the module docstring); `params` are `Flux2Config`'s fields.
    ComfyUI runs Flux.2 with its `comfy.ldm.flux.model.Flux` class (image_model "flux2")."""

    # DIFFUSION_MODEL wrappers' positional arguments, ComfyUI's `_forward` order (comfy_core/models/diffusion.py)
    wrapper_arguments = ("x", "timesteps", "context", "y", "guidance", "ref_latents", "control", "transformer_options")

    reference_kv_key = REFERENCE_KV  # runs a reference K/V cache found under this transformer_options key

    def __init__(self, image_model: Any = None, final_layer: bool = True, dtype: Any = None, device: Any = None,
                 operations: Any = None, **params: Any) -> None:
        super().__init__()
        ops = operations_or_default(operations)
        try:
            config = Flux2Config(**params)
        except TypeError as error:
            raise Flux2ConfigError(f"Flux.2: {error}") from None
        factory = {"dtype": dtype, "device": device}
        self.dtype = dtype
        self.config = self.params = config
        self.patch_size = config.patch_size
        self.in_channels, self.out_channels = config.in_channels, config.out_channels
        self.hidden_size, self.num_heads = config.hidden_size, config.num_heads
        hidden, mlp = config.hidden_size, config.mlp_hidden
        self.pe_embedder = EmbedND(dim=config.head_dim, theta=config.theta, axes_dim=config.axes_dim)
        self.img_in = ops.Linear(config.in_channels, hidden, bias=False, **factory)
        self.time_in = Embedder(256, hidden, ops, factory)
        if config.guidance_embed:
            self.guidance_in = Embedder(256, hidden, ops, factory)
        self.txt_in = ops.Linear(config.context_in_dim, hidden, bias=False, **factory)
        self.double_stream_modulation_img = GlobalModulation(hidden, 2, ops, factory)
        self.double_stream_modulation_txt = GlobalModulation(hidden, 2, ops, factory)
        self.single_stream_modulation = GlobalModulation(hidden, 1, ops, factory)
        self.double_blocks = nn.ModuleList(Flux2DoubleBlock(hidden, config.num_heads, mlp, ops, factory)
                                           for _ in range(config.depth))
        self.single_blocks = nn.ModuleList(Flux2SingleBlock(hidden, config.num_heads, mlp, ops, factory)
                                           for _ in range(config.depth_single_blocks))
        if final_layer:
            self.final_layer = Flux2LastLayer(hidden, config.out_channels, ops, factory)
        self.default_ref_method = "index"  # FluxKVCache object-patches "index_timestep_zero"

    @classmethod
    def from_config(cls, config: Flux2Config, **kwargs: Any) -> "Flux2Transformer":
        return cls(**kwargs, **config.params())

    def lora_key_map(self, names: list[str]) -> dict[str, Any]:
        """LoRA layer name -> target (`comfy_core.lora.dit_keymap`; spellings: `flux2.keys.lora_key_map`)."""
        from comfy_core.families.flux2.keys import lora_key_map

        return lora_key_map(self.config, names)

    def forward_orig(self, img: torch.Tensor, img_ids: torch.Tensor, txt: torch.Tensor, txt_ids: torch.Tensor,
                     timesteps: torch.Tensor, guidance: torch.Tensor | None = None,
                     control: Mapping[str, Any] | None = None, transformer_options: Mapping[str, Any] = {},
                     attn_mask: torch.Tensor | None = None, timestep_zero_from: int | None = None) -> torch.Tensor:
        """Tokens in, tokens out: img `[B, Ni, in]`, img_ids `[B, Ni, 4]`, txt `[B, Nt, context]`,
        txt_ids `[B, Nt, 4]`, timesteps (sigma) / guidance `[B]` -> `[B, Ni, out]`. Image tokens from
        `timestep_zero_from` on (after the `post_input` patches) are modulated at timestep 0."""
        if img.ndim != 3 or txt.ndim != 3:
            raise ValueError("Flux.2: img and txt token tensors must have 3 dimensions")
        options = dict(transformer_options or {})
        patches = options.get("patches", {}) or {}
        img = self.img_in(img)  # [B, Ni, C]
        vec = self.time_in(timestep_embedding(timesteps, 256).to(img.dtype))  # [B, C]
        if self.config.guidance_embed and guidance is not None:
            vec = vec + self.guidance_in(timestep_embedding(guidance, 256).to(img.dtype))
        txt = self.txt_in(txt)  # [B, Nt, C]
        for patch in patches.get("post_input", ()):
            out = patch({"img": img, "txt": txt, "img_ids": img_ids, "txt_ids": txt_ids})
            img, txt, img_ids, txt_ids = out["img"], out["txt"], out["img_ids"], out["txt_ids"]
        double_mod = (self.double_stream_modulation_img(vec), self.double_stream_modulation_txt(vec))
        single_mod = self.single_stream_modulation(vec)
        n_zero = 0 if timestep_zero_from is None else img.shape[1] - timestep_zero_from
        if n_zero > 0:
            vec0 = self.time_in(timestep_embedding(torch.zeros_like(timesteps), 256).to(img.dtype))  # [B, C]
            if self.config.guidance_embed and guidance is not None:
                vec0 = vec0 + self.guidance_in(timestep_embedding(guidance, 256).to(img.dtype))
            n_t = img.shape[1] - n_zero
            double_mod = (_timestep_zero_tail(double_mod[0], self.double_stream_modulation_img(vec0), n_t, n_zero),
                          double_mod[1])
            single_mod = _timestep_zero_tail(single_mod, self.single_stream_modulation(vec0), txt.shape[1] + n_t,
                                             n_zero)
        pe = self.pe_embedder(torch.cat((txt_ids, img_ids), dim=1))  # [B, 1, Nt+Ni, d/2, 2, 2]
        img = run_stream_blocks(self.double_blocks, self.single_blocks, img, txt, pe, options,
                                lambda i: double_mod, lambda i: single_mod, control, attn_mask)
        return self.final_layer(img, vec)  # [B, Ni, out]

    def forward(self, x: torch.Tensor, timestep: torch.Tensor, context: torch.Tensor, y: torch.Tensor | None = None,
                guidance: torch.Tensor | None = None, ref_latents: Sequence[torch.Tensor] | None = None,
                control: Mapping[str, Any] | None = None, transformer_options: Mapping[str, Any] = {},
                **kwargs: Any) -> torch.Tensor:
        """x `[B, 128, h, w]` (the patchified latent), timestep (sigma) `[B]`, context
        `[B, Nt, context_in_dim]`, guidance `[B]` (dev), ref_latents `[B, 128, h', w']` each
        (the k-th at time index 10 * k) -> `[B, out_channels, h, w]`. `y` is ignored (no pooled input)."""
        bs, _, h, w = x.shape
        options = dict(transformer_options or {})
        img, img_ids = flux2_image_tokens(x, rope_options=options.get(ROPE_OPTIONS))  # not the references'
        img_tokens = img.shape[1]
        method = kwargs.get("ref_latents_method") or options.get("ref_latents_method") or self.default_ref_method
        if ref_latents and method not in FLUX2_REF_METHODS:  # another placement would be silently wrong
            raise ValueError(f"Flux.2: reference latents method {method!r} is not supported; only 'index' "
                             "(reference k at time index 10 * k) and 'index_timestep_zero' (the same, "
                             "modulated at timestep 0)")
        ref_tokens = sum(ref.shape[-2] * ref.shape[-1] for ref in ref_latents or ())
        cache = options.get(REFERENCE_KV) if ref_tokens else None
        slot = None if cache is None else cache.slot_for(options, bs, ref_tokens)
        if slot is not None:
            options[REFERENCE_KV_CALL] = slot
        if slot is None or slot.filling:  # a cached call runs without the reference tokens
            for k, ref in enumerate(ref_latents or (), start=1):
                tokens, ids = flux2_image_tokens(ref.to(x), index=float(FLUX2_REF_INDEX_SCALE * k))
                img, img_ids = torch.cat((img, tokens), 1), torch.cat((img_ids, ids), 1)
        txt_ids = flux2_text_ids(bs, context.shape[1], x.device)
        zero_from = img_tokens if ref_latents and method == "index_timestep_zero" else None
        out = self.forward_orig(img, img_ids, context, txt_ids, timestep, guidance, control, options,
                                attn_mask=kwargs.get("attention_mask"), timestep_zero_from=zero_from)
        return tokens_to_image(out[:, :img_tokens], h, w, 1)  # [B, out, h, w]
