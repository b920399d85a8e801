"""`load_checkpoint` and `load_vae`: files -> (MODEL, CLIP, VAE) patcher objects.

This module composes the runtime: `checkpoint/` reads the file format (header, tensor reads,
assignment to modules), `families/` says what the file is, `models/`, `text_encoders/` and
`patching/` build the objects. Nothing below imports it.

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

import dataclasses
import logging
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

import torch
from torch import nn

from comfy_core.checkpoint.bulk import DEFAULT_WORKERS, BulkRead
from comfy_core.checkpoint.dtype import TEXT, UNET, VAE, DtypePolicy
from comfy_core.checkpoint.errors import CheckpointError, MissingComponentError, ShapeMismatchError
from comfy_core.checkpoint.header import read_safetensors_header
from comfy_core.checkpoint.materialize import build_on_meta, materialize, stored_requests, tensor_requests
from comfy_core.checkpoint.reader import TORCH_DTYPES, CheckpointFile, LazyStateDict
from comfy_core.families import Detection, Family, FamilyRegistry, default_registry
from comfy_core.models.diffusion import DiffusionModel
from comfy_core.models.ltx_audio_vae import AudioVAEConfigError, is_ltx_audio_vae, load_ltx_audio_vae
from comfy_core.models.storage_cast import FP8_DTYPES, cast_weights_at_run_time, is_scaled_fp8, keep_scaled_fp8
from comfy_core.models.vae import AutoencoderKL, VAEConfig, VAEConfigError
from comfy_core.patching.audio_vae import AudioVaePatcher
from comfy_core.patching.model import ModelPatcher
from comfy_core.patching.vae import VaePatcher
from comfy_core.patching.vae_build import vae_module_from, vae_view  # noqa: F401 -- vae_view: re-exported
from comfy_core.text_encoders import CLIP, ClipTextConfig, build_clip, detect_text_encoders
from comfy_core.text_encoders.errors import TextEncoderError
from comfy_core.text_encoders.towers import reads_as_stored

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

    @property
    def device(self) -> str:
        return self.load_device or self.dtype_policy.device


def load_checkpoint(path: str | Path | Mapping[str, torch.Tensor], options: LoadOptions | None = None, *,
                    registry: FamilyRegistry | None = None,
                    **overrides: Any) -> tuple[ModelPatcher, CLIP | None, VaePatcher | None]:
    """Load a single-file SD1.x / SD2.x / SDXL checkpoint.

    Returns `(model, clip, vae)`: a `ModelPatcher` over a `DiffusionModel`, a CLIP object (or None
    with `output_clip=False`) and a `VaePatcher` over an `AutoencoderKL` (or None with
    `output_vae=False`). Keyword overrides set `LoadOptions` fields, e.g.
    `load_checkpoint(p, prediction="v")`. Raises `CheckpointError` subclasses naming the file.
    """
    options = options or LoadOptions()
    if overrides:
        options = LoadOptions(**{**options.__dict__, **overrides})
    registry = registry or default_registry()
    started = time.perf_counter()
    policy = options.dtype_policy
    with CheckpointFile(path) as checkpoint:
        detection = registry.detect(checkpoint.tensors, checkpoint.path, checkpoint.metadata)
        family = detection.family
        prediction = resolve_prediction(checkpoint, family, options.prediction)
        # A diffusion model shipped in fp8 (Flux's "fp8" single files) stays fp8 and computes in
        # the device's UNet dtype, as ComfyUI keeps a file's fp8 weight dtype.
        shipped_fp8 = stored_fp8_dtype(checkpoint.tensors, family.unet_prefix) if policy.unet is None else None
        if policy.unet is None:  # the device's default for this family and file, fixed for the whole load
            chosen = shipped_fp8 or family_unet_dtype(policy, family, checkpoint.tensors)
            options = dataclasses.replace(options, dtype_policy=dataclasses.replace(policy, unet=chosen))
            policy = options.dtype_policy
        # Everything that can be refused from the header is checked before any data is read.
        vae_config = _vae_config(checkpoint, family) if options.output_vae else None
        clip_configs = _clip_configs(checkpoint, family) if options.output_clip else None
        requests = tensor_requests(checkpoint, family.unet_prefix, policy.dtype_for(UNET))
        if vae_config is not None:
            requests.update(tensor_requests(checkpoint, family.vae_prefix, policy.dtype_for(VAE)))
        for config in clip_configs or ():
            # fp8 T5 and Qwen3 towers stay as stored (comfy_core/text_encoders/towers.py)
            if reads_as_stored(config):
                requests.update(stored_requests(checkpoint, config.prefix))
            else:
                requests.update(tensor_requests(checkpoint, config.prefix, policy.dtype_for(TEXT)))
        with BulkRead(checkpoint, requests, zero_copy=options.mmap, workers=options.io_workers) as reading:
            # The modules are built (on the meta device) while the workers read the file.
            unet = _build_unet(checkpoint, detection)
            build_vae = family.components.build_vae if family.components is not None else AutoencoderKL
            vae_module = build_on_meta(lambda: build_vae(vae_config)) if vae_config is not None else None
            clip = _load_clip(checkpoint, family, clip_configs, options, reading) if clip_configs else None
            model = _load_model(checkpoint, family, unet, prediction, options, reading.result())
            vae = _load_vae(checkpoint, family, vae_module, options, reading.result()) if vae_module else None
    if shipped_fp8 is not None:
        compute = DtypePolicy(device=policy.device, device_facts=policy.device_facts).dtype_for(
            UNET, supported=family.inference_dtypes)
        if is_scaled_fp8(checkpoint.tensors, family.unet_prefix):
            # ComfyUI's scaled_fp8_ops, as UNETLoader: the fp8 weights stay as stored with their
            # scales applied per call; the layers it does not scale (norms, convolutions) are
            # re-read from the file in the compute dtype.
            keep_scaled_fp8(model.model.diffusion_model, checkpoint.tensors, checkpoint.read, family.unet_prefix,
                            fp8_matrix_mult=None, other_dtype=compute)
        cast_weights_at_run_time(model.model.diffusion_model)
        model.model.manual_cast_dtype = compute
    log.info("loaded %s in %.2fs: %s, %s-prediction, unet %s, vae %s", checkpoint.path.name,
             time.perf_counter() - started, family.display_name, prediction,
             options.dtype_policy.dtype_for(UNET), options.dtype_policy.dtype_for(VAE))
    warn_if_emulated_bf16(options.dtype_policy.dtype_for(UNET), options.device)
    return model, clip, vae


def cpu_has_native_bf16() -> bool:
    """AVX512-BF16 or AMX: bf16 matrix work in hardware (else oneDNN emulates it, many times
    slower than float32: bench/cpu_precision.py)."""
    probes = (getattr(torch.cpu, "_is_avx512_bf16_supported", None), getattr(torch.cpu, "_is_amx_tile_supported", None))
    return any(probe is not None and probe() for probe in probes)


def warn_if_emulated_bf16(dtype: torch.dtype, device: str | torch.device) -> bool:
    """Log once per load that a bf16 UNet on a CPU without native bf16 only saves memory; True if so."""
    if dtype != torch.bfloat16 or torch.device(device).type != "cpu" or cpu_has_native_bf16():
        return False
    log.warning("bf16 UNet on a CPU without native bf16 (no AVX512-BF16/AMX): it runs emulated, several "
                "times slower than float32; it only saves memory (bench/cpu_precision.py measures it)")
    return True


def stored_dtype(tensors: Mapping[str, Any], prefix: str) -> torch.dtype | None:
    """The dtype most of the values under `prefix` are stored in, or None (header only). Counted by
    elements, as today's ComfyUI's `comfy.utils.weight_dtype`: an fp8 file whose many small
    biases and norms stay bf16 (Qwen-Image, Z-Image) is an fp8 file, not a bf16 one."""
    counts: dict[str, int] = {}
    for name, info in tensors.items():
        if name.startswith(prefix):
            numel = 1
            for size in info.shape:
                numel *= int(size)
            counts[str(info.dtype)] = counts.get(str(info.dtype), 0) + numel
    if not counts:
        return None
    return TORCH_DTYPES.get(max(counts, key=counts.get))


def stored_fp8_dtype(tensors: Mapping[str, Any], prefix: str) -> torch.dtype | None:
    """The fp8 dtype most floating tensors under `prefix` are stored in, or None (header only)."""
    dtype = stored_dtype(tensors, prefix)
    return dtype if dtype in FP8_DTYPES else None


def family_unet_dtype(policy: DtypePolicy, family: Family, tensors: Mapping[str, Any]) -> torch.dtype:
    """The UNet dtype `policy` gives `family` for a file storing `tensors`: the family's inference
    dtypes in its order, fp16 first when the file stores fp16 (ComfyUI's `unet_dtype`); on the
    CPU float32 whatever the family."""
    return policy.dtype_for(UNET, supported=family.inference_dtypes,
                            weight_dtype=stored_dtype(tensors, family.unet_prefix))


def resolve_prediction(checkpoint: CheckpointFile, family: Family, explicit: str | None) -> str:
    """Explicit option, then file metadata, then the family's look at the weights, then its default.
    Flow-matching families have one parametrisation (the velocity): theirs."""
    if family.sampling.schedule != "discrete":
        if explicit is not None and explicit != family.sampling.prediction:
            raise CheckpointError(checkpoint.path, f"{family.display_name} is a flow-matching model: prediction "
                                                   f"{explicit!r} does not apply")
        return family.sampling.prediction
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


def _build_unet(checkpoint: CheckpointFile, detection: Detection) -> nn.Module:
    config = detection.unet_config
    if config is None:
        raise MissingComponentError(checkpoint.path, "no UNet in the file; load the diffusion model separately")
    components = detection.family.components
    build = components.build_unet if components is not None else detection.family.architecture.build
    return build_on_meta(lambda: build(config))


def _load_model(checkpoint: CheckpointFile, family: Family, unet: nn.Module, prediction: str,
                options: LoadOptions, loaded: Mapping[str, torch.Tensor]) -> ModelPatcher:
    unet = materialize(unet, checkpoint, family.unet_prefix, options.dtype_policy.dtype_for(UNET), "UNet",
                       family.key_conversions, zero_copy=options.mmap, workers=options.io_workers, loaded=loaded)
    return model_from_unet(checkpoint, family, unet, prediction, options)


def model_from_unet(checkpoint: CheckpointFile, family: Family, unet: nn.Module, prediction: str,
                    options: LoadOptions) -> ModelPatcher:
    """A loaded UNet -> `ModelPatcher` over the family's `DiffusionModel` (its sampling, latent
    format, ADM), as every diffusion-model loader wraps it."""
    zsnr = family.zsnr_marker is not None and family.zsnr_marker in checkpoint.tensors
    if family.components is not None:
        model = family.components.build_model(unet, family, prediction, zsnr)
    else:
        sampling = family.sampling.model_sampling(prediction, zsnr)
        model = DiffusionModel(unet, sampling, family.latent_format, family=family)
    model.eval()
    return ModelPatcher(model, load_device=options.device, offload_device="cpu")


def _vae_config(checkpoint: CheckpointFile, family: Family) -> VAEConfig:
    """The VAE's config from the header; typed errors when it is absent or does not fit the family."""
    if not any(k.startswith(family.vae_prefix) for k in checkpoint.tensors):
        raise MissingComponentError(checkpoint.path, f"no VAE in the file (no tensors under {family.vae_prefix!r}); "
                                                     "load one with VAELoader")
    try:
        detect = family.components.vae_config if family.components is not None else VAEConfig.detect_from_weights
        config = detect(checkpoint.tensors, family.vae_prefix)
    except VAEConfigError as exc:
        raise ShapeMismatchError(checkpoint.path, f"VAE: {exc}") from None
    if config.downscale != family.geometry.downscale or config.embed_dim != family.geometry.latent_channels:
        raise ShapeMismatchError(
            checkpoint.path, f"VAE downscales {config.downscale}x to {config.embed_dim} channels; "
                             f"{family.display_name} needs {family.geometry.downscale}x and "
                             f"{family.geometry.latent_channels} channels")
    return config


