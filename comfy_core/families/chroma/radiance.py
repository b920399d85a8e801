"""Chroma Radiance (lodestones 2025, huggingface.co/lodestones/Chroma1-Radiance): Chroma in pixel
space. The Chroma transformer (`dit.py`: approximator modulations, double- then single-stream
blocks, T5-XXL context) reads 16x16 RGB patches through a strided convolution (`img_in_patch`)
instead of 2x2 latent patches, has no final layer, and a small NeRF-style head turns each patch's
hidden state back into pixels (after lodestone-rock/flow; ComfyUI's `comfy/ldm/chroma_radiance/`,
behaviour read, code written here):

    per patch (hidden s [D], pixels p [P*P, 3]):
        x = Linear([p, dct]) with dct[k, (fx, fy)] = cos(pi fx u_k) cos(pi fy v_k) / (1 + fx fy)
            (u, v: the pixel's column and row in 0..1, fx, fy < max_freqs)      [P*P, h]
        for each NeRF block: W_gate, W_value [h, r h], W_out [r h, h] = chunks of Linear(s),
            each column-normalised (L2 over its first axis);
            x = x + (silu(n(x) W_gate) * (n(x) W_value)) W_out                  (n: RMS norm)
    image = fold(patches) [B, h, H, W] -> RMS norm over h -> Linear (or 3x3 conv) to RGB

The patches are processed in tiles of `nerf_tile_size` rows of the flattened batch (memory only:
the rows are independent). `transformer_options["chroma_radiance_options"]` overrides the
config for a call (ChromaRadianceOptions sets `nerf_tile_size`); unknown keys or values of
another type are errors. As in ComfyUI the pixel embedder computes in the dtype the model was
built with (an override of `nerf_embedder_dtype` is accepted and changes nothing).
The "x0" checkpoints (a `__x0__` marker tensor) predict the clean image; their output becomes
the velocity `(x - x0) / sigma`, as ComfyUI's.

Detected from names and shapes: Chroma's approximator plus `nerf_blocks.*`; widths, patch size,
NeRF width, ratio, depth and frequency count read from the weights (ComfyUI fixes the released
model's: patch 16, NeRF 64 wide, ratio 4, depth 4, 8 frequencies); tile size 32 and a float32
pixel embedder as ComfyUI's detection sets. The latent is the image itself: 3 channels in -1..1,
scale 1, no VAE in the files (ComfyUI's "pixel_space" VAE converts).
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Mapping

import torch
import torch.nn.functional as F
from torch import nn

from comfy_core.families.architecture import Architecture
from comfy_core.families.base import Family, Geometry, SamplingPolicy, Signature
from comfy_core.families.chroma import GUIDANCE_LAYER, TEXT_ENCODERS, ChromaConditions, supported_models
from comfy_core.families.chroma.blocks import Approximator, DoubleStreamBlock, SingleStreamBlock
from comfy_core.families.chroma.latent_format import ChromaRadianceLatentFormat
from comfy_core.families.chroma.dit import Chroma, ChromaConfig, ChromaConfigError, _count, _expect
from comfy_core.families.flux.blocks import EmbedND, RMSNorm
from comfy_core.families.flux.dit import FluxConfigError, default_axes_dim, pad_to_patch_size, stream_blocks
from comfy_core.models.unet_blocks import operations_or_default
from comfy_core.models.weight_shapes import shape_reader

NERF_MARKER = "nerf_blocks.0.norm.scale"  # ComfyUI's test for Chroma Radiance
X0_MARKER = "__x0__"
FINAL_HEAD_TYPES = ("linear", "conv")
OPTIONS_KEY = "chroma_radiance_options"
# What ChromaRadianceOptions may override for a call (ComfyUI's `radiance_get_override_params`
# accepts any field; these are the ones its nodes set), with the types it checks.
_NULLABLE = frozenset({"nerf_embedder_dtype"})


@dataclass(frozen=True)
class ChromaRadianceConfig(ChromaConfig):
    """ComfyUI's `ChromaRadianceParams` (the released model's values as defaults)."""

    _name = "Chroma Radiance"
    image_model = "chroma_radiance"

    in_channels: int = 3  # pixel channels (not patched)
    out_channels: int = 3
    patch_size: int = 16
    nerf_hidden_size: int = 64
    nerf_mlp_ratio: int = 4
    nerf_depth: int = 4
    nerf_max_freqs: int = 8
    nerf_tile_size: int = 32  # 0: no tiling
    nerf_final_head_type: str = "linear"
    nerf_embedder_dtype: Any = torch.float32  # None: the model's dtype
    use_x0: bool = False

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.nerf_final_head_type not in FINAL_HEAD_TYPES:
            raise ChromaConfigError(f"Chroma Radiance: unsupported nerf_final_head_type "
                                    f"{self.nerf_final_head_type!r} (one of {FINAL_HEAD_TYPES})")
        if self.nerf_tile_size < 0:
            raise ChromaConfigError(f"Chroma Radiance: nerf_tile_size {self.nerf_tile_size} is negative")

    @property
    def latent_channels(self) -> int:
        return self.in_channels

    @classmethod
    def detect_from_weights(cls, tensors: Mapping[str, Any], prefix: str = "") -> "ChromaRadianceConfig":
        """The structure under `prefix` from names and shapes: `img_in_patch` `[D, C, P, P]`, `txt_in`,
        the approximator, the stream blocks, `nerf_image_embedder.embedder.0` `[h, C + F^2]`, the
        numbered `nerf_blocks.N.param_generator` `[3 h^2 r, D]`, and the final head (`nerf_final_layer`
        or `nerf_final_layer_conv`). Raises `ChromaConfigError` naming the key."""
        shape = shape_reader(tensors, prefix, ChromaConfigError, "Chroma Radiance")
        if prefix + NERF_MARKER not in tensors:
            raise ChromaConfigError(f"Chroma Radiance: no {prefix}{NERF_MARKER} (not a Chroma Radiance model)")
        patch = shape("img_in_patch.weight")
        if len(patch) != 4 or patch[2] != patch[3]:
            raise ChromaConfigError(f"Chroma Radiance: {prefix}img_in_patch.weight is {list(patch)}, not a square "
                                    "patch convolution")
        hidden, channels, patch_size = patch[0], patch[1], patch[2]
        txt_hidden, context_in_dim = shape("txt_in.weight")
        approx_hidden, in_dim = shape(GUIDANCE_LAYER + "in_proj.weight")
        out_dim, _ = shape(GUIDANCE_LAYER + "out_proj.weight")
        if txt_hidden != hidden:
            raise ChromaConfigError(f"Chroma Radiance: {prefix}txt_in.weight has width {txt_hidden}, img_in_patch "
                                    f"has {hidden}")
        n_layers = _count(tensors, prefix, GUIDANCE_LAYER + "layers")
        blocks = stream_blocks(tensors, prefix, hidden, shape, ChromaConfigError, "Chroma Radiance")
        nerf_hidden, embed_in = shape("nerf_image_embedder.embedder.0.weight")
        freqs = round((embed_in - channels) ** 0.5) if embed_in > channels else 0
        if freqs < 1 or channels + freqs * freqs != embed_in:
            raise ChromaConfigError(f"Chroma Radiance: {prefix}nerf_image_embedder.embedder.0.weight takes {embed_in} "
                                    f"inputs, not {channels} pixel channels plus a square number of frequencies")
        nerf_depth = _count(tensors, prefix, "nerf_blocks")
        generated, s_width = shape("nerf_blocks.0.param_generator.weight")
        ratio = generated // (3 * nerf_hidden * nerf_hidden)
        if s_width != hidden or ratio < 1 or 3 * nerf_hidden * nerf_hidden * ratio != generated:
            raise ChromaConfigError(f"Chroma Radiance: {prefix}nerf_blocks.0.param_generator.weight is "
                                    f"{[generated, s_width]}, not [3 x {nerf_hidden}^2 x ratio, {hidden}]")
        for i in range(nerf_depth):
            _expect(shape, f"nerf_blocks.{i}.param_generator.weight", (generated, hidden), prefix)
            _expect(shape, f"nerf_blocks.{i}.norm.scale", (nerf_hidden,), prefix)
        head = "conv" if prefix + "nerf_final_layer_conv.norm.scale" in tensors else "linear"
        if head == "conv":
            _expect(shape, "nerf_final_layer_conv.conv.weight", (channels, nerf_hidden, 3, 3), prefix)
        else:
            _expect(shape, "nerf_final_layer.linear.weight", (channels, nerf_hidden), prefix)
        try:
            axes_dim = default_axes_dim(blocks.head_dim)
        except FluxConfigError as exc:
            raise ChromaConfigError(str(exc).replace("Flux", "Chroma Radiance", 1)) from None
        return cls(in_channels=channels, out_channels=channels, context_in_dim=context_in_dim, hidden_size=hidden,
                   mlp_ratio=blocks.mlp_hidden / hidden, num_heads=hidden // blocks.head_dim, depth=blocks.depth,
                   depth_single_blocks=blocks.depth_single, axes_dim=axes_dim, theta=10000, patch_size=patch_size,
                   qkv_bias=blocks.qkv_bias, in_dim=in_dim, out_dim=out_dim, hidden_dim=approx_hidden,
                   n_layers=n_layers, nerf_hidden_size=nerf_hidden, nerf_mlp_ratio=ratio, nerf_depth=nerf_depth,
                   nerf_max_freqs=freqs, nerf_final_head_type=head, use_x0=prefix + X0_MARKER in tensors)

    def with_overrides(self, overrides: Mapping[str, Any]) -> "ChromaRadianceConfig":
        """This config with `transformer_options["chroma_radiance_options"]` applied (ComfyUI's
        `radiance_get_override_params`): every key a field, every value of the field's type
        (`nerf_embedder_dtype` may be None). Raises ValueError naming the bad keys."""
        if not overrides:
            return self
        fields = {f.name for f in dataclasses.fields(self)}
        unknown = [k for k in overrides if k not in fields]
        if unknown:
            raise ValueError(f"Unknown key(s) in transformer_options {OPTIONS_KEY}: {', '.join(unknown)}")
        wrong = [k for k, v in overrides.items()
                 if type(v) is not type(getattr(self, k)) and not (v is None and k in _NULLABLE)]
        if wrong:
            raise ValueError(f"Invalid value(s) in transformer_options {OPTIONS_KEY}: {', '.join(wrong)}")
        return dataclasses.replace(self, **overrides)


def is_chroma_radiance(tensors: Mapping[str, Any], prefix: str = "") -> bool:
    return prefix + NERF_MARKER in tensors and prefix + GUIDANCE_LAYER + "norms.0.scale" in tensors


# -- the NeRF head --------------------------------------------------------------------------------

def dct_positions(patch_size: int, max_freqs: int, device: Any = None, dtype: Any = None) -> torch.Tensor:
    """`[1, P*P, F*F]`: for the pixel at (row i, column j) of a patch, u = j / (P-1), v = i / (P-1),
    entry (fx * F + fy) = cos(pi fx u) cos(pi fy v) / (1 + fx fy)."""
    pos = torch.linspace(0, 1, patch_size, device=device, dtype=dtype)
    v, u = torch.meshgrid(pos, pos, indexing="ij")
    u, v = u.reshape(-1, 1, 1), v.reshape(-1, 1, 1)  # [P*P, 1, 1]
    freqs = torch.arange(max_freqs, device=device, dtype=dtype)
    fx, fy = freqs[None, :, None], freqs[None, None, :]  # [1, F, 1], [1, 1, F]
    basis = torch.cos(u * fx * torch.pi) * torch.cos(v * fy * torch.pi) / (1 + fx * fy)  # [P*P, F, F]
    return basis.reshape(1, patch_size * patch_size, max_freqs * max_freqs)


class NerfEmbedder(nn.Module):
    """Pixels `[N, P*P, C]` and their DCT positions -> `[N, P*P, h]` (`embedder.0` holds the Linear),
    computed in `compute_dtype` (None: the weights'; ComfyUI builds this layer in float32) and
    returned in the input's dtype."""

    def __init__(self, in_channels: int, hidden_size_input: int, max_freqs: int, dtype: Any = None, device: Any = None,
                 operations: Any = None, compute_dtype: Any = None) -> None:
        super().__init__()
        ops = operations_or_default(operations)
        self.max_freqs = max_freqs
        self.compute_dtype = compute_dtype
        self.embedder = nn.Sequential(ops.Linear(in_channels + max_freqs ** 2, hidden_size_input, dtype=dtype,
                                                 device=device))

    def forward(self, pixels: torch.Tensor) -> torch.Tensor:
        n, area, _ = pixels.shape
        linear = self.embedder[0]
        dtype = self.compute_dtype or linear.weight.dtype
        side = int(round(area ** 0.5))
        positions = dct_positions(side, self.max_freqs, pixels.device, dtype).expand(n, -1, -1)
        x = torch.cat([pixels.to(dtype), positions], dim=-1)  # [N, P*P, C + F*F]
        bias = linear.bias.to(dtype) if linear.bias is not None else None
        return F.linear(x, linear.weight.to(dtype), bias).to(pixels.dtype)


class NerfGLUBlock(nn.Module):
    """One NeRF block whose gated MLP weights are generated per patch from its hidden state."""

    def __init__(self, hidden_size_s: int, hidden_size_x: int, mlp_ratio: int, dtype: Any = None, device: Any = None,
                 operations: Any = None) -> None:
        super().__init__()
        ops = operations_or_default(operations)
        self.mlp_ratio = mlp_ratio
        self.param_generator = ops.Linear(hidden_size_s, 3 * hidden_size_x ** 2 * mlp_ratio, dtype=dtype, device=device)
        self.norm = RMSNorm(hidden_size_x, dtype=dtype, device=device, operations=ops)

    def forward(self, x: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
        """x `[N, P*P, h]`, s `[N, D]` -> `[N, P*P, h]`."""
        n, _, width = x.shape
        inner = width * self.mlp_ratio
        gate, value, out = self.param_generator(s).chunk(3, dim=-1)
        gate = F.normalize(gate.view(n, width, inner), dim=-2)
        value = F.normalize(value.view(n, width, inner), dim=-2)
        out = F.normalize(out.view(n, inner, width), dim=-2)
        normed = self.norm(x)
        return torch.bmm(F.silu(torch.bmm(normed, gate)) * torch.bmm(normed, value), out) + x


class NerfFinalLayer(nn.Module):
    """`[B, h, H, W]` -> RMS norm over h -> Linear to `[B, C, H, W]`."""

    def __init__(self, hidden_size: int, out_channels: int, dtype: Any = None, device: Any = None,
                 operations: Any = None) -> None:
        super().__init__()
        ops = operations_or_default(operations)
        self.norm = RMSNorm(hidden_size, dtype=dtype, device=device, operations=ops)
        self.linear = ops.Linear(hidden_size, out_channels, dtype=dtype, device=device)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear(self.norm(x.movedim(1, -1))).movedim(-1, 1)


class NerfFinalLayerConv(nn.Module):
    """`[B, h, H, W]` -> RMS norm over h -> 3x3 convolution to `[B, C, H, W]`."""

    def __init__(self, hidden_size: int, out_channels: int, dtype: Any = None, device: Any = None,
                 operations: Any = None) -> None:
        super().__init__()
        ops = operations_or_default(operations)
        self.norm = RMSNorm(hidden_size, dtype=dtype, device=device, operations=ops)
        self.conv = ops.Conv2d(hidden_size, out_channels, kernel_size=3, padding=1, dtype=dtype, device=device)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv(self.norm(x.movedim(1, -1)).movedim(-1, 1))


# -- the network ----------------------------------------------------------------------------------

class ChromaRadiance(Chroma):
    """Chroma's transformer on pixel patches plus the NeRF head (module docstring); constructor,
    state-dict names and forward arguments as ComfyUI's `ChromaRadiance`."""

    def __init__(self, image_model: Any = None, final_layer: bool = True, dtype: Any = None, device: Any = None,
                 operations: Any = None, **params: Any) -> None:
        nn.Module.__init__(self)
        ops = operations_or_default(operations)
        try:
            config = ChromaRadianceConfig(**params)
        except TypeError as error:
            raise ChromaConfigError(f"Chroma Radiance: {error}") from None
        factory = {"dtype": dtype, "device": device}
        self.dtype = dtype
        self.config = self.params = config
        self.patch_size = config.patch_size
        self.in_channels, self.out_channels = config.in_channels, config.out_channels
        self.hidden_size, self.num_heads = config.hidden_size, config.num_heads
        self.in_dim, self.out_dim = config.in_dim, config.out_dim
        self.hidden_dim, self.n_layers = config.hidden_dim, config.n_layers
        self.pe_embedder = EmbedND(dim=config.head_dim, theta=config.theta, axes_dim=config.axes_dim)
        self.img_in_patch = ops.Conv2d(config.in_channels, config.hidden_size, kernel_size=config.patch_size,
                                       stride=config.patch_size, bias=True, **factory)
        self.txt_in = ops.Linear(config.context_in_dim, config.hidden_size, **factory)
        self.distilled_guidance_layer = Approximator(in_dim=config.in_dim, hidden_dim=config.hidden_dim,
                                                     out_dim=config.out_dim, n_layers=config.n_layers,
                                                     operations=ops, **factory)
        self.double_blocks = nn.ModuleList(
            DoubleStreamBlock(config.hidden_size, config.num_heads, mlp_ratio=config.mlp_ratio,
                              qkv_bias=config.qkv_bias, operations=ops, **factory) for _ in range(config.depth))
        self.single_blocks = nn.ModuleList(
            SingleStreamBlock(config.hidden_size, config.num_heads, mlp_ratio=config.mlp_ratio, operations=ops,
                              **factory) for _ in range(config.depth_single_blocks))
        self.nerf_image_embedder = NerfEmbedder(config.in_channels, config.nerf_hidden_size, config.nerf_max_freqs,
                                                operations=ops, compute_dtype=config.nerf_embedder_dtype, **factory)
        self.nerf_blocks = nn.ModuleList(
            NerfGLUBlock(config.hidden_size, config.nerf_hidden_size, config.nerf_mlp_ratio, operations=ops,
                         **factory) for _ in range(config.nerf_depth))
        head = NerfFinalLayer if config.nerf_final_head_type == "linear" else NerfFinalLayerConv
        setattr(self, "nerf_final_layer" if config.nerf_final_head_type == "linear" else "nerf_final_layer_conv",
                head(config.nerf_hidden_size, config.in_channels, operations=ops, **factory))
        if config.use_x0:
            self.register_buffer(X0_MARKER, torch.empty(0, **factory))
        self.skip_mmdit: list[int] = []
        self.skip_dit: list[int] = []
        self.lite = False

    @classmethod
    def from_config(cls, config: ChromaRadianceConfig, **kwargs: Any) -> "ChromaRadiance":
        return cls(**kwargs, **config.params())

    def img_in(self, img: torch.Tensor) -> torch.Tensor:
        """Pixels `[B, C, H, W]` (multiples of the patch) -> patch tokens `[B, H/P * W/P, D]`."""
        return self.img_in_patch(img).flatten(2).transpose(1, 2)

    @property
    def nerf_head(self) -> nn.Module:
        return getattr(self, "nerf_final_layer" if self.config.nerf_final_head_type == "linear"
                       else "nerf_final_layer_conv")

    def forward_nerf(self, img: torch.Tensor, hidden: torch.Tensor, config: ChromaRadianceConfig) -> torch.Tensor:
        """Pixels `img` `[B, C, H, W]` and the transformer's patch states `[B, N, D]` -> `[B, C, H, W]`."""
        b, c, h, w = img.shape
        p, n = config.patch_size, hidden.shape[1]
        pixels = F.unfold(img, kernel_size=p, stride=p).transpose(1, 2)  # [B, N, C*P*P]
        pixels = pixels.reshape(b * n, c, p * p).transpose(1, 2)  # [B*N, P*P, C]
        states = hidden.reshape(b * n, config.hidden_size)  # [B*N, D]
        rows = b * n
        step = config.nerf_tile_size * b if config.nerf_tile_size > 0 and n > config.nerf_tile_size else rows
        tiles = []
        for start in range(0, rows, step):  # rows are independent: tiles only bound the memory
            x = self.nerf_image_embedder(pixels[start:start + step])
            for block in self.nerf_blocks:
                x = block(x, states[start:start + step])
            tiles.append(x)
        x = torch.cat(tiles, dim=0)  # [B*N, P*P, h]
        x = x.transpose(1, 2).reshape(b, n, -1).transpose(1, 2)  # [B, h*P*P, N]
        x = F.fold(x, output_size=(h, w), kernel_size=p, stride=p)  # [B, h, H, W]
        return self.nerf_head(x)

    def forward(self, x: torch.Tensor, timestep: torch.Tensor, context: torch.Tensor,
                guidance: torch.Tensor | None = None, control: Mapping[str, Any] | None = None,
                transformer_options: Mapping[str, Any] = {}, **kwargs: Any) -> torch.Tensor:
        """x `[B, C, H, W]` (pixels in -1..1), timestep (sigma) `[B]`, context `[B, Nt, context_in_dim]`,
        guidance `[B]` -> `[B, C, H, W]`."""
        bs, _, h, w = x.shape
        p = self.patch_size
        img = pad_to_patch_size(x, (p, p))
        if context.ndim != 3:
            raise ValueError("Chroma Radiance: txt tensors must have 3 dimensions")
        config = self.config.with_overrides((transformer_options or {}).get(OPTIONS_KEY, {}))
        h_len, w_len = img.shape[-2] // p, img.shape[-1] // p
        rows = torch.arange(h_len, device=x.device, dtype=x.dtype)[:, None].expand(h_len, w_len)
        cols = torch.arange(w_len, device=x.device, dtype=x.dtype)[None, :].expand(h_len, w_len)
        img_ids = torch.stack([torch.zeros_like(rows), rows, cols], dim=-1).reshape(1, -1, 3).expand(bs, -1, -1)
        txt_ids = torch.zeros((bs, context.shape[1], 3), device=x.device, dtype=x.dtype)
        hidden = self.forward_orig(img, img_ids, context, txt_ids, timestep, guidance, control, transformer_options,
                                   attn_mask=kwargs.get("attention_mask"))  # [B, N, D]
        out = self.forward_nerf(img, hidden, config)[:, :, :h, :w]
        if config.use_x0:  # the model predicts the clean image: give the flow velocity
            out = (img[:, :, :h, :w] - out) / timestep.reshape(-1, 1, 1, 1)
        return out


# -- the family -----------------------------------------------------------------------------------

def _detect(tensors: Mapping[str, Any], prefix: str) -> ChromaRadianceConfig:
    return ChromaRadianceConfig.detect_from_weights(tensors, prefix)


def _facts(config: ChromaRadianceConfig) -> dict[str, Any]:
    facts = dataclasses.asdict(config)
    facts["image_model"] = config.image_model
    facts["latent_channels"] = config.latent_channels
    return facts


def _build(config: ChromaRadianceConfig, operations: Any = None) -> ChromaRadiance:
    kwargs: dict[str, Any] = {} if operations is None else {"operations": operations}
    return ChromaRadiance.from_config(config, **kwargs)


def chroma_radiance_architecture() -> Architecture:
    return Architecture(name="chroma_radiance", markers=(NERF_MARKER,), detect=_detect, facts=_facts, build=_build,
                        errors=(ChromaConfigError,), context_width=lambda config: config.context_in_dim,
                        comfy_config=lambda config: config.comfy_unet_config(),
                        self_attention_hook="attn1_output_patch")


def definition() -> Family:
    return Family(
        name="chroma_radiance",
        display_name="Chroma Radiance",
        signature=Signature(required_prefixes=("model.diffusion_model." + GUIDANCE_LAYER,
                                               "model.diffusion_model.nerf_blocks."),
                            unet=(("image_model", "chroma_radiance"),)),
        latent_format=ChromaRadianceLatentFormat(),
        sampling=SamplingPolicy(prediction="flow", schedule="flux", shift=1.15, multiplier=1.0,
                                default_scheduler="simple"),
        geometry=Geometry(latent_channels=3, downscale=1),
        conditioning=ChromaConditions(),
        architecture=chroma_radiance_architecture(),
        text_encoders=TEXT_ENCODERS,
        inference_dtypes=("bf16", "fp16", "fp32"),
        supported_model=supported_models.ChromaRadiance,
        comfy_model_class="ChromaRadiance",
    )


__all__ = ["ChromaRadiance", "ChromaRadianceConfig", "ChromaRadianceLatentFormat", "NerfEmbedder", "NerfGLUBlock",
           "definition", "dct_positions", "is_chroma_radiance"]
