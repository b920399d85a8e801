"""Anima LLLite (kohya-ss' ControlNet-LLLite for Anima, ComfyUI's `comfy/ldm/anima/lllite.py` and
`AnimaLLLiteApply` in `comfy_extras/nodes_model_patch.py`; written here): a small conditioning
network turns a control image (RGB, or RGB + mask for inpainting) into one embedding per DiT token,
and small per-layer modules add a FiLM-conditioned correction to the inputs of the Cosmos-Predict2
blocks' self-attention q / k / v projections, cross-attention q projection and MLP.

File (ModelPatchLoader, marker `lllite_conditioning1.conv1.weight`; named-key v2, metadata
`lllite.version` "2"): `lllite_conditioning1.*` and modules `lllite_dit_blocks_<N>_<target>` with
target one of `self_attn_{q,k,v}_proj`, `cross_attn_q_proj`, `mlp_layer1`; metadata
`lllite.aspp_dilations` (default "1,2,4,8") and `lllite.inpaint_masked_input`.

Conditioning network (`c`: the control image in [-1, 1], `[B, C, 8h, 8w]` for an `h x w` latent):

    x = silu(GN(conv1(c)))        4x4 stride 4 to cond_dim / 2
    x = silu(GN(conv2(x)))        3x3
    x = silu(GN(conv3(x)))        4x4 stride 4 to cond_dim          -> one cell per 2x2 latent patch
    x = x + conv2(silu(GN(conv1(silu(GN(x))))))   per resblock (3x3, GN)
    ASPP (if present): [silu(GN(conv_d(x))) for each dilation d (1: 1x1, else 3x3 dilated)] +
        [bilinear-upsampled silu(GN(conv1x1(avgpool(x))))], concatenated, silu(GN(conv1x1))
    emb = LayerNorm(proj1x1(x) as tokens)                            [B, h/2 * w/2, cond_emb_dim]

GroupNorm with 8 groups, halved until they divide the channels. A module on the input `x` of its
layer (`strength` the node's):

    c = emb + depth_embed;  gamma, beta = cond_to_film(c).chunk(2)
    x + up(silu(mid(cat(c, silu(down(x)))) * (1 + gamma) + beta)) * strength

Applied through the DiT's existing hooks (comfy_core/families/anima/dit.py): a `post_input` patch
encodes the control image once per model call (resized bicubic with a centre crop to the latent's
pixel size, the mask nearest-exact and thresholded at 0.5; RGB zeroed under the mask when the file
says `inpaint_masked_input`) into `transformer_options["model_patch_data"]`, only when strength is
not 0 and sigma lies in `(sigma(end_percent), sigma(start_percent)]`; the `attn1_patch`,
`attn2_patch` and `mlp_patch` entries apply the modules of the running block where that data is.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Mapping

import torch
import torch.nn.functional as F
from torch import nn

from comfy_core.model_patches.errors import ModelPatchError

ANIMA_LLLITE_MARKER = "lllite_conditioning1.conv1.weight"
MODULE_PATTERN = re.compile(r"lllite_dit_blocks_(\d+)_(self_attn_[qkv]_proj|cross_attn_q_proj|mlp_layer1)")
COND = "lllite_conditioning1."
SELF_TARGETS = {"q": "self_attn_q_proj", "k": "self_attn_k_proj", "v": "self_attn_v_proj"}
CROSS_TARGETS = {"q": "cross_attn_q_proj"}
MLP_TARGET = "mlp_layer1"


@dataclass(frozen=True)
class AnimaLLLiteConfig:
    cond_in_channels: int
    cond_dim: int
    cond_emb_dim: int
    resblocks: int
    aspp_dilations: tuple[int, ...]
    inpaint_masked_input: bool
    modules: tuple[tuple[str, int, int], ...]  # (name, in_dim, mlp_dim)
    model_dim: int
    block_count: int

    @classmethod
    def detect(cls, tensors: Mapping[str, Any], metadata: Mapping[str, str] | None) -> "AnimaLLLiteConfig":
        metadata = metadata or {}
        version = metadata.get("lllite.version", "2")
        if version != "2":
            raise ModelPatchError(f"Anima LLLite: version {version!r} is not supported (only named-key v2 files)")

        def shape(key: str) -> tuple[int, ...]:
            try:
                return tuple(tensors[key].shape)
            except KeyError:
                raise ModelPatchError(f"Anima LLLite: key {key!r} is missing") from None

        names = sorted({k.split(".", 1)[0] for k in tensors if k.startswith("lllite_dit_blocks_")})
        if not names:
            raise ModelPatchError("Anima LLLite: the file has no lllite_dit_blocks_* modules")
        cond_in = shape(COND + "conv1.weight")[1]
        cond_dim = shape(COND + "conv3.weight")[0]
        cond_emb = shape(COND + "proj.weight")[0]
        res_ids = {int(k.split(".")[2]) for k in tensors if k.startswith(COND + "resblocks.")}
        aspp = any(k.startswith(COND + "aspp.") for k in tensors)
        dilations = tuple(int(v) for v in metadata.get("lllite.aspp_dilations", "1,2,4,8").split(",") if v.strip()) \
            if aspp else ()
        modules, model_dim, blocks = [], None, 0
        for name in names:
            match = MODULE_PATTERN.fullmatch(name)
            if match is None:
                raise ModelPatchError(f"Anima LLLite: unsupported module name {name!r}")
            mlp_dim, in_dim = shape(f"{name}.down.weight")
            if shape(f"{name}.cond_to_film.weight")[1] != cond_emb:
                raise ModelPatchError(f"Anima LLLite: {name} reads {shape(f'{name}.cond_to_film.weight')[1]}-wide "
                                      f"conditioning, the network gives {cond_emb}")
            if model_dim is not None and in_dim != model_dim:
                raise ModelPatchError(f"Anima LLLite: {name} is {in_dim} wide, the others {model_dim}")
            model_dim = in_dim
            modules.append((name, in_dim, mlp_dim))
            blocks = max(blocks, int(match.group(1)) + 1)
        return cls(cond_in_channels=cond_in, cond_dim=cond_dim, cond_emb_dim=cond_emb,
                   resblocks=max(res_ids) + 1 if res_ids else 0, aspp_dilations=dilations,
                   inpaint_masked_input=metadata.get("lllite.inpaint_masked_input", "false").lower() == "true",
                   modules=tuple(modules), model_dim=int(model_dim), block_count=blocks)


def group_norm(channels: int) -> nn.GroupNorm:
    """8 groups, halved until they divide `channels`."""
    groups = 8
    while groups > 1 and channels % groups:
        groups //= 2
    return nn.GroupNorm(groups, channels)


class ResBlock(nn.Module):
    def __init__(self, channels: int) -> None:
        super().__init__()
        self.norm1, self.conv1 = group_norm(channels), nn.Conv2d(channels, channels, 3, padding=1)
        self.norm2, self.conv2 = group_norm(channels), nn.Conv2d(channels, channels, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.conv2(F.silu(self.norm2(self.conv1(F.silu(self.norm1(x))))))


class ASPP(nn.Module):
    """Atrous spatial pyramid pooling (Chen et al. 2017, "Rethinking Atrous Convolution")."""

    def __init__(self, channels: int, dilations: tuple[int, ...]) -> None:
        super().__init__()
        self.branches = nn.ModuleList(
            nn.Sequential(nn.Conv2d(channels, channels, 1) if d == 1 else nn.Conv2d(channels, channels, 3, padding=d,
                                                                                    dilation=d),
                          group_norm(channels), nn.SiLU()) for d in dilations)
        self.global_pool = nn.AdaptiveAvgPool2d(1)
        self.global_conv = nn.Sequential(nn.Conv2d(channels, channels, 1), group_norm(channels), nn.SiLU())
        self.proj = nn.Sequential(nn.Conv2d(channels * (len(dilations) + 1), channels, 1), group_norm(channels),
                                  nn.SiLU())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        outs = [branch(x) for branch in self.branches]
        pooled = self.global_conv(self.global_pool(x))
        outs.append(F.interpolate(pooled, size=x.shape[-2:], mode="bilinear", align_corners=False))
        return self.proj(torch.cat(outs, dim=1))


class Conditioning(nn.Module):
    def __init__(self, config: AnimaLLLiteConfig) -> None:
        super().__init__()
        half = config.cond_dim // 2
        self.conv1, self.norm1 = nn.Conv2d(config.cond_in_channels, half, 4, stride=4), group_norm(half)
        self.conv2, self.norm2 = nn.Conv2d(half, half, 3, padding=1), group_norm(half)
        self.conv3, self.norm3 = nn.Conv2d(half, config.cond_dim, 4, stride=4), group_norm(config.cond_dim)
        self.resblocks = nn.ModuleList(ResBlock(config.cond_dim) for _ in range(config.resblocks))
        self.aspp = ASPP(config.cond_dim, config.aspp_dilations) if config.aspp_dilations else None
        self.proj = nn.Conv2d(config.cond_dim, config.cond_emb_dim, 1)
        self.out_norm = nn.LayerNorm(config.cond_emb_dim)

    def forward(self, image: torch.Tensor) -> torch.Tensor:
        """image `[B, C, 16a, 16b]` -> `[B, a*b, cond_emb_dim]`."""
        x = F.silu(self.norm1(self.conv1(image)))
        x = F.silu(self.norm2(self.conv2(x)))
        x = F.silu(self.norm3(self.conv3(x)))
        for block in self.resblocks:
            x = block(x)
        if self.aspp is not None:
            x = self.aspp(x)
        return self.out_norm(self.proj(x).flatten(2).transpose(1, 2))


class LLLiteModule(nn.Module):
    def __init__(self, in_dim: int, cond_emb_dim: int, mlp_dim: int) -> None:
        super().__init__()
        self.down = nn.Linear(in_dim, mlp_dim)
        self.mid = nn.Linear(mlp_dim + cond_emb_dim, mlp_dim)
        self.cond_to_film = nn.Linear(cond_emb_dim, 2 * mlp_dim)
        self.up = nn.Linear(mlp_dim, in_dim)
        self.depth_embed = nn.Parameter(torch.empty(cond_emb_dim), requires_grad=False)

    def forward(self, x: torch.Tensor, emb: torch.Tensor, strength: float) -> torch.Tensor:
        """x `[B, S, D]` or `[B, T, H, W, D]`, emb `[B', S, E]` (B a multiple of B')."""
        shape = x.shape
        flat = x.flatten(1, 3) if x.ndim == 5 else x
        if flat.shape[0] != emb.shape[0]:
            if flat.shape[0] % emb.shape[0]:
                raise ModelPatchError(f"Anima LLLite: a batch of {flat.shape[0]} for {emb.shape[0]} control images")
            emb = emb.repeat(flat.shape[0] // emb.shape[0], 1, 1)
        if flat.shape[1] != emb.shape[1]:
            raise ModelPatchError(f"Anima LLLite: {flat.shape[1]} model tokens, {emb.shape[1]} control tokens")
        cond = emb.to(flat.dtype) + self.depth_embed.to(device=flat.device, dtype=flat.dtype)
        gamma, beta = self.cond_to_film(cond).chunk(2, dim=-1)
        hidden = self.mid(torch.cat([cond, F.silu(self.down(flat))], dim=-1))
        out = flat + self.up(F.silu(hidden * (1 + gamma) + beta)) * strength
        return out.reshape(shape)


class AnimaLLLite(nn.Module):
    """The LLLite network (see the module docstring): `lllite_conditioning1` and one module per name."""

    def __init__(self, config: AnimaLLLiteConfig) -> None:
        super().__init__()
        self.config = config
        self.cond_in_channels = config.cond_in_channels
        self.inpaint_masked_input = config.inpaint_masked_input
        self.lllite_conditioning1 = Conditioning(config)
        self.module_names = set()
        for name, in_dim, mlp_dim in config.modules:
            self.add_module(name, LLLiteModule(in_dim, config.cond_emb_dim, mlp_dim))
            self.module_names.add(name)

    def encode_conditioning(self, image: torch.Tensor) -> torch.Tensor:
        return self.lllite_conditioning1(image)

    def apply(self, x: torch.Tensor, emb: torch.Tensor, block_index: int, target: str, strength: float) -> torch.Tensor:
        name = f"lllite_dit_blocks_{block_index}_{target}"
        if name not in self.module_names:
            return x
        return self.get_submodule(name)(x, emb, strength)


def load_anima_lllite(checkpoint: Any) -> AnimaLLLite:
    """A `CheckpointFile` of an Anima LLLite patch -> the network in the file's dtype, its layers
    casting their weights to their input's dtype as they run (ComfyUI's `manual_cast`)."""
    from comfy_core.checkpoint.materialize import build_on_meta
    from comfy_core.models.storage_cast import cast_weights_at_run_time

    config = AnimaLLLiteConfig.detect(checkpoint.tensors, getattr(checkpoint, "metadata", None))
    module = build_on_meta(lambda: AnimaLLLite(config))
    state = {name: checkpoint.read(name) for name in checkpoint.tensors}
    try:
        module.load_state_dict(state, strict=True, assign=True)
    except RuntimeError as exc:
        raise ModelPatchError(f"Anima LLLite: {exc}") from None
    cast_weights_at_run_time(module)
    return module


# --- the patch on a MODEL ---------------------------------------------------------------------------------------

class AnimaLLLitePatch:
    """The `post_input` patch (ComfyUI's `AnimaLLLitePatch`): encodes the control image for this
    model call into `transformer_options["model_patch_data"][self]` when active.

    `image` `[B, H, W, 3]` in 0..1; `mask` `[B, H, W]` (1 = regenerate) for 4-channel patches."""

    def __init__(self, model_patch: Any, image: torch.Tensor, mask: torch.Tensor | None, strength: float,
                 sigma_start: float, sigma_end: float) -> None:
        self.model_patch = model_patch
        self.image = image
        self.mask = mask
        self.strength = float(strength)
        self.sigma_start = float(sigma_start)
        self.sigma_end = float(sigma_end)

    def __deepcopy__(self, memo: dict) -> "AnimaLLLitePatch":
        return self  # a clone of the MODEL shares it (deep-copying would copy the network)

    @property
    def network(self) -> AnimaLLLite:
        return self.model_patch.model

    def active(self, transformer_options: Mapping[str, Any]) -> bool:
        if self.strength == 0.0:
            return False
        sigmas = transformer_options.get("sigmas")
        if sigmas is None:
            return True
        sigma = float(torch.as_tensor(sigmas).max())
        return self.sigma_end < sigma <= self.sigma_start

    def control_input(self, latent: torch.Tensor) -> torch.Tensor:
        """The network's input for a latent `[B, C, 1, h, w]`: `[B', C', 8h, 8w]` in [-1, 1]."""
        from comfy_core.image.resize import upscale_samples

        if latent.shape[2] != 1:
            raise ModelPatchError(f"Anima LLLite: only single-frame latents (T=1), got T={latent.shape[2]}")
        height, width = latent.shape[-2] * 8, latent.shape[-1] * 8
        image = upscale_samples(self.image.movedim(-1, 1).float(), width, height, "bicubic", "center").clamp(0.0, 1.0)
        image = image.to(device=latent.device, dtype=latent.dtype) * 2.0 - 1.0
        if self.network.cond_in_channels == 4:
            mask = self.mask
            if mask.ndim == 3:
                mask = mask.unsqueeze(1)
            if mask.ndim != 4 or mask.shape[1] != 1:
                raise ModelPatchError(f"Anima LLLite: the mask must have one channel, got {tuple(mask.shape)}")
            mask = upscale_samples(mask.float(), width, height, "nearest-exact", "center")
            if mask.shape[0] != image.shape[0]:
                if image.shape[0] % mask.shape[0]:
                    raise ModelPatchError(f"Anima LLLite: {mask.shape[0]} masks for {image.shape[0]} images")
                mask = mask.repeat(image.shape[0] // mask.shape[0], 1, 1, 1)
            mask = (mask >= 0.5).to(device=latent.device, dtype=latent.dtype)
            if self.network.inpaint_masked_input:
                image = image * (mask < 0.5).to(image.dtype)
            image = torch.cat([image, mask * 2.0 - 1.0], dim=1)
        return image

    def __call__(self, args: dict[str, Any]) -> dict[str, Any]:
        options = args["transformer_options"]
        if not self.active(options):
            return args
        x = args["x"]
        control = self.control_input(x)
        with torch.no_grad(), self.model_patch.applied(x.device) as network:
            options["model_patch_data"][self] = network.encode_conditioning(control)
        return args

    def apply(self, x: torch.Tensor, emb: torch.Tensor, block_index: int, target: str) -> torch.Tensor:
        with torch.no_grad(), self.model_patch.applied(x.device) as network:
            return network.apply(x, emb, block_index, target, self.strength)

    def to(self, device_or_dtype: Any) -> "AnimaLLLitePatch":
        return self

    def models(self) -> list[Any]:
        return [self.model_patch]


class AnimaLLLiteAttentionPatch:
    """`attn1_patch` / `attn2_patch` entry: the modules of `targets` ({"q": name, ...}) on the
    inputs of those projections of the running block."""

    def __init__(self, patch: AnimaLLLitePatch, targets: Mapping[str, str]) -> None:
        self.patch = patch
        self.targets = dict(targets)

    def __deepcopy__(self, memo: dict) -> "AnimaLLLiteAttentionPatch":
        return self

    def __call__(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, pe: Any = None, attn_mask: Any = None,
                 extra_options: Mapping[str, Any] | None = None) -> dict[str, Any]:
        options = extra_options or {}
        emb = (options.get("model_patch_data") or {}).get(self.patch)
        values = {"q": q, "k": k, "v": v}
        if emb is not None:
            for name, target in self.targets.items():
                values[name] = self.patch.apply(values[name], emb, options["block_index"], target)
        return {**values, "pe": pe, "attn_mask": attn_mask}


class AnimaLLLiteMLPPatch:
    """`mlp_patch` entry: the `mlp_layer1` module of the running block on the MLP's input."""

    def __init__(self, patch: AnimaLLLitePatch) -> None:
        self.patch = patch

    def __deepcopy__(self, memo: dict) -> "AnimaLLLiteMLPPatch":
        return self

    def __call__(self, args: dict[str, Any]) -> dict[str, Any]:
        options = args["transformer_options"]
        emb = (options.get("model_patch_data") or {}).get(self.patch)
        if emb is None:
            return args
        return {**args, "x": self.patch.apply(args["x"], emb, options["block_index"], MLP_TARGET)}


def apply_anima_lllite(model: Any, model_patch: Any, image: torch.Tensor, mask: torch.Tensor | None, strength: float,
                       start_percent: float, end_percent: float) -> Any:
    """ComfyUI's `AnimaLLLiteApply.apply_patch`: a clone of `model` (a ModelPatcher) with the four
    patch entries. The image's first three channels; a 4-channel patch without a mask gets an
    all-zero one (nothing to regenerate), a 3-channel patch ignores the mask."""
    image = image[..., :3]
    network = model_patch.model
    if network.cond_in_channels == 4 and mask is None:
        mask = torch.zeros_like(image[..., 0])
    elif network.cond_in_channels != 4:
        mask = None
    sampling = model.get_model_object("model_sampling")
    patch = AnimaLLLitePatch(model_patch, image, mask, strength, float(sampling.percent_to_sigma(start_percent)),
                             float(sampling.percent_to_sigma(end_percent)))
    patched = model.clone()
    patched.add_block_patch("post_input", patch)
    patched.add_block_patch("attn1_patch", AnimaLLLiteAttentionPatch(patch, SELF_TARGETS))
    patched.add_block_patch("attn2_patch", AnimaLLLiteAttentionPatch(patch, CROSS_TARGETS))
    patched.add_block_patch("mlp_patch", AnimaLLLiteMLPPatch(patch))
    return patched


__all__ = ["ANIMA_LLLITE_MARKER", "AnimaLLLite", "AnimaLLLiteAttentionPatch", "AnimaLLLiteConfig", "AnimaLLLiteMLPPatch",
           "AnimaLLLitePatch", "apply_anima_lllite", "load_anima_lllite"]
