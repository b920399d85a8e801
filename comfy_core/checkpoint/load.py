"""`load_checkpoint`: a single-file checkpoint -> (MODEL, CLIP, VAE) patcher objects.

Steps: read the header (no tensor data), detect the family (`FamilyRegistry.detect`), resolve the
prediction type (explicit option > `modelspec.prediction_type` metadata > the family's read of
weights > the family default), then build each component on the meta device -- no default
weight initialisation, no memory -- allocate it once in its target dtype and read every tensor
from the file straight into its parameter (`CheckpointFile.read_into`), so loading costs about
one read of the file and peak memory stays near one copy of the weights.
"""
from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable

import torch
from torch import nn

from comfy_core.checkpoint.dtype import TEXT, UNET, VAE, DtypePolicy
from comfy_core.checkpoint.errors import CheckpointError, MissingComponentError, ShapeMismatchError
from comfy_core.checkpoint.keys import KeyConversion, find_conversion, strip_prefix
from comfy_core.checkpoint.reader import CheckpointFile, LazyStateDict

log = logging.getLogger(__name__)

# Values of the `modelspec.prediction_type` metadata key (Stability's ModelSpec) we understand.
_METADATA_PREDICTIONS = {"epsilon": "eps", "eps": "eps", "v": "v", "v_prediction": "v", "v-prediction": "v"}


@dataclass(frozen=True)
class LoadOptions:
    """What to load and how. `prediction` forces "eps" or "v" (e.g. an SD2-768 file whose
    weights the heuristic misreads)."""

    dtype_policy: DtypePolicy = DtypePolicy()
    prediction: str | None = None
    output_vae: bool = True
    output_clip: bool = True
    load_device: str | None = None


def load_checkpoint(path: str | Path, options: LoadOptions | None = None, *, registry: Any = None,
                    **overrides: Any) -> tuple[Any, Any, Any]:
    """Load a single-file SD1.x / SD2.x / SDXL checkpoint.

    Returns `(model, clip, vae)`: a `ModelPatcher` over a `DiffusionModel`, a CLIP object (or None
    with `output_clip=False`) and a `VaePatcher` over an `AutoencoderKL` (or None with
    `output_vae=False`). Keyword overrides set `LoadOptions` fields, e.g.
    `load_checkpoint(p, prediction="v")`. Raises `CheckpointError` subclasses naming the file.
    """
    from comfy_core.families import default_registry

    options = options or LoadOptions()
    if overrides:
        options = LoadOptions(**{**options.__dict__, **overrides})
    registry = registry or default_registry()
    started = time.perf_counter()
    with CheckpointFile(path) as checkpoint:
        detection = registry.detect(checkpoint.tensors, checkpoint.path)
        family = detection.family
        prediction = resolve_prediction(checkpoint, family, options.prediction)
        model = _load_model(checkpoint, detection, prediction, options)
        vae = _load_vae(checkpoint, family, options) if options.output_vae else None
        clip = _load_clip(checkpoint, options) if options.output_clip else None
    log.info("loaded %s in %.2fs: %s, %s-prediction, unet %s, vae %s", checkpoint.path.name,
             time.perf_counter() - started, family.display_name, prediction,
             options.dtype_policy.dtype_for(UNET), options.dtype_policy.dtype_for(VAE))
    return model, clip, vae


def resolve_prediction(checkpoint: CheckpointFile, family: Any, explicit: str | None) -> str:
    """Explicit option, then file metadata, then the family's look at the weights, then its default."""
    if explicit is not None:
        if explicit not in ("eps", "v"):
            raise CheckpointError(checkpoint.path, f"prediction must be 'eps' or 'v', got {explicit!r}")
        return explicit
    declared = checkpoint.metadata.get("modelspec.prediction_type")
    if declared is not None:
        try:
            return _METADATA_PREDICTIONS[declared.strip().lower()]
        except KeyError:
            raise CheckpointError(checkpoint.path, f"metadata modelspec.prediction_type={declared!r} is not "
                                                   f"one of {sorted(_METADATA_PREDICTIONS)}") from None
    if family.prediction_from_weights is not None:
        found = family.prediction_from_weights(checkpoint, family.unet_prefix)
        if found is not None:
            return found
    return family.sampling.prediction