def _load_vae(checkpoint: CheckpointFile, family: Family, vae: AutoencoderKL, options: LoadOptions,
              loaded: Mapping[str, torch.Tensor]) -> VaePatcher:
    vae = materialize(vae, checkpoint, family.vae_prefix, options.dtype_policy.dtype_for(VAE), "VAE",
                      family.key_conversions, zero_copy=options.mmap, workers=options.io_workers, loaded=loaded)
    vae.eval()
    return VaePatcher(vae, load_device=options.device, offload_device="cpu")


TOKENIZER_ROOT = "text_encoders."
CARRIED_TOKENIZERS = ("spiece_model", "tekken_model")  # ComfyUI tokenizers' state_dict keys


def _clip_configs(checkpoint: CheckpointFile, family: Family) -> list[Any]:
    """The text encoders' configs from the header (under the family's prefixes); a typed error
    when they are malformed. A file without its text encoders (SD3.5 and Flux diffusion-model
    releases) gives none: the CLIP output is None, as ComfyUI's loader warns and returns."""
    if family.text_encoders is None:
        raise MissingComponentError(checkpoint.path, f"{family.display_name} files carry no text encoder")
    try:
        configs = detect_text_encoders(checkpoint.tensors, [family.text_encoders])
    except TextEncoderError as exc:
        raise ShapeMismatchError(checkpoint.path, f"text encoder: {exc}") from None
    if not configs:
        log.warning("%s: no text encoder weights in the file; no CLIP is loaded (load one with a CLIP loader)",
                    checkpoint.path.name)
    return configs


