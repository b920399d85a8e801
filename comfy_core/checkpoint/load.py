"""`load_checkpoint`: a single-file checkpoint -> (MODEL, CLIP, VAE) patcher objects.

Steps: read the header (no tensor data), detect the family (`FamilyRegistry.detect`), resolve the
prediction type (explicit option > `modelspec.prediction_type` metadata > the family's read of
weights > the family default), then build each component on the meta device -- no default
weight initialisation, no memory -- and assign it its tensors (`load_state_dict(assign=True)`)
as `bulk.load_tensors` delivers them: tensors kept in their stored dtype are zero-copy views of
the file's copy-on-write memory map, cast ones are converted in one pass from the map into fresh
memory, all read in parallel. So loading costs about one read of the file, and peak memory stays
near one copy of the weights (`LoadOptions.mmap=False` copies every tensor into process memory).
"""
from __future__ import annotations

import itertools
import logging
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping

import torch
from torch import nn

from comfy_core.checkpoint.bulk import DEFAULT_WORKERS, BulkRead, load_tensors
from comfy_core.checkpoint.dtype import TEXT, UNET, VAE, DtypePolicy
from comfy_core.checkpoint.errors import CheckpointError, MissingComponentError, ShapeMismatchError
from comfy_core.checkpoint.keys import KeyConversion, find_conversion, strip_prefix
from comfy_core.checkpoint.reader import TORCH_DTYPES, CheckpointFile, LazyStateDict

log = logging.getLogger(__name__)

# Values of the `modelspec.prediction_type` metadata key (Stability's ModelSpec) we understand.
_METADATA_PREDICTIONS = {"epsilon": "eps", "eps": "eps", "v": "v", "v_prediction": "v", "v-prediction": "v"}


@dataclass(frozen=True)
class LoadOptions:
    """What to load and how. `prediction` forces "eps" or "v" (e.g. an SD2-768 file whose
    weights the heuristic misreads). `mmap`: weights kept in their stored dtype are copy-on-write
    views of the file mapping (no copy; the default, as safetensors and ComfyUI do); False copies
    them into process memory. `io_workers`: threads reading the file (several reads in flight
    keep a disk busier than one)."""

    dtype_policy: DtypePolicy = DtypePolicy()
    prediction: str | None = None
    output_vae: bool = True
    output_clip: bool = True
    load_device: str | None = None
    mmap: bool = True
    io_workers: int = DEFAULT_WORKERS

    def __post_init__(self) -> None:
        if not isinstance(self.io_workers, int) or isinstance(self.io_workers, bool) or self.io_workers < 1:
            raise ValueError(f"LoadOptions.io_workers: expected an int >= 1, got {self.io_workers!r}")


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
    policy = options.dtype_policy
    with CheckpointFile(path) as checkpoint:
        detection = registry.detect(checkpoint.tensors, checkpoint.path)
        family = detection.family
        prediction = resolve_prediction(checkpoint, family, options.prediction)
        # Everything that can be refused from the header is checked before any data is read.
        vae_config = _vae_config(checkpoint, family) if options.output_vae else None
        clip_configs = _clip_configs(checkpoint) if options.output_clip else None
        requests = tensor_requests(checkpoint, family.unet_prefix, policy.dtype_for(UNET))
        if vae_config is not None:
            requests.update(tensor_requests(checkpoint, family.vae_prefix, policy.dtype_for(VAE)))
        for config in clip_configs or ():
            requests.update(tensor_requests(checkpoint, config.prefix, policy.dtype_for(TEXT)))
        with BulkRead(checkpoint, requests, zero_copy=options.mmap, workers=options.io_workers) as reading:
            # The modules are built (on the meta device) while the workers read the file.
            unet = _build_unet(detection)
            vae_module = _build_vae(vae_config) if vae_config is not None else None
            clip = _load_clip(checkpoint, clip_configs, options, reading) if clip_configs else None
            model = _load_model(checkpoint, family, unet, prediction, options, reading.result())
            vae = _load_vae(checkpoint, family, vae_module, options, reading.result()) if vae_module else None
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


def tensor_requests(checkpoint: CheckpointFile, prefix: str, dtype: torch.dtype) -> dict[str, torch.dtype]:
    """`{name: dtype to load it in}` for every tensor under `prefix`: floating ones in `dtype`,
    the others as stored."""
    return {name: dtype if TORCH_DTYPES[info.dtype].is_floating_point else TORCH_DTYPES[info.dtype]
            for name, info in checkpoint.tensors.items() if name.startswith(prefix)}


