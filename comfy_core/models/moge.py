"""MoGe v1 and v2 networks (Wang et al. 2025, "MoGe: Unlocking Accurate Monocular Geometry Estimation
for Open-Domain Images with Optimal Training Supervision"; "MoGe-2: Accurate Monocular Geometry with
Metric Scale and Sharp Details"), in the key layout ComfyUI's `comfy/ldm/moge/model.py` and
`modules.py` load (Comfy-Org/MoGe's `geometry_estimation/moge_*_vitl*.safetensors`); written here
from those files' behaviour and the papers.

- v1 (`backbone.*` + `head.*`): DINOv2 on the image resized (bicubic, antialiased) to about
  `num_tokens` patches and normalised; the last 4 blocks' normed tokens each through a 1x1
  projection to 512 channels and summed; upsample blocks (2x transposed conv + 3x3 conv, then
  residual blocks), each fed the feature map with the view-plane UV grid appended; the map resized
  to the resized image, UV appended once more, and two output convs (points 3, mask 1).
- v2 (`encoder.backbone.*`, `encoder.output_projections.*`, `neck.*`, `points_head.*`,
  `mask_head.*`, `scale_head.*`, optional `normal_head.*`): the image resized (bilinear,
  antialiased) to a `rows x cols` token grid of about `num_tokens`; blocks `(depth // 4) * (i + 1) - 1`
  projected and summed; a 5-level pyramid (level 0 the features + UV, levels 1..4 UV only at 2^L
  resolution) through the neck conv stack and each head's conv stack; the mask through a sigmoid,
  the normals normalised, the metric scale `exp(MLP(class token))`.
- Both remap the raw points `(x, y, z) -> (x e^z, y e^z, e^z)`.

Every width, depth and stage count is read from the weights (`MoGeConfig.detect_from_weights`). The
Meta-style DINOv2 names MoGe's own releases use (`blocks.N.attn.qkv`, `ls1.gamma`, ...) are
converted (`convert_keys`). MoGe-3 is MoGe-2's network (a ViT-g DINOv2 with SwiGLU, or ViT-L) plus
`refiner.*`, a sparse 3-D UNet that refines the raw points' log depth (`models/moge_refiner.py`).
`infer` (camera recovery, masks, metric scale) is in `models/moge_infer.py`.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import torch
import torch.nn.functional as F
from torch import nn

from comfy_core.models.dinov2 import PATCH, Dinov2Config, Dinov2Model
from comfy_core.models.resident import load_exact
from comfy_core.models.moge_geometry import normalized_view_plane_uv
from comfy_core.models.moge_refiner import RefinerConfig, Sparse3DUNet

IMAGE_MEAN = (0.485, 0.456, 0.406)
IMAGE_STD = (0.229, 0.224, 0.225)
INTERMEDIATE_LAYERS = 4
V1_PROJECTION = 512
V1_LAST_CONV = 32
REFINER_DEPTH_RESOLUTION = 256  # MoGe-3 bins log depth at 1/256


class MoGeWeightsError(ValueError):
    """A file that is not a MoGe model this engine builds (names what is wrong)."""


# -- blocks ----------------------------------------------------------------------------------------

def _conv(c_in: int, c_out: int, k: int = 3) -> nn.Conv2d:
    """MoGe's convolutions pad by replicating the border."""
    return nn.Conv2d(c_in, c_out, kernel_size=k, padding=k // 2, padding_mode="replicate")


def uv_grid(batch: int, height: int, width: int, aspect_ratio: float, dtype: torch.dtype,
            device: torch.device) -> torch.Tensor:
    """[B, 2, H, W]: the view-plane UV grid (`moge_geometry.normalized_view_plane_uv`)."""
    uv = normalized_view_plane_uv(width, height, aspect_ratio=aspect_ratio, dtype=dtype, device=device)
    return uv.permute(2, 0, 1)[None].expand(batch, -1, -1, -1)


def _with_uv(x: torch.Tensor, aspect_ratio: float) -> torch.Tensor:
    return torch.cat([x, uv_grid(x.shape[0], x.shape[-2], x.shape[-1], aspect_ratio, x.dtype, x.device)], dim=1)


class ResidualConvBlock(nn.Module):
    """`x + conv(relu(norm2(conv(relu(norm1(x))))))`; norm1 a one-group GroupNorm ("layer norm"),
    norm2 a GroupNorm of `hidden // 32` groups, either absent in stacks built without norms."""

    def __init__(self, channels: int, hidden: int, norms: bool = True) -> None:
        super().__init__()
        self.layers = nn.Sequential(
            nn.GroupNorm(1, channels) if norms else nn.Identity(), nn.ReLU(), _conv(channels, hidden),
            nn.GroupNorm(max(hidden // 32, 1), hidden) if norms else nn.Identity(), nn.ReLU(), _conv(hidden, channels))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.layers(x) + x


class _Resampler(nn.Sequential):
    """2x upsampling: a 2x2 transposed conv (or bilinear) then a 3x3 conv."""

    def __init__(self, c_in: int, c_out: int, transposed: bool) -> None:
        if transposed:
            super().__init__(nn.ConvTranspose2d(c_in, c_out, kernel_size=2, stride=2), _conv(c_out, c_out))
        else:
            super().__init__(nn.Upsample(scale_factor=2, mode="bilinear", align_corners=False), _conv(c_in, c_out))


class MLP(nn.Sequential):
    def __init__(self, dims: Sequence[int]) -> None:
        layers: list[nn.Module] = []
        for d_in, d_out in zip(dims[:-2], dims[1:-1]):
            layers += [nn.Linear(d_in, d_out), nn.ReLU()]
        layers.append(nn.Linear(dims[-2], dims[-1]))
        super().__init__(*layers)


@dataclass(frozen=True)
class ConvStackConfig:
    dim_in: tuple[int, ...]
    dim_res: tuple[int, ...]
    dim_out: tuple[int | None, ...]
    num_res_blocks: tuple[int, ...]
    transposed: tuple[bool, ...]  # per resampler (one fewer than levels)
    norms: bool = True
    hidden_factor: int = 1

    @classmethod
    def detect_from_weights(cls, tensors: Mapping[str, Any], prefix: str) -> "ConvStackConfig":
        stem = f"{prefix}input_blocks."
        levels = 1 + max(int(k[len(stem):].split(".", 1)[0]) for k in tensors if k.startswith(stem))
        shapes = [tuple(tensors[f"{stem}{i}.weight"].shape) for i in range(levels)]

        def res_count(i: int) -> int:
            rb = f"{prefix}res_blocks.{i}."
            return len({k[len(rb):].split(".", 1)[0] for k in tensors if k.startswith(rb)})

        out = tuple(int(tensors[f"{prefix}output_blocks.{i}.weight"].shape[0])
                    if f"{prefix}output_blocks.{i}.weight" in tensors else None for i in range(levels))
        return cls(dim_in=tuple(int(s[1]) for s in shapes), dim_res=tuple(int(s[0]) for s in shapes), dim_out=out,
                   num_res_blocks=tuple(res_count(i) for i in range(levels)),
                   transposed=tuple(f"{prefix}resamplers.{i}.0.weight" in tensors for i in range(levels - 1)),
                   norms=f"{prefix}res_blocks.0.0.layers.0.weight" in tensors)


class ConvStack(nn.Module):
    """Levels coarse to fine: `x = res_blocks(x + in_conv(features[i]))`, an output conv per level,
    a 2x resampler between levels."""

    def __init__(self, config: ConvStackConfig) -> None:
        super().__init__()
        c = config
        self.input_blocks = nn.ModuleList([_conv(d_in, d_res, 1) for d_in, d_res in zip(c.dim_in, c.dim_res)])
        self.resamplers = nn.ModuleList([_Resampler(a, b, t) for a, b, t in zip(c.dim_res[:-1], c.dim_res[1:],
                                                                                c.transposed)])
        self.res_blocks = nn.ModuleList([
            nn.Sequential(*[ResidualConvBlock(d, c.hidden_factor * d, c.norms) for _ in range(n)])
            for d, n in zip(c.dim_res, c.num_res_blocks)])
        self.output_blocks = nn.ModuleList([_conv(d, o, 1) if o is not None else nn.Identity()
                                            for d, o in zip(c.dim_res, c.dim_out)])

    def forward(self, features: Sequence[torch.Tensor | None]) -> list[torch.Tensor]:
        outputs: list[torch.Tensor] = []
        x: torch.Tensor | None = None
        for i, blocks in enumerate(self.res_blocks):
            feature = features[i]
            if feature is not None:
                feature = self.input_blocks[i](feature)
                x = feature if x is None else x + feature
            x = blocks(x)
            outputs.append(self.output_blocks[i](x))
            if i < len(self.res_blocks) - 1:
                x = self.resamplers[i](x)
        return outputs


def _normalise(image: torch.Tensor, mean: torch.Tensor, std: torch.Tensor) -> torch.Tensor:
    return (image - mean.to(image.dtype)) / std.to(image.dtype)


def _sum_projections(projections: nn.ModuleList, features: Sequence[tuple[torch.Tensor, torch.Tensor]],
                     rows: int, cols: int) -> torch.Tensor:
    """Each layer's patch tokens [B, N, D] as a [B, D, rows, cols] map through its 1x1 conv, summed."""
    maps = [proj(tokens.permute(0, 2, 1).unflatten(2, (rows, cols)).contiguous())
            for proj, (tokens, _cls) in zip(projections, features)]
    return torch.stack(maps, dim=1).sum(dim=1)


def remap_points(points: torch.Tensor) -> torch.Tensor:
    """[..., 3]: `(x, y, z) -> (x e^z, y e^z, e^z)` (MoGe's "exp" remap)."""
    xy, z = points.split([2, 1], dim=-1)
    z = torch.exp(z)
    return torch.cat([xy * z, z], dim=-1)


# -- v1 --------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class MoGeV1Config:
    backbone: Dinov2Config
    dim_upsample: tuple[int, ...] = (256, 128, 128)
    num_res_blocks: int = 1
    hidden_factor: int = 1
    version: str = "v1"
    num_tokens_range: tuple[int, int] = (1200, 2500)


class HeadV1(nn.Module):
    def __init__(self, config: MoGeV1Config) -> None:
        super().__init__()
        dims = config.dim_upsample
        self.projects = nn.ModuleList([_conv(config.backbone.hidden_size, V1_PROJECTION, 1)
                                       for _ in range(INTERMEDIATE_LAYERS)])
        ins = (V1_PROJECTION,) + tuple(dims[:-1])
        self.upsample_blocks = nn.ModuleList([
            nn.Sequential(nn.Sequential(nn.ConvTranspose2d(c_in + 2, c_out, kernel_size=2, stride=2),
                                        _conv(c_out, c_out)),
                          *[ResidualConvBlock(c_out, config.hidden_factor * c_out)
                            for _ in range(config.num_res_blocks)])
            for c_in, c_out in zip(ins, dims)])
        self.output_block = nn.ModuleList([
            nn.Sequential(_conv(dims[-1] + 2, V1_LAST_CONV), nn.ReLU(), _conv(V1_LAST_CONV, d_out, 1))
            for d_out in (3, 1)])

    def forward(self, features: Sequence[tuple[torch.Tensor, torch.Tensor]], image: torch.Tensor) -> list[torch.Tensor]:
        height, width = image.shape[-2:]
        aspect = width / height
        x = _sum_projections(self.projects, features, height // PATCH, width // PATCH)
        for block in self.upsample_blocks:
            x = block(_with_uv(x, aspect))
        x = F.interpolate(x, (height, width), mode="bilinear", align_corners=False)
        x = _with_uv(x, aspect)
        return [block(x) for block in self.output_block]


class MoGeV1(nn.Module):
    def __init__(self, config: MoGeV1Config) -> None:
        super().__init__()
        self.config = config
        self.backbone = Dinov2Model(config.backbone)
        self.head = HeadV1(config)
        self.register_buffer("image_mean", torch.tensor(IMAGE_MEAN).view(1, 3, 1, 1))
        self.register_buffer("image_std", torch.tensor(IMAGE_STD).view(1, 3, 1, 1))

    def forward(self, image: torch.Tensor, num_tokens: int) -> dict[str, torch.Tensor]:
        """image [B, 3, H, W] in 0..1 -> points [B, H, W, 3], mask logits-free scores [B, H, W]."""
        height, width = image.shape[-2:]
        resize = ((num_tokens * PATCH ** 2) / (height * width)) ** 0.5
        rh, rw = int(height * resize), int(width * resize)
        x = F.interpolate(image, (rh, rw), mode="bicubic", align_corners=False, antialias=True)
        x = _normalise(x, self.image_mean, self.image_std)
        x14 = F.interpolate(x, (rh // PATCH * PATCH, rw // PATCH * PATCH), mode="bilinear", align_corners=False,
                            antialias=True)
        depth = len(self.backbone.encoder.layer)
        features = self.backbone.intermediate_layers(x14, list(range(depth - INTERMEDIATE_LAYERS, depth)))
        points, mask = self.head(features, x)
        points = F.interpolate(points.float(), (height, width), mode="bilinear", align_corners=False)
        points = remap_points(points.permute(0, 2, 3, 1))
        # ComfyUI thresholds v1's mask output as it comes (no sigmoid), at 0.5.
        mask = F.interpolate(mask.float(), (height, width), mode="bilinear", align_corners=False).squeeze(1)
        return {"points": points, "mask": mask}


# -- v2 --------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class MoGeV2Config:
    backbone: Dinov2Config
    intermediate_layers: tuple[int, ...]
    dim_proj: int
    neck: ConvStackConfig
    points_head: ConvStackConfig
    mask_head: ConvStackConfig
    scale_dims: tuple[int, ...]
    normal_head: ConvStackConfig | None = None
    refiner: RefinerConfig | None = None  # MoGe-3
    version: str = "v2"
    num_tokens_range: tuple[int, int] = (1200, 3600)


class DINOv2Encoder(nn.Module):
    def __init__(self, config: MoGeV2Config) -> None:
        super().__init__()
        self.layers = list(config.intermediate_layers)
        self.backbone = Dinov2Model(config.backbone)
        self.output_projections = nn.ModuleList([_conv(config.backbone.hidden_size, config.dim_proj, 1)
                                                 for _ in self.layers])
        self.register_buffer("image_mean", torch.tensor(IMAGE_MEAN).view(1, 3, 1, 1))
        self.register_buffer("image_std", torch.tensor(IMAGE_STD).view(1, 3, 1, 1))

    def forward(self, image: torch.Tensor, rows: int, cols: int) -> tuple[torch.Tensor, torch.Tensor]:
        """(features [B, dim_proj, rows, cols], class token [B, D] of the last chosen block)."""
        x = F.interpolate(image, (rows * PATCH, cols * PATCH), mode="bilinear", align_corners=False, antialias=True)
        x = _normalise(x, self.image_mean, self.image_std)
        features = self.backbone.intermediate_layers(x, self.layers)
        return _sum_projections(self.output_projections, features, rows, cols), features[-1][1]


class MoGeV2(nn.Module):
    """MoGe-2, and MoGe-3 when the config has a refiner (the same network plus `refiner`)."""

    def __init__(self, config: MoGeV2Config) -> None:
        super().__init__()
        self.config = config
        self.encoder = DINOv2Encoder(config)
        self.neck = ConvStack(config.neck)
        self.points_head = ConvStack(config.points_head)
        self.mask_head = ConvStack(config.mask_head)
        self.scale_head = MLP(config.scale_dims)
        if config.normal_head is not None:
            self.normal_head = ConvStack(config.normal_head)
        if config.refiner is not None:
            self.refiner = Sparse3DUNet(config.refiner)

    def refine_log_depth(self, coord: torch.Tensor, conditioning: torch.Tensor) -> torch.Tensor:
        """MoGe-3: one refiner pass over raw points [B, H, W, 3] (x', y', log z) -> the new log z
        [B, H, W]. Voxels: (batch, row, col, round(256 log z) - its per-image minimum), computed in
        float32 (1/256 steps are finer than float16 resolves)."""
        batch, height, width, _ = coord.shape
        log_z = coord[..., 2]
        bins = torch.round(log_z.float() * REFINER_DEPTH_RESOLUTION).long()
        bins = bins - bins.amin(dim=(1, 2), keepdim=True)
        grid_b, grid_r, grid_c = torch.meshgrid(*(torch.arange(n, device=coord.device) for n in (batch, height, width)),
                                                indexing="ij")
        coords = torch.stack([grid_b, grid_r, grid_c, bins], dim=-1).reshape(-1, 4).to(torch.int32)
        residual = self.refiner(coord.reshape(-1, 3), coords, (height, width, int(bins.amax()) + 1), conditioning)
        return log_z + residual.reshape(batch, height, width)

    def forward(self, image: torch.Tensor, num_tokens: int, refine_steps: int = 3) -> dict[str, torch.Tensor]:
        """image [B, 3, H, W] in 0..1 -> points [B, H, W, 3], mask [B, H, W] in 0..1, metric_scale
        [B], normal [B, H, W, 3] (with a normal head). MoGe-3 refines the raw points' log depth
        `refine_steps` times before the heads' outputs are resized."""
        batch, _, height, width = image.shape
        aspect = width / height
        rows = round((num_tokens / aspect) ** 0.5)
        cols = round((num_tokens * aspect) ** 0.5)
        features, cls_token = self.encoder(image, rows, cols)
        levels = [uv_grid(batch, rows * 2 ** i, cols * 2 ** i, aspect, image.dtype, image.device) for i in range(5)]
        levels[0] = torch.cat([features, levels[0]], dim=1)
        neck = self.neck(levels)
        raw = self.points_head(neck)[-1]
        if hasattr(self, "refiner"):
            coord = raw.permute(0, 2, 3, 1).float()
            for _ in range(refine_steps):
                coord = torch.cat([coord[..., :2], self.refine_log_depth(coord, levels[0])[..., None]], dim=-1)
            raw = coord.permute(0, 3, 1, 2)

        def resize(x: torch.Tensor) -> torch.Tensor:
            return F.interpolate(x, (height, width), mode="bilinear", align_corners=False)

        result = {
            "points": remap_points(resize(raw).permute(0, 2, 3, 1)),
            "mask": resize(self.mask_head(neck)[-1]).squeeze(1).sigmoid(),
            "metric_scale": self.scale_head(cls_token).squeeze(1).exp(),
        }
        if hasattr(self, "normal_head"):
            result["normal"] = F.normalize(resize(self.normal_head(neck)[-1]).permute(0, 2, 3, 1), dim=-1)
        return result


# -- weights ---------------------------------------------------------------------------------------

_DINO_TOP = {
    "patch_embed.proj.weight": "embeddings.patch_embeddings.projection.weight",
    "patch_embed.proj.bias": "embeddings.patch_embeddings.projection.bias",
    "cls_token": "embeddings.cls_token", "pos_embed": "embeddings.position_embeddings",
    "register_tokens": "embeddings.register_tokens", "mask_token": "embeddings.mask_token",
    "norm.weight": "layernorm.weight", "norm.bias": "layernorm.bias",
}
_DINO_BLOCK = (("ls1.gamma", "layer_scale1.lambda1"), ("ls2.gamma", "layer_scale2.lambda1"),
               ("attn.proj.", "attention.output.dense."), ("mlp.w12.", "mlp.weights_in."),
               ("mlp.w3.", "mlp.weights_out."))


def backbone_prefix(tensors: Mapping[str, Any]) -> str:
    return "encoder.backbone." if any(k.startswith("encoder.backbone.") for k in tensors) else "backbone."


def convert_keys(state: Mapping[str, Any]) -> dict[str, Any]:
    """The state dict in ComfyUI's names: Meta-style DINOv2 names converted and each fused
    `attn.qkv` split into query / key / value (a `{"model": ..., "model_config": ...}` wrapper, as
    MoGe's own `.pt` releases hold, is unwrapped). Names already in ComfyUI's layout pass as they are."""
    if "model" in state and "model_config" in state:
        state = state["model"]
    prefix = backbone_prefix(state)
    out: dict[str, Any] = {}
    for key, value in state.items():
        rel = key[len(prefix):] if key.startswith(prefix) else None
        if rel is None or not (rel in _DINO_TOP or rel.startswith("blocks.")):
            out[key] = value
        elif rel in _DINO_TOP:
            out[prefix + _DINO_TOP[rel]] = value
        else:
            _, index, sub = rel.split(".", 2)
            base = f"{prefix}encoder.layer.{index}."
            if sub in ("attn.qkv.weight", "attn.qkv.bias"):
                tail = sub.rsplit(".", 1)[1]
                for name, part in zip(("query", "key", "value"), value.chunk(3, dim=0)):
                    out[f"{base}attention.attention.{name}.{tail}"] = part
                continue
            for old, new in _DINO_BLOCK:
                sub = sub.replace(old, new)
            out[base + sub] = value
    return out


def detect_config(tensors: Mapping[str, Any]) -> MoGeV1Config | MoGeV2Config:
    """The network's config from names and shapes (after `convert_keys`)."""
    prefix = backbone_prefix(tensors)
    if prefix + "embeddings.cls_token" not in tensors:
        raise MoGeWeightsError("not a MoGe model: no DINOv2 backbone under `backbone.` or `encoder.backbone.`")
    backbone = Dinov2Config.detect_from_weights(tensors, prefix)
    if prefix == "backbone.":
        stem = "head.upsample_blocks."
        stages = 1 + max(int(k.split(".")[2]) for k in tensors if k.startswith(stem))
        dims = tuple(int(tensors[f"{stem}{i}.0.0.weight"].shape[1]) for i in range(stages))
        res = max(int(k.split(".")[3]) for k in tensors if k.startswith(stem + "0."))
        hidden = int(tensors[f"{stem}0.1.layers.2.weight"].shape[0]) if res else dims[0]
        return MoGeV1Config(backbone=backbone, dim_upsample=dims, num_res_blocks=res,
                            hidden_factor=max(hidden // dims[0], 1))
    depth = backbone.num_layers
    scale_ids = sorted({int(k.split(".")[1]) for k in tensors if k.startswith("scale_head.")})
    scale_dims = (int(tensors[f"scale_head.{scale_ids[0]}.weight"].shape[1]),) + tuple(
        int(tensors[f"scale_head.{i}.weight"].shape[0]) for i in scale_ids)
    has_normal = any(k.startswith("normal_head.") for k in tensors)
    has_refiner = any(k.startswith("refiner.") for k in tensors)
    return MoGeV2Config(
        backbone=backbone,
        intermediate_layers=tuple((depth // INTERMEDIATE_LAYERS) * (i + 1) - 1 for i in range(INTERMEDIATE_LAYERS)),
        dim_proj=int(tensors["encoder.output_projections.0.weight"].shape[0]),
        neck=ConvStackConfig.detect_from_weights(tensors, "neck."),
        points_head=ConvStackConfig.detect_from_weights(tensors, "points_head."),
        mask_head=ConvStackConfig.detect_from_weights(tensors, "mask_head."),
        scale_dims=scale_dims,
        normal_head=ConvStackConfig.detect_from_weights(tensors, "normal_head.") if has_normal else None,
        refiner=RefinerConfig.detect_from_weights(tensors) if has_refiner else None,
        version="v3" if has_refiner else "v2")


def build_network(config: MoGeV1Config | MoGeV2Config) -> MoGeV1 | MoGeV2:
    return MoGeV1(config) if isinstance(config, MoGeV1Config) else MoGeV2(config)


def network_from_state_dict(state: Mapping[str, torch.Tensor], name: str = "state dict",
                            dtype: torch.dtype = torch.float32) -> MoGeV1 | MoGeV2:
    """The network of a MoGe state dict, weights in `dtype`, in eval mode on the CPU. Every model
    tensor must be in the file with its shape; the image mean / std buffers are taken from the
    file when it holds them (ComfyUI loads them), else MoGe's ImageNet values."""
    tensors = convert_keys(state)
    try:
        config = detect_config(tensors)
    except (KeyError, ValueError, IndexError) as exc:
        if isinstance(exc, MoGeWeightsError):
            raise MoGeWeightsError(f"{name}: {exc}") from None
        raise MoGeWeightsError(f"{name}: not a MoGe v1 / v2 / v3 file ({type(exc).__name__}: {exc})") from None
    network = build_network(config)
    optional = {k for k in network.state_dict() if k.endswith(("image_mean", "image_std"))}
    return load_exact(network, tensors, what=f"{name}: MoGe {config.version}", error=MoGeWeightsError,
                      optional=optional, dtype=dtype)

