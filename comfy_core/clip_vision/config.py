"""`ClipVisionConfig`: the shape of a CLIP / SigLIP image encoder, read from tensor names and shapes.

After ComfyUI's `comfy/clip_vision.py` (`load_clipvision_from_sd`, the `clip_vision_*.json`
configs), written here from the weights instead of a fixed table of files:

- Key layouts: "hf" (transformers' names: `vision_model.embeddings.patch_embedding.weight`,
  `vision_model.encoder.layers.N.self_attn.q_proj.weight`, `visual_projection.weight`) and
  "open_clip" (`conv1.weight`, `positional_embedding`, `transformer.resblocks.N.attn.in_proj_weight`,
  `proj`), the latter converted on load (`comfy_core.clip_vision.convert`).
- Where a tower sits (`KNOWN_PREFIXES`): at the top of a standalone file (hf), under `visual.`
  (a whole OpenCLIP model), or inside a checkpoint (SD2.1 unCLIP `embedder.model.visual.`,
  SVD, Zero123, Stable Cascade, and `clip_vision.`); at each prefix either layout is accepted, as
  ComfyUI does (its own checkpoint saver writes hf names under the OpenCLIP prefixes).
- Kinds: "clip" (a class token, a bias-free patch convolution, a pre-layer-norm, the pooled
  class token through the post-layer-norm and `visual_projection`) and "siglip" (no class
  token, a patch convolution with bias, every token through the post-layer-norm, no projection).

Facts the shapes cannot show follow ComfyUI's configs: 16 attention heads for every model, the
activation of the published towers (`KNOWN_MODELS`: OpenAI's ViT-L/14 uses quick-GELU, OpenCLIP's
ViT-H/14 and ViT-bigG/14 GELU, SigLIP so400m tanh-GELU), CLIP's or SigLIP's pixel mean and std,
and layer-norm eps 1e-5 for every norm (ComfyUI builds SigLIP's norms with torch's default too,
not SigLIP's 1e-6). Towers of other sizes (the tiny test files) get their kind's defaults.

Detection reads only `tensors`: name -> object with a `.shape` tuple (a safetensors header entry).
No torch import here.
"""
from __future__ import annotations

import logging
import math
import re
from dataclasses import dataclass
from typing import Any, Mapping

log = logging.getLogger(__name__)

LAYOUT_HF = "hf"
LAYOUT_OPEN_CLIP = "open_clip"
LAYOUT_DINOV2 = "dinov2"  # transformers' `Dinov2Model` names (`embeddings.*`, `encoder.layer.N.*`, `layernorm.*`)
KIND_CLIP = "clip"
KIND_SIGLIP = "siglip"
KIND_DINOV2 = "dinov2"
# DINOv2's pixel normalisation (ImageNet's), ComfyUI's `image_encoders/dino2_*.json`.
DINOV2_MEAN = (0.485, 0.456, 0.406)
DINOV2_STD = (0.229, 0.224, 0.225)

HEADS = 16  # every ComfyUI clip_vision config (ViT-L 64-wide heads, H 80, bigG 104, SigLIP 72)
CLIP_MEAN = (0.48145466, 0.4578275, 0.40821073)
CLIP_STD = (0.26862954, 0.26130258, 0.27577711)
SIGLIP_MEAN = (0.5, 0.5, 0.5)
SIGLIP_STD = (0.5, 0.5, 0.5)

# Where image towers sit, most specific first: "" and "visual." in standalone files, the others
# inside checkpoints (ComfyUI's `clip_vision_prefix` of SD2.1 unCLIP, SVD, Stable Zero123 and
# Stable Cascade, and `clip_vision.`).
KNOWN_PREFIXES: tuple[str, ...] = (
    "embedder.model.visual.",
    "conditioner.embedders.0.open_clip.model.visual.",
    "cond_stage_model.model.visual.",
    "conditioner.main_image_encoder.model.",  # Hunyuan3D 2.0 / 2.1's DINOv2
    "clip_l_vision.",
    "clip_vision.",
    "visual.",
    "",
)


class ClipVisionDetectionError(ValueError):
    """An image tower whose keys are incomplete or inconsistent."""


@dataclass(frozen=True)
class KnownModel:
    """A published image tower: what its weights cannot say."""

    name: str
    kind: str
    width: int
    layers: int
    activation: str