def materialize(module: nn.Module, checkpoint: CheckpointFile, prefix: str, dtype: torch.dtype,
                component: str, conversions: Iterable[KeyConversion] = ()) -> nn.Module:
    """Fill `module` (built on the meta device) from the tensors under `prefix`.

    Every parameter and buffer must have a tensor of the same shape (or one a `conversions` entry
    explains); tensors under the prefix that the module does not use are logged. Floating tensors
    are stored in `dtype`.
    """
    conversions = tuple(conversions)
    expected = {k: tuple(v.shape) for k, v in module.state_dict().items()}
    stored = strip_prefix(checkpoint.tensors, prefix)
    missing = sorted(set(expected) - set(stored))
    if missing:
        raise ShapeMismatchError(
            checkpoint.path, f"{component}: {len(missing)} tensors missing under {prefix!r}, e.g. "
                             f"{', '.join(prefix + m for m in missing[:5])}")
    plan: dict[str, KeyConversion | None] = {}
    for name, shape in expected.items():
        have = checkpoint.tensors[stored[name]].shape
        if have == shape:
            plan[name] = None
            continue
        conversion = find_conversion(conversions, stored[name], have, shape)
        if conversion is None:
            raise ShapeMismatchError(
                checkpoint.path, f"{component}: tensor {stored[name]!r} has shape {list(have)}, "
                                 f"the detected architecture needs {list(shape)}")
        plan[name] = conversion
    unused = sorted(set(stored) - set(expected))
    if unused:
        log.warning("%s: %d unused tensors under %r in %s, e.g. %s", component, len(unused), prefix,
                    checkpoint.path.name, ", ".join(unused[:3]))
    if any(p.dtype != dtype for p in module.parameters()):
        module.to(dtype)  # on meta: only changes the dtypes the storage is allocated with
    module.to_empty(device="cpu")
    state = module.state_dict()
    by_file_order = checkpoint.in_file_order(stored[name] for name in expected)
    reverse = {stored[name]: name for name in expected}
    for key in by_file_order:
        name = reverse[key]
        conversion = plan[name]
        if conversion is None:
            checkpoint.read_into(key, state[name])
        else:
            with torch.no_grad():
                state[name].copy_(conversion.convert(checkpoint.read(key), tuple(state[name].shape)))
    return module


def _build_on_meta(factory: Callable[[], nn.Module]) -> nn.Module:
    with torch.device("meta"):
        return factory()


def _load_model(checkpoint: CheckpointFile, detection: Any, prediction: str, options: LoadOptions) -> Any:
    from comfy_core.models.diffusion import DiffusionModel
    from comfy_core.models.unet import UNetModel
    from comfy_core.patching.model import ModelPatcher
    from comfy_core.sampling.model_sampling import ModelSampling

    family = detection.family
    config = detection.unet_config
    unet = materialize(_build_on_meta(lambda: UNetModel(config)), checkpoint, family.unet_prefix,
                       options.dtype_policy.dtype_for(UNET), "UNet", family.key_conversions)
    zsnr = family.zsnr_marker is not None and family.zsnr_marker in checkpoint.tensors
    sampling = ModelSampling(prediction, linear_start=family.sampling.linear_start,
                             linear_end=family.sampling.linear_end, timesteps=family.sampling.timesteps, zsnr=zsnr)
    model = DiffusionModel(unet, sampling, family.latent_format, family=family, adm=family.adm)
    model.eval()
    device = options.load_device or options.dtype_policy.device
    return ModelPatcher(model, load_device=device, offload_device="cpu")