def _load_clip(checkpoint: CheckpointFile, family: Family, configs: list[ClipTextConfig], options: LoadOptions,
               reading: BulkRead) -> CLIP:
    dtype = options.dtype_policy.dtype_for(TEXT)
    # build_clip builds its encoders on meta before it reads a tensor: the first read waits for
    # `reading`; keys outside the requests (none today) would be read on access.
    state = LazyStateDict(checkpoint, dtype, pending=reading)
    # ComfyUI's `tokenizer_data` (its loader hands the whole text-encoder state dict on): a tokenizer
    # the file carries, saved by ComfyUI's CLIP.get_sd under the text encoders' root
    # (`text_encoders.spiece_model`: Lumina 2's Gemma SentencePiece model; `text_encoders.tekken_model`:
    # FLUX.2 dev's Mistral tekken.json).
    tokenizer_data = {key: checkpoint.read(TOKENIZER_ROOT + key, None) for key in CARRIED_TOKENIZERS
                      if TOKENIZER_ROOT + key in checkpoint.tensors}
    try:
        return build_clip(configs, state, dtype, load_device=options.device, offload_device="cpu",
                          spec=family.text_encoders, tokenizer_data=tokenizer_data)
    except TextEncoderError as exc:
        raise ShapeMismatchError(checkpoint.path, f"text encoder: {exc}") from None