KNOWN_MODELS: tuple[KnownModel, ...] = (
    KnownModel("CLIP ViT-L/14 (OpenAI)", KIND_CLIP, 1024, 24, "quick_gelu"),
    KnownModel("CLIP ViT-H/14 (OpenCLIP)", KIND_CLIP, 1280, 32, "gelu"),
    KnownModel("CLIP ViT-bigG/14 (OpenCLIP)", KIND_CLIP, 1664, 48, "gelu"),
    KnownModel("SigLIP so400m", KIND_SIGLIP, 1152, 27, "gelu_pytorch_tanh"),
)
# Input sizes that are not a whole number of patches: SigLIP so400m/14 takes 384 px images, of
# which its stride-14 patch convolution sees 27 x 27 patches (378 px; ComfyUI resizes to 384).
_IMAGE_SIZES = {(14, 27): 384}
_DEFAULT_ACTIVATION = {KIND_CLIP: "gelu", KIND_SIGLIP: "gelu_pytorch_tanh"}


@dataclass(frozen=True)
class ClipVisionConfig:
    """One image tower: where its keys are and its geometry."""

    name: str  # a KnownModel name, or "custom CLIP vision" / "custom SigLIP vision"
    kind: str  # "clip" | "siglip"
    prefix: str  # checkpoint key prefix ("" or ending with ".")
    layout: str  # "hf" | "open_clip"
    width: int
    layers: int
    heads: int
    intermediate: int
    patch_size: int
    image_size: int
    projection_dim: int | None  # None: no visual projection (SigLIP)
    activation: str
    image_mean: tuple[float, float, float]
    image_std: tuple[float, float, float]
    mm_projection_dim: int | None = None  # LLaVA projector width (`multi_modal_projector.*`), if any
    layer_norm_eps: float = 1e-5

    def __post_init__(self) -> None:
        if self.kind not in (KIND_CLIP, KIND_SIGLIP, KIND_DINOV2):
            raise ClipVisionDetectionError(f"clip vision kind must be 'clip', 'siglip' or 'dinov2', got {self.kind!r}")
        if self.layout not in (LAYOUT_HF, LAYOUT_OPEN_CLIP, LAYOUT_DINOV2):
            raise ClipVisionDetectionError(f"clip vision layout must be 'hf', 'open_clip' or 'dinov2', "
                                           f"got {self.layout!r}")
        if self.width % self.heads:
            raise ClipVisionDetectionError(f"{self.prefix or '(top level)'}: width {self.width} is not divisible "
                                           f"by {self.heads} attention heads")

    @property
    def num_patches(self) -> int:
        return (self.image_size // self.patch_size) ** 2  # the patch convolution drops a remainder

    @property
    def num_positions(self) -> int:
        return self.num_patches + (0 if self.kind == KIND_SIGLIP else 1)

    @classmethod
    def detect_from_weights(cls, tensors: Mapping[str, Any], prefix: str = "",
                            heads: int | None = None) -> "ClipVisionConfig | None":
        """The config of the image tower under `prefix`, or None when none is there.

        Raises `ClipVisionDetectionError` for a tower whose keys are incomplete or inconsistent.
        """
        if f"{prefix}vision_model.embeddings.patch_embedding.weight" in tensors:
            return _detect_hf(tensors, prefix, heads)
        if f"{prefix}conv1.weight" in tensors and f"{prefix}transformer.resblocks.0.attn.in_proj_weight" in tensors:
            return _detect_open_clip(tensors, prefix, heads)
        if f"{prefix}embeddings.cls_token" in tensors and f"{prefix}encoder.layer.0.layer_scale1.lambda1" in tensors:
            return _detect_dinov2(tensors, prefix, heads)
        return None

    def to_transformers(self) -> Any:
        """transformers' `CLIPVisionConfig` / `SiglipVisionConfig` for this tower (SDPA attention)."""
        if self.kind == KIND_CLIP:
            from transformers import CLIPVisionConfig

            config = CLIPVisionConfig(
                hidden_size=self.width, intermediate_size=self.intermediate, num_hidden_layers=self.layers,
                num_attention_heads=self.heads, num_channels=3, image_size=self.image_size,
                patch_size=self.patch_size, hidden_act=self.activation, layer_norm_eps=self.layer_norm_eps,
                projection_dim=self.projection_dim or self.width)
        else:
            from transformers import SiglipVisionConfig

            config = SiglipVisionConfig(
                hidden_size=self.width, intermediate_size=self.intermediate, num_hidden_layers=self.layers,
                num_attention_heads=self.heads, num_channels=3, image_size=self.image_size,
                patch_size=self.patch_size, hidden_act=self.activation, layer_norm_eps=self.layer_norm_eps,
                vision_use_head=False)
        config._attn_implementation = "sdpa"
        return config


def find_clip_vision(tensors: Mapping[str, Any], prefixes: tuple[str, ...] = KNOWN_PREFIXES) -> ClipVisionConfig | None:
    """The first image tower found under `prefixes` (in order), or None."""
    for prefix in prefixes:
        config = ClipVisionConfig.detect_from_weights(tensors, prefix)
        if config is not None:
            return config
    return None


def _shape(tensors: Mapping[str, Any], key: str) -> tuple[int, ...]:
    try:
        return tuple(int(d) for d in tensors[key].shape)
    except KeyError:
        raise ClipVisionDetectionError(f"clip vision key {key!r} is missing") from None


def _count_layers(tensors: Mapping[str, Any], stem: str) -> int:
    regex = re.compile(re.escape(stem) + r"\.(\d+)\.")
    found = {int(m.group(1)) for name in tensors if (m := regex.match(name))}
    if not found:
        raise ClipVisionDetectionError(f"no {stem}.N.* keys")
    missing = sorted(set(range(max(found) + 1)) - found)
    if missing:
        raise ClipVisionDetectionError(f"clip vision layers {missing} are missing ({stem}.N)")
    return max(found) + 1


def _geometry(prefix: str, patch: tuple[int, ...], positions: tuple[int, ...], has_class: bool) -> tuple[int, int, int]:
    """(width, patch size, image size) from the patch convolution [W, 3, p, p] and the position
    embedding [N, W] (N = grid^2, plus one for the class token)."""
    if len(patch) != 4 or patch[1] != 3 or patch[2] != patch[3]:
        raise ClipVisionDetectionError(f"{prefix}: patch embedding shape {patch} is not [width, 3, p, p]")
    width, patch_size = patch[0], patch[2]
    if len(positions) != 2 or positions[1] != width:
        raise ClipVisionDetectionError(f"{prefix}: position embedding shape {positions} is not [N, {width}]")
    grid = math.isqrt(positions[0] - int(has_class))
    if grid * grid != positions[0] - int(has_class) or grid == 0:
        raise ClipVisionDetectionError(f"{prefix}: {positions[0]} positions are not a square grid"
                                       f"{' plus a class token' if has_class else ''}")
    return width, patch_size, _IMAGE_SIZES.get((patch_size, grid), grid * patch_size)


def _finish(prefix: str, layout: str, kind: str, width: int, layers: int, intermediate: int, patch_size: int,
            image_size: int, projection_dim: int | None, mm_projection_dim: int | None,
            heads: int | None) -> ClipVisionConfig:
    known = next((m for m in KNOWN_MODELS if (m.kind, m.width, m.layers) == (kind, width, layers)), None)
    if known is not None:
        name, activation = known.name, known.activation
    else:
        name = "custom CLIP vision" if kind == KIND_CLIP else "custom SigLIP vision"
        activation = _DEFAULT_ACTIVATION[kind]
        log.info("image tower %r: width %d, %d layers is no published %s model; using %s",
                 prefix, width, layers, kind, activation)
    siglip = kind == KIND_SIGLIP
    return ClipVisionConfig(
        name=name, kind=kind, prefix=prefix, layout=layout, width=width, layers=layers, heads=heads or HEADS,
        intermediate=intermediate, patch_size=patch_size, image_size=image_size, projection_dim=projection_dim,
        activation=activation, image_mean=SIGLIP_MEAN if siglip else CLIP_MEAN,
        image_std=SIGLIP_STD if siglip else CLIP_STD, mm_projection_dim=mm_projection_dim)


def _detect_hf(tensors: Mapping[str, Any], prefix: str, heads: int | None) -> ClipVisionConfig:
    base = f"{prefix}vision_model."
    has_class = f"{base}embeddings.class_embedding" in tensors
    kind = KIND_CLIP if has_class else KIND_SIGLIP
    width, patch_size, image_size = _geometry(prefix, _shape(tensors, f"{base}embeddings.patch_embedding.weight"),
                                              _shape(tensors, f"{base}embeddings.position_embedding.weight"),
                                              has_class)
    if kind == KIND_SIGLIP and f"{base}embeddings.patch_embedding.bias" not in tensors:
        raise ClipVisionDetectionError(f"{prefix}: no class embedding (SigLIP) but no patch embedding bias either")
    layers = _count_layers(tensors, f"{base}encoder.layers")
    intermediate = _shape(tensors, f"{base}encoder.layers.0.mlp.fc1.weight")[0]
    projection_dim = None
    if kind == KIND_CLIP:
        projection = _shape(tensors, f"{prefix}visual_projection.weight")
        if len(projection) != 2 or projection[1] != width:
            raise ClipVisionDetectionError(f"{prefix}visual_projection.weight: shape {projection} is not [P, {width}]")
        projection_dim = projection[0]
    mm = f"{prefix}multi_modal_projector.linear_1.weight"
    mm_projection_dim = _shape(tensors, mm)[0] if mm in tensors else None
    return _finish(prefix, LAYOUT_HF, kind, width, layers, intermediate, patch_size, image_size, projection_dim,
                   mm_projection_dim, heads)


def _detect_open_clip(tensors: Mapping[str, Any], prefix: str, heads: int | None) -> ClipVisionConfig:
    if f"{prefix}class_embedding" not in tensors:
        raise ClipVisionDetectionError(f"{prefix}: an OpenCLIP image tower without class_embedding")
    width, patch_size, image_size = _geometry(prefix, _shape(tensors, f"{prefix}conv1.weight"),
                                              _shape(tensors, f"{prefix}positional_embedding"), True)
    in_proj = _shape(tensors, f"{prefix}transformer.resblocks.0.attn.in_proj_weight")
    if in_proj != (3 * width, width):
        raise ClipVisionDetectionError(f"{prefix}transformer.resblocks.0.attn.in_proj_weight: shape {in_proj} "
                                       f"is not {(3 * width, width)}")
    layers = _count_layers(tensors, f"{prefix}transformer.resblocks")
    intermediate = _shape(tensors, f"{prefix}transformer.resblocks.0.mlp.c_fc.weight")[0]
    projection = _shape(tensors, f"{prefix}proj")
    if len(projection) != 2 or projection[0] != width:
        raise ClipVisionDetectionError(f"{prefix}proj: shape {projection} is not [{width}, P]")
    return _finish(prefix, LAYOUT_OPEN_CLIP, KIND_CLIP, width, layers, intermediate, patch_size, image_size,
                   projection[1], None, heads)


# DINOv2 towers ComfyUI loads as clip vision (`image_encoders/dino2_large.json`, `dino2_giant.json`).
DINOV2_MODELS = {(1024, 24): "DINOv2 ViT-L/14", (1536, 40): "DINOv2 ViT-g/14"}


def _detect_dinov2(tensors: Mapping[str, Any], prefix: str, heads: int | None) -> ClipVisionConfig:
    """A DINOv2 tower (Hunyuan3D's image encoder), as ComfyUI's `load_clipvision_from_sd` takes it:
    heads of 64 (ViT-L 16, ViT-g 24), layer-norm eps 1e-6, ImageNet normalisation, the image size
    of the trained position grid (518 for the releases); the output is the final LayerNorm's."""
    patch = _shape(tensors, f"{prefix}embeddings.patch_embeddings.projection.weight")
    positions = _shape(tensors, f"{prefix}embeddings.position_embeddings")[1:]  # [1, N, W] -> (N, W)
    width, patch_size, image_size = _geometry(prefix, patch, positions, True)
    layers = _count_layers(tensors, f"{prefix}encoder.layer")
    swiglu = f"{prefix}encoder.layer.0.mlp.weights_in.weight" in tensors
    intermediate = _shape(tensors, f"{prefix}encoder.layer.0.mlp.{'weights_in' if swiglu else 'fc1'}.weight")[0]
    return ClipVisionConfig(
        name=DINOV2_MODELS.get((width, layers), "custom DINOv2"), kind=KIND_DINOV2, prefix=prefix,
        layout=LAYOUT_DINOV2, width=width, layers=layers, heads=heads or max(1, width // 64), intermediate=intermediate,
        patch_size=patch_size, image_size=image_size, projection_dim=None,
        activation="swiglu" if swiglu else "gelu", image_mean=DINOV2_MEAN, image_std=DINOV2_STD, layer_norm_eps=1e-6)