def _load_vae(checkpoint: CheckpointFile, family: Any, options: LoadOptions) -> Any:
    from comfy_core.models.vae import AutoencoderKL, VAEConfig, VAEConfigError
    from comfy_core.patching.vae import VaePatcher

    if not any(k.startswith(family.vae_prefix) for k in checkpoint.tensors):
        raise MissingComponentError(checkpoint.path, f"no VAE in the file (no tensors under {family.vae_prefix!r}); "
                                                     "load one with VAELoader")
    try:
        config = VAEConfig.detect_from_weights(checkpoint.tensors, family.vae_prefix)
    except VAEConfigError as exc:
        raise ShapeMismatchError(checkpoint.path, f"VAE: {exc}") from None
    if config.downscale != family.geometry.downscale or config.embed_dim != family.geometry.latent_channels:
        raise ShapeMismatchError(
            checkpoint.path, f"VAE downscales {config.downscale}x to {config.embed_dim} channels; "
                             f"{family.display_name} needs {family.geometry.downscale}x and "
                             f"{family.geometry.latent_channels} channels")
    vae = materialize(_build_on_meta(lambda: AutoencoderKL(config)), checkpoint, family.vae_prefix,
                      options.dtype_policy.dtype_for(VAE), "VAE", family.key_conversions)
    vae.eval()
    device = options.load_device or options.dtype_policy.device
    return VaePatcher(vae, load_device=device, offload_device="cpu")


def _load_clip(checkpoint: CheckpointFile, options: LoadOptions) -> Any:
    from comfy_core.text_encoders import build_clip, detect_text_encoders
    from comfy_core.text_encoders.errors import TextEncoderError

    try:
        configs = detect_text_encoders(checkpoint.tensors)
    except TextEncoderError as exc:
        raise ShapeMismatchError(checkpoint.path, f"text encoder: {exc}") from None
    if not configs:
        raise MissingComponentError(checkpoint.path, "no text encoder in the file; load one with a CLIP loader")
    dtype = options.dtype_policy.dtype_for(TEXT)
    device = options.load_device or options.dtype_policy.device
    try:
        return build_clip(configs, LazyStateDict(checkpoint, dtype), dtype, load_device=device, offload_device="cpu")
    except TextEncoderError as exc:
        raise ShapeMismatchError(checkpoint.path, f"text encoder: {exc}") from None


def load_vae(path: str | Path, options: LoadOptions | None = None) -> Any:
    """A standalone VAE file (keys `encoder.*`/`decoder.*`, or a checkpoint's `first_stage_model.*`)
    -> `VaePatcher` over an `AutoencoderKL`. Raises `CheckpointError` subclasses naming the file."""
    from comfy_core.checkpoint.keys import vae_attention_linear_to_conv
    from comfy_core.models.vae import AutoencoderKL, VAEConfig, VAEConfigError
    from comfy_core.patching.vae import VaePatcher

    options = options or LoadOptions()
    with CheckpointFile(path) as checkpoint:
        prefixes = [p for p in ("first_stage_model.", "vae.", "") if f"{p}encoder.conv_in.weight" in checkpoint.tensors]
        if not prefixes:
            raise MissingComponentError(checkpoint.path, "not a VAE: no 'encoder.conv_in.weight' (with or without "
                                                         "a 'first_stage_model.' prefix)")
        prefix = prefixes[0]
        try:
            config = VAEConfig.detect_from_weights(checkpoint.tensors, prefix)
        except VAEConfigError as exc:
            raise ShapeMismatchError(checkpoint.path, f"VAE: {exc}") from None
        vae = materialize(_build_on_meta(lambda: AutoencoderKL(config)), checkpoint, prefix,
                          options.dtype_policy.dtype_for(VAE), "VAE", (vae_attention_linear_to_conv(),))
    vae.eval()
    device = options.load_device or options.dtype_policy.device
    return VaePatcher(vae, load_device=device, offload_device="cpu")