def materialize(module: nn.Module, checkpoint: CheckpointFile, prefix: str, dtype: torch.dtype,
                component: str, conversions: Iterable[KeyConversion] = (), *, zero_copy: bool = True,
                workers: int = DEFAULT_WORKERS, loaded: Mapping[str, torch.Tensor] | None = None) -> nn.Module:
    """Give `module` (built on the meta device) the tensors under `prefix`, by assignment.

    Every parameter and buffer must have a tensor of the same shape (or one a `conversions` entry
    explains); tensors under the prefix that the module does not use are logged. Floating tensors
    are stored in `dtype`; those already in it are views of the file mapping when `zero_copy`.
    `loaded`: tensors already read (e.g. by a `BulkRead` started before the module was built);
    the others are read here.
    """
    conversions = tuple(conversions)
    expected = module.state_dict()  # name -> meta tensor (shape, dtype)
    stored = strip_prefix(checkpoint.tensors, prefix)
    missing = sorted(set(expected) - set(stored))
    if missing:
        raise ShapeMismatchError(
            checkpoint.path, f"{component}: {len(missing)} tensors missing under {prefix!r}, e.g. "
                             f"{', '.join(prefix + m for m in missing[:5])}")
    plan: dict[str, KeyConversion | None] = {}
    for name, meta in expected.items():
        shape = tuple(meta.shape)
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
    wanted = {name: dtype if meta.is_floating_point() else meta.dtype for name, meta in expected.items()}
    loaded = dict(loaded or {})
    todo = {stored[name]: wanted[name] for name in expected if stored[name] not in loaded}
    if todo:
        loaded.update(load_tensors(checkpoint, todo, zero_copy=zero_copy, workers=workers))
    state = {}
    for name, meta in expected.items():
        tensor = loaded[stored[name]]
        if tensor.dtype != wanted[name]:  # read for another use in another dtype: cast now
            tensor = tensor.to(wanted[name])
        conversion = plan[name]
        state[name] = tensor if conversion is None else conversion.convert(tensor, tuple(meta.shape))
    module.load_state_dict(state, strict=True, assign=True)
    # A tensor outside the state dict (a non-persistent buffer) would still be on meta: that is a
    # module the loader cannot fill, so say so rather than fail at the first forward.
    left = [n for n, t in itertools.chain(module.named_parameters(), module.named_buffers()) if t.is_meta]
    if left:
        raise ShapeMismatchError(checkpoint.path, f"{component}: {len(left)} module tensors have no checkpoint "
                                                  f"tensor (not in its state dict), e.g. {', '.join(left[:5])}")
    return module


def _build_on_meta(factory: Callable[[], nn.Module]) -> nn.Module:
    with torch.device("meta"):
        return factory()


def _build_unet(detection: Any) -> nn.Module:
    from comfy_core.models.unet import UNetModel

    return _build_on_meta(lambda: UNetModel(detection.unet_config))


def _build_vae(config: Any) -> nn.Module:
    from comfy_core.models.vae import AutoencoderKL

    return _build_on_meta(lambda: AutoencoderKL(config))


def _load_model(checkpoint: CheckpointFile, family: Any, unet: nn.Module, prediction: str, options: LoadOptions,
                loaded: Mapping[str, torch.Tensor]) -> Any:
    from comfy_core.models.diffusion import DiffusionModel
    from comfy_core.patching.model import ModelPatcher
    from comfy_core.sampling.model_sampling import ModelSampling

    unet = materialize(unet, checkpoint, family.unet_prefix, options.dtype_policy.dtype_for(UNET), "UNet",
                       family.key_conversions, zero_copy=options.mmap, workers=options.io_workers, loaded=loaded)
    zsnr = family.zsnr_marker is not None and family.zsnr_marker in checkpoint.tensors
    sampling = ModelSampling(prediction, linear_start=family.sampling.linear_start,
                             linear_end=family.sampling.linear_end, timesteps=family.sampling.timesteps, zsnr=zsnr)
    model = DiffusionModel(unet, sampling, family.latent_format, family=family, adm=family.adm)
    model.eval()
    device = options.load_device or options.dtype_policy.device
    return ModelPatcher(model, load_device=device, offload_device="cpu")


def _vae_config(checkpoint: CheckpointFile, family: Any) -> Any:
    """The VAE's config from the header; typed errors when it is absent or does not fit the family."""
    from comfy_core.models.vae import VAEConfig, VAEConfigError

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
    return config


def _load_vae(checkpoint: CheckpointFile, family: Any, vae: nn.Module, options: LoadOptions,
              loaded: Mapping[str, torch.Tensor]) -> Any:
    from comfy_core.patching.vae import VaePatcher

    vae = materialize(vae, checkpoint, family.vae_prefix, options.dtype_policy.dtype_for(VAE), "VAE",
                      family.key_conversions, zero_copy=options.mmap, workers=options.io_workers, loaded=loaded)
    vae.eval()
    device = options.load_device or options.dtype_policy.device
    return VaePatcher(vae, load_device=device, offload_device="cpu")


def _clip_configs(checkpoint: CheckpointFile) -> list[Any]:
    """The text encoders' configs from the header; typed errors when there are none or they are malformed."""
    from comfy_core.text_encoders import detect_text_encoders
    from comfy_core.text_encoders.errors import TextEncoderError

    try:
        configs = detect_text_encoders(checkpoint.tensors)
    except TextEncoderError as exc:
        raise ShapeMismatchError(checkpoint.path, f"text encoder: {exc}") from None
    if not configs:
        raise MissingComponentError(checkpoint.path, "no text encoder in the file; load one with a CLIP loader")
    return configs


def _load_clip(checkpoint: CheckpointFile, configs: list[Any], options: LoadOptions, reading: BulkRead) -> Any:
    from comfy_core.text_encoders import build_clip
    from comfy_core.text_encoders.errors import TextEncoderError

    dtype = options.dtype_policy.dtype_for(TEXT)
    device = options.load_device or options.dtype_policy.device
    # build_clip builds its encoders on meta before it reads a tensor: the first read waits for
    # `reading`; keys outside the requests (none today) would be read on access.
    state = LazyStateDict(checkpoint, dtype, pending=reading)
    try:
        return build_clip(configs, state, dtype, load_device=device, offload_device="cpu")
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
                          options.dtype_policy.dtype_for(VAE), "VAE", (vae_attention_linear_to_conv(),),
                          zero_copy=options.mmap, workers=options.io_workers)
    vae.eval()
    device = options.load_device or options.dtype_policy.device
    return VaePatcher(vae, load_device=device, offload_device="cpu")
