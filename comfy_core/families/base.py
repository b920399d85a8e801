"""A model family definition: everything that differs between SD1.x, SD2.x, SDXL, ... as data.

After stable-diffusion.cpp's convention (one definition per version, detected from tensor names
and shapes, never from the file name): a family holds its detection `Signature`, where its
components live in a single-file checkpoint, the facts weights cannot show (attention head
layout), its latent geometry and format, its sampling policy and its key conversions. The loader
(`comfy_core.loading`) is generic over families; adding a family is one file plus its
registration (see `comfy_core/families/README.md`).
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Mapping, Protocol

from comfy_core.families.architecture import Architecture, unet_architecture, unet_facts  # noqa: F401 -- unet_facts: re-exported
from comfy_core.models.latent_formats import LatentFormat

if TYPE_CHECKING:
    from comfy_core.checkpoint.keys import KeyConversion
    from comfy_core.checkpoint.reader import CheckpointFile

# "img_to_img": ComfyUI's IMG_TO_IMG (Lotus-D): the input unscaled, the output the clean prediction.
PREDICTIONS = ("eps", "v", "img_to_img")
SCHEDULES = ("discrete", "flow", "flux")
CONCAT_KINDS = ("none", "inpaint", "ip2p")


@dataclass(frozen=True)
class Signature:
    """What a checkpoint must look like to belong to a family (names and shapes only).

    `required_prefixes`: each must start at least one tensor name; `forbidden_prefixes`: none may;
    `unet`: (fact, value) pairs the UNet structure must show, facts being `UNetConfig` fields plus
    `has_adm` (a label embedding is present). Two families with equal signatures conflict.
    """

    required_prefixes: tuple[str, ...] = ()
    forbidden_prefixes: tuple[str, ...] = ()
    unet: tuple[tuple[str, Any], ...] = ()
    # Further UNet facts that tell this family's diffusion model apart when it comes alone (a
    # split file, without the text encoders whose prefixes single files are told apart by):
    # see `matches_diffusion_model`.
    diffusion_model: tuple[tuple[str, Any], ...] = ()

    def matches(self, names: frozenset[str] | Any, unet_facts: Mapping[str, Any] | None) -> bool:
        for prefix in self.required_prefixes:
            if not any(n.startswith(prefix) for n in names):
                return False
        for prefix in self.forbidden_prefixes:
            if any(n.startswith(prefix) for n in names):
                return False
        if self.unet:
            if unet_facts is None:
                return False
            return all(unet_facts.get(k) == v for k, v in self.unet)
        return True

    def matches_diffusion_model(self, unet_facts: Mapping[str, Any]) -> bool:
        """A diffusion model on its own (no text encoders, no VAE in the file) is this family's
        when both its `unet` and its `diffusion_model` facts hold; the prefixes are not tested."""
        return all(unet_facts.get(k) == v for k, v in self.unet + self.diffusion_model)


@dataclass(frozen=True)
class SamplingPolicy:
    """How the model was trained to be sampled.

    `schedule` "discrete": a DDPM table, scaled-linear from `linear_start` to `linear_end` over
    `timesteps`, `prediction` "eps" or "v" (SD1/SD2/SDXL). "flow": rectified flow (Liu et al. 2022;
    Esser et al. 2024) with SD3's time shift `shift` and timestep multiplier `multiplier` (ComfyUI's
    ModelSamplingDiscreteFlow: SD3 shift 3, multiplier 1000; Flux schnell shift 1, multiplier 1).
    "flux": rectified flow with Flux's exponential shift `shift` (ComfyUI's ModelSamplingFlux,
    Flux dev 1.15). Flow models predict the velocity (`prediction` "flow", ComfyUI's CONST)."""

    prediction: str = "eps"
    linear_start: float = 0.00085
    linear_end: float = 0.012
    timesteps: int = 1000
    default_sampler: str = "euler"
    default_scheduler: str = "normal"
    schedule: str = "discrete"
    shift: float = 1.0
    multiplier: float = 1000.0

    def __post_init__(self) -> None:
        if self.schedule not in SCHEDULES:
            raise ValueError(f"SamplingPolicy.schedule must be one of {SCHEDULES}, got {self.schedule!r}")
        allowed = PREDICTIONS if self.schedule == "discrete" else ("flow",)
        if self.prediction not in allowed:
            raise ValueError(f"SamplingPolicy.prediction must be one of {allowed} for a {self.schedule} "
                             f"schedule, got {self.prediction!r}")

    def model_sampling(self, prediction: str, zsnr: bool = False) -> Any:
        """The model-sampling object of this policy (`prediction`: the resolved eps/v/img_to_img of a
        discrete table)."""
        from comfy_core.models.model_sampling import (DiscreteModelSampling, FlowModelSampling, FluxModelSampling,
                                                      ModelSampling)

        if self.schedule == "flow":
            return FlowModelSampling(shift=self.shift, multiplier=self.multiplier)
        if self.schedule == "flux":
            return FluxModelSampling(shift=self.shift)
        table = ModelSampling if prediction in ModelSampling.allowed_predictions else DiscreteModelSampling
        return table(prediction, linear_start=self.linear_start, linear_end=self.linear_end,
                     timesteps=self.timesteps, zsnr=zsnr)


@dataclass(frozen=True)
class Geometry:
    latent_channels: int = 4
    downscale: int = 8  # pixels per latent pixel along each side


class Components(Protocol):
    """What `comfy_core.loading` builds for a family, when it is not the image default: the UNet
    module from its detected config, the VAE config from the header and its module, and the
    denoiser (`DiffusionModel` or a subclass, with its model sampling) around the loaded UNet."""

    def build_unet(self, config: Any) -> Any: ...

    def vae_config(self, tensors: Mapping[str, Any], prefix: str) -> Any: ...

    def build_vae(self, config: Any) -> Any: ...

    def build_model(self, unet: Any, family: "Family", prediction: str, zsnr: bool) -> Any: ...


@dataclass(frozen=True)
class BuiltinParts:
    """What a family's checkpoints do not store and ComfyUI's loader makes without reading them
    (HiDream-O1: ComfyUI's pixel-space VAE and a tokenizer-only text encoder): `vae()` -> the VAE
    module, `clip(load_device, offload_device)` -> the CLIP object; None: the part is in the file."""

    vae: Callable[[], Any] | None = None
    clip: Callable[[Any, Any], Any] | None = None


@dataclass(frozen=True)
class Family:
    """One model family. See the module docstring; `name` is the registry key."""

    name: str
    display_name: str
    signature: Signature
    latent_format: LatentFormat
    sampling: SamplingPolicy = field(default_factory=SamplingPolicy)
    geometry: Geometry = field(default_factory=Geometry)
    unet_prefix: str = "model.diffusion_model."
    vae_prefix: str = "first_stage_model."
    # Head layout (weights cannot show it): exactly one of these is positive.
    num_heads: int = -1
    num_head_channels: int = -1
    # What the network gets besides the noisy latent and the text context: the label embedding
    # `y` ("ADM": SDXL's pooled text + size embeddings, unCLIP's image embedding, SD3's pooled
    # text) and further model inputs (Flux's guidance and reference latents). A
    # `comfy_core.models.model_conditions.ModelConditions`; None: none (SD1/SD2).
    conditioning: Any = None
    # Extra UNet input channels concatenated to the noisy latent (ComfyUI's `concat_keys` /
    # `IP2P.concat_cond`): "none", "inpaint" (mask + masked-image latent, 9-channel UNets) or
    # "ip2p" (the source image's latent, 8-channel instruct-pix2pix UNets).
    concat: str = "none"
    # Where a CLIP vision tower sits inside the checkpoint (SD2.1 unCLIP's image embedder), for
    # unCLIPCheckpointLoader; None: the family's files carry none.
    clip_vision_prefix: str | None = None
    # Optional: read the prediction type from tensor data (SD2's one allowed read), given the open
    # checkpoint; returns "eps", "v" or None (keep `sampling.prediction`).
    prediction_from_weights: Callable[["CheckpointFile", str], str | None] | None = None
    key_conversions: tuple["KeyConversion", ...] = ()
    # A marker tensor whose presence means the schedule is rescaled to zero terminal SNR
    # (Lin et al. 2023); SDXL v-prediction fine-tunes carry `ztsnr`, as ComfyUI reads it.
    zsnr_marker: str | None = None
    # Builders for a family whose modules are not the image UNet / AutoencoderKL / DiffusionModel
    # (SVD's video UNet and temporal VAE decoder); None: the loader's image defaults. See
    # `Components`.
    components: "Components | None" = None
    # The diffusion network (UNet by default; MMDiT, Flux DiT ...): detection and builder.
    architecture: Architecture = field(default_factory=unet_architecture)
    # The text encoders (`comfy_core.text_encoders.encoder_set.EncoderSetSpec`: slots, single-file
    # prefixes, layers, pooling, how outputs combine, the empty-negative rule); None: none (SVD).
    text_encoders: Any = None
    # ComfyUI's `model_config.unet_config` dict of a loaded model, for families whose network is
    # not a UNet (packs read it); None: derived from the UNet config.
    comfy_config: Callable[[Any], dict[str, Any]] | None = None
    # The diffusion model's inference dtypes in preference order (ComfyUI's
    # `supported_inference_dtypes`), read by comfy_core.checkpoint.dtype on GPUs.
    inference_dtypes: tuple[str, ...] = ("fp16", "bf16", "fp32")
    # ComfyUI's `comfy.supported_models` config class of this family (a subclass of
    # `comfy_core.models.model_config.BASE`, in the family's `supported_models.py`): the type of
    # `model.model.model_config` that packs check; None: none (model_config raises).
    supported_model: Any = None
    # Stability's ModelSpec `modelspec.architecture` that ComfyUI writes into a saved checkpoint of
    # this family (its SDXL, SDXL instruct-pix2pix, refiner and SVD model classes); None: none.
    modelspec_architecture: str | None = None
    # The name of ComfyUI's `comfy.model_base` class that models of this family are (what its
    # `supported_models` config's `get_model` builds: "BaseModel", "SDXL", "Flux", "WAN21", ...),
    # which packs test with `isinstance` / `type(...)` (compat builds the classes).
    comfy_model_class: str = "BaseModel"
    # Parts the loader builds without reading the file (`BuiltinParts`); None: all read from it.
    builtin_parts: BuiltinParts | None = None

    def __post_init__(self) -> None:
        if self.architecture.head_layout and (self.num_heads > 0) == (self.num_head_channels > 0):
            raise ValueError(f"family {self.name!r}: set exactly one of num_heads / num_head_channels")
        if self.concat not in CONCAT_KINDS:
            raise ValueError(f"family {self.name!r}: concat must be one of {CONCAT_KINDS}, got {self.concat!r}")

    def unet_config(self, tensors: Mapping[str, Any], metadata: Mapping[str, str] | None = None) -> Any:
        """The diffusion network's config of a checkpoint of this family (structure from the
        weights, what they cannot show from here: a UNet's head layout; from the file's
        `metadata` where the architecture reads it)."""
        return self.architecture.config(tensors, self.unet_prefix, self, metadata)

    @property
    def adm(self) -> str:
        """The name of the family's model conditioning ("none", "sdxl", "sdxl_refiner", "unclip", ...)."""
        return getattr(self.conditioning, "name", "none")