def load_vae(path: str | Path | Mapping[str, torch.Tensor], options: LoadOptions | None = None) -> VaePatcher:
    """A standalone VAE file, or a state dict in memory (keys `encoder.*`/`decoder.*`, or a
    checkpoint's `first_stage_model.*`, or diffusers' `AutoencoderKL` names) -> `VaePatcher` over
    an `AutoencoderKL`. Raises `CheckpointError` subclasses naming the file.

    An LTX-2 audio VAE file (ComfyUI's `comfy.sd.VAE` detects its vocoder) becomes an
    `AudioVaePatcher` (comfy_core/patching/audio_vae.py), float32 as ComfyUI runs it."""
    options = options or LoadOptions()
    audio = _ltx_audio_vae(path, options)
    if audio is not None:
        return audio
    vae = vae_module_from(path, options.dtype_policy.dtype_for(VAE), mmap=options.mmap, workers=options.io_workers)
    return VaePatcher(vae, load_device=options.device, offload_device="cpu")


def _ltx_audio_vae(path: Any, options: LoadOptions) -> VaePatcher | None:
    """The LTX audio VAE of a `.safetensors` file whose names say it holds one, else None."""
    if isinstance(path, Mapping) or not str(path).endswith(".safetensors"):
        return None
    try:
        names = read_safetensors_header(Path(path)).tensors.keys()
    except CheckpointError:  # unreadable here: the generic path reports it with its own error
        return None
    if not is_ltx_audio_vae(names):
        return None
    try:
        model = load_ltx_audio_vae(path)
    except AudioVAEConfigError as exc:
        raise ShapeMismatchError(path, f"LTX audio VAE: {exc}") from None
    return AudioVaePatcher(model, load_device=options.device, offload_device="cpu")
