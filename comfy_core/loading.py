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

The diffusion model's stored form follows one rule for this loader and UNETLoader
(`comfy_core.split.load_diffusion_model`): `QuantizedUnet`, `unet_storage`, `finish_unet` below
(ComfyUI's quantised layers kept as stored with their scales, legacy scaled fp8, fp8 files kept fp8).
"""
from __future__ import annotations

import dataclasses
import logging
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping

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
from comfy_core.models.quant_linear import attach_quantized, detach_quantized_weights
from comfy_core.models.rtdetr import is_rtdetr, load_detection_model
from comfy_core.models.sam3.load import is_sam3_file, load_sam3_network
from comfy_core.models.storage_cast import (FP8_DTYPES, SCALED_FP8_MARKER, cast_weights_at_run_time, is_scaled_fp8,
                                            keep_scaled_fp8, marker_optimizations, scaled_storage_dtype)
from comfy_core.models.vae import AutoencoderKL, VAEConfig, VAEConfigError
from comfy_core.patching.audio_vae import AudioVaePatcher
from comfy_core.patching.model import ModelPatcher
from comfy_core.patching.vae import STATE_DICT_KINDS, VaePatcher
from comfy_core.patching.vae_build import vae_module_from, vae_view  # noqa: F401 -- vae_view: re-exported
from comfy_core.text_encoders import CLIP, ClipTextConfig, build_clip, detect_text_encoders
from comfy_core.text_encoders.decoder_llm import with_quantization_metadata
from comfy_core.text_encoders.errors import TextEncoderError
from comfy_core.text_encoders.towers import reads_as_stored
from comfy_core.text_encoders.sam3_clip import load_sam3_clip
from comfy_core.weights.quant_registry import QuantFormatError, QuantizedHeader, QuantizedLayer, quantized_layers

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
        auxiliary = auxiliary_network(checkpoint, CHECKPOINT_LOADER)
        if auxiliary is not None:
            model, clip = auxiliary.load(checkpoint, policy, None, load_device=options.device,
                                         with_clip=options.output_clip)
            return model, clip, None
        # ComfyUI's quantised layers (`comfy_quant` / `_quantization_metadata`) are detected as their
        # float original; the diffusion model's are then held as UNETLoader holds them.
        quantized = QuantizedUnet.of(checkpoint)
        detection = registry.detect(quantized.detection, checkpoint.path, checkpoint.metadata)
        family = detection.family
        quantized = quantized.under(family.unet_prefix)
        view = quantized.loading  # the file without the diffusion model's quantised tensors
        prediction = resolve_prediction(checkpoint, family, options.prediction)
        # The diffusion model's storage and compute dtypes, by UNETLoader's rule (`unet_storage`).
        storage = unet_storage(view, family, policy)
        options = dataclasses.replace(options, dtype_policy=dataclasses.replace(policy, unet=storage.storage))
        policy = options.dtype_policy
        # Everything that can be refused from the header is checked before any data is read.
        builtin = family.builtin_parts  # parts the files do not store (a pixel-space VAE, a tokenizer-only CLIP)
        builtin_vae = builtin is not None and builtin.vae is not None
        builtin_clip = builtin is not None and builtin.clip is not None
        vae_config = _vae_config(checkpoint, family) if options.output_vae and not builtin_vae else None
        clip_configs = _clip_configs(checkpoint, family) if options.output_clip and not builtin_clip else None
        requests = tensor_requests(view, family.unet_prefix, policy.dtype_for(UNET))
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
            quantized.detach(unet, family.unet_prefix)
            build_vae = family.components.build_vae if family.components is not None else AutoencoderKL
            vae_module = build_on_meta(lambda: build_vae(vae_config)) if vae_config is not None else None
            clip = _load_clip(checkpoint, family, clip_configs, options, reading) if clip_configs else None
            model = _load_model(view, family, unet, prediction, options, reading.result())
            finish_unet(model, storage, quantized, family.unet_prefix)
            vae = _load_vae(checkpoint, family, vae_module, options, reading.result()) if vae_module else None
            if options.output_vae and builtin_vae:
                vae = VaePatcher(builtin.vae(), load_device=options.device, offload_device="cpu")
            if options.output_clip and builtin_clip:
                clip = builtin.clip(options.device, "cpu")
    log.info("loaded %s in %.2fs: %s, %s-prediction, unet %s, vae %s", checkpoint.path.name,
             time.perf_counter() - started, family.display_name, prediction,
             options.dtype_policy.dtype_for(UNET), options.dtype_policy.dtype_for(VAE))
    warn_if_emulated_bf16(storage.compute or storage.storage, options.device)
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


# --- The diffusion model's stored form: one rule for CheckpointLoaderSimple and UNETLoader ---
#
# Today's ComfyUI reads both loaders' diffusion models the same way (comfy/sd.py
# `load_state_dict_guess_config` and `load_diffusion_model_state_dict` both call comfy/utils.py
# `convert_old_quants` under the diffusion model's prefix, then `model_config_from_unet` with its
# `quant_config`, `unet_dtype` and `unet_manual_cast`): ComfyUI's quantised layers stay as stored
# with their scales, a legacy scaled-fp8 file keeps its fp8 weights with theirs, a file shipped in
# fp8 stays fp8 and computes in the device's dtype. `QuantizedUnet`, `unet_storage` and
# `finish_unet` are that rule; `load_checkpoint` and `comfy_core.split.load_diffusion_model` call them.


@dataclass(frozen=True)
class QuantizedUnet:
    """A file's ComfyUI-quantised layers (`comfy_quant` tensors or the `_quantization_metadata`
    header, comfy_core/weights/quant_registry.py) and the views the loaders read it through:
    `detection`, the header names as family detection sees them (each quantised weight at its
    float shape, its scales hidden); `loading`, the file without the quantised layers' tensors
    (they are attached as stored by `finish_unet`); `base`, the file itself. `layers` holds every
    quantised layer of the file until `under(prefix)` keeps the diffusion model's: the text
    encoders of an all-in-one file read their own quantised layers (comfy_core/text_encoders)."""

    base: Any
    layers: Mapping[str, QuantizedLayer]
    detection: Mapping[str, Any]
    loading: Any

    @classmethod
    def of(cls, view: Any) -> "QuantizedUnet":
        layers = find_quantized_layers(view)
        if not layers:
            return cls(view, {}, view.tensors, view)
        return cls(view, layers, QuantizedHeader.for_detection(view, layers).tensors,
                   QuantizedHeader.for_loading(view, layers))

    def under(self, prefix: str) -> "QuantizedUnet":
        """Only the layers under `prefix` (the detected family's diffusion model)."""
        layers = {name: layer for name, layer in self.layers.items() if name.startswith(prefix)}
        if len(layers) == len(self.layers):
            return self
        loading = QuantizedHeader.for_loading(self.base, layers) if layers else self.base
        return QuantizedUnet(self.base, layers, self.detection, loading)

    def detach(self, unet: nn.Module, prefix: str) -> None:
        """Before the UNet (on meta) is materialised: its quantised layers' weights leave its state dict."""
        if self.layers:
            _quantized_step(self.base.path, detach_quantized_weights, unet, self.layers, prefix)


def find_quantized_layers(view: Any) -> dict[str, QuantizedLayer]:
    """The quantised layers of a file or view, by its names (`comfy_core.weights.quant_registry`);
    a malformed description is the file's `ShapeMismatchError`."""
    stored_name = getattr(view, "stored_name", None)
    ours = {stored_name(n): n for n in view.tensors} if stored_name is not None else None
    try:
        return quantized_layers(view.tensors, view.metadata, view.read,
                                (lambda stored: ours.get(stored)) if ours is not None else (lambda stored: stored))
    except QuantFormatError as exc:
        raise ShapeMismatchError(view.path, str(exc)) from None


def _quantized_step(path: Path, step: Any, *args: Any) -> Any:
    """`step(*args)` with a malformed quantised layer reported as the file's `ShapeMismatchError`."""
    try:
        return step(*args)
    except QuantFormatError as exc:
        raise ShapeMismatchError(path, str(exc)) from None


def compute_dtype(policy: DtypePolicy, storage: torch.dtype, family: Any = None) -> torch.dtype | None:
    """The dtype a UNet stored in `storage` computes in, or None for its own (ComfyUI's
    `unet_manual_cast`: fp8 storage computes in the device's default UNet dtype for the family)."""
    if storage not in FP8_DTYPES:
        return None
    supported = getattr(family, "inference_dtypes", None)
    return DtypePolicy(device=policy.device, device_facts=policy.device_facts).dtype_for(UNET, supported=supported)


@dataclass(frozen=True)
class ScaledFp8Plan:
    """How a scaled-fp8 file is held (ComfyUI's `scaled_fp8_ops` with `model_config.scaled_fp8`):
    linear layers in the marker's fp8 dtype (`storage`, what the file is read in), the other
    tensors in `other` (ComfyUI's unet_dtype: the `weight_dtype` asked, else the device's), all
    computed in `compute`; `fp8_matrix_mult`: the marker's fp8 optimisations or fp8_e4m3fn_fast."""

    storage: torch.dtype
    other: torch.dtype
    compute: torch.dtype
    fp8_matrix_mult: bool


def scaled_fp8_plan(view: Any, family: Any, policy: DtypePolicy, weight_dtype: torch.dtype | None,
                    fp8_optimizations: bool) -> ScaledFp8Plan | None:
    """The plan for a scaled-fp8 file (its `scaled_fp8` marker under the family's prefix), else None.
    The scales stay separate: the fp8 weights are used as stored (zero-copy from the mapping)."""
    if not is_scaled_fp8(view.tensors, family.unet_prefix):
        return None
    marker = view.read(family.unet_prefix + SCALED_FP8_MARKER)
    storage = scaled_storage_dtype(marker)
    default = compute_dtype(policy, storage, family)
    other = weight_dtype or policy.unet or default
    compute = default if other in FP8_DTYPES else other
    return ScaledFp8Plan(storage, other, compute, fp8_optimizations or marker_optimizations(marker))


@dataclass(frozen=True)
class UnetStorage:
    """The dtypes a file's diffusion model is read in (`storage`) and computed in (`compute`, None:
    its storage dtype), its scaled-fp8 plan if any, and whether fp8 matrix products were asked."""

    storage: torch.dtype
    compute: torch.dtype | None
    scaled: ScaledFp8Plan | None
    fp8_optimizations: bool = False


def unet_storage(view: Any, family: Family, policy: DtypePolicy, weight_dtype: torch.dtype | None = None,
                 fp8_optimizations: bool = False) -> UnetStorage:
    """The stored form of `view`'s diffusion model (`view`: the file without its quantised layers'
    tensors, `QuantizedUnet.loading`). `weight_dtype` as asked (UNETLoader's), else the policy's;
    with neither, a file shipped in fp8 stays fp8 (ComfyUI keeps a file's fp8 dtype), else the
    family's dtype for the device. A scaled-fp8 file follows its marker (`scaled_fp8_plan`)."""
    shipped = stored_fp8_dtype(view.tensors, family.unet_prefix) if policy.unet is None else None
    storage = weight_dtype or shipped or family_unet_dtype(policy, family, view.tensors)
    compute = compute_dtype(policy, storage, family)
    scaled = scaled_fp8_plan(view, family, policy, weight_dtype, fp8_optimizations)
    if scaled is not None:
        storage, compute = scaled.storage, scaled.compute
    return UnetStorage(storage, compute, scaled, fp8_optimizations)


def finish_unet(model: ModelPatcher, storage: UnetStorage, quantized: QuantizedUnet, prefix: str) -> None:
    """After the UNet's other tensors are loaded (from `quantized.loading`): the scaled-fp8 layers
    take their scales (`keep_scaled_fp8`), the quantised layers their stored weights and scales
    (`attach_quantized`), and an fp8-stored or quantised model computes in its compute dtype, each
    layer casting its weights per call (`cast_weights_at_run_time`). The file must still be open."""
    unet = model.model.diffusion_model
    view = quantized.loading
    if storage.scaled is not None:
        keep_scaled_fp8(unet, view.tensors, view.read, prefix, fp8_matrix_mult=storage.scaled.fp8_matrix_mult,
                        other_dtype=storage.scaled.other)
    runs_in = storage.compute or storage.storage
    if quantized.layers:
        base = quantized.base
        _quantized_step(base.path, attach_quantized, unet, quantized.layers, base.tensors, base.read_stored, prefix,
                        runs_in)
        if model.model.get_dtype() != runs_in:  # the output layer may be quantised
            model.model.manual_cast_dtype = runs_in
    if storage.compute is not None:
        cast_weights_at_run_time(unet, fp8_matrix_mult=storage.fp8_optimizations)
        model.model.manual_cast_dtype = storage.compute


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
        attach = getattr(family.components, "attach", None)  # parts of the model outside the UNet's prefix
        if attach is not None:
            attach(model, lambda name: checkpoint.read(name, torch.float32), checkpoint.tensors.keys())
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
    wrap = getattr(family.components, "vae_patcher", None)  # a family's own VAE object (an audio VAE)
    if wrap is not None:
        return wrap(vae, options.device, "cpu")
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
    # Layers the `_quantization_metadata` header describes (by the file's names) are served as their
    # `comfy_quant` tensors, as ComfyUI's `convert_old_quants` puts every described layer into the
    # state dict the text encoders read (the diffusion model's are `QuantizedUnet`'s).
    state = with_quantization_metadata(state, checkpoint.metadata)
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


def load_sam3(file: Any, policy: Any = None, weight_dtype: torch.dtype | None = None, *,
              load_device: Any = "cpu", with_clip: bool = True) -> tuple[Any, Any]:
    """An open SAM 3 / 3.1 file -> (MODEL patcher over its network, its text encoder as a CLIP, or
    None without one / when `with_clip` is off), as ComfyUI's checkpoint loader returns them (no
    VAE). One of the `AUXILIARY_NETWORKS`."""
    wrapper = load_sam3_network(file, policy, weight_dtype)
    model = ModelPatcher(wrapper, load_device=load_device, offload_device="cpu")
    clip = load_sam3_clip(file, wrapper.get_dtype(), load_device) if with_clip else None
    return model, clip


def _load_rtdetr(file: Any, policy: Any = None, weight_dtype: torch.dtype | None = None, *,
                 load_device: Any = "cpu", with_clip: bool = True) -> tuple[Any, Any]:
    detector = load_detection_model(file, policy, weight_dtype)
    return ModelPatcher(detector, load_device=load_device, offload_device="cpu"), None


CHECKPOINT_LOADER, DIFFUSION_MODEL_LOADER = "CheckpointLoaderSimple", "UNETLoader"


@dataclass(frozen=True)
class AuxiliaryNetwork:
    """A network ComfyUI's core model loaders load as a MODEL although it is no diffusion family
    (never sampled, so it has no latent format, conditioning or sampling policy): the loaders ask
    `auxiliary_network` before family detection, so such a network is one entry here, not a
    special case in each loader. `load(file, policy, weight_dtype, *, load_device, with_clip)`
    gives `(MODEL patcher, CLIP or None)`; `loaders` names the ComfyUI loaders that take its file."""
    name: str
    claims: Callable[[Any], bool]  # an open CheckpointFile -> whether it is this network's
    load: Callable[..., tuple[Any, Any]]
    loaders: frozenset[str]


AUXILIARY_NETWORKS: tuple[AuxiliaryNetwork, ...] = (
    # RT-DETRv4 detectors: UNETLoader (`models/diffusion_models`), as ComfyUI's templates load them.
    AuxiliaryNetwork("RT-DETRv4", lambda file: is_rtdetr(file), _load_rtdetr, frozenset({DIFFUSION_MODEL_LOADER})),
    # SAM 3 / 3.1: CheckpointLoaderSimple (MODEL + its text encoder) and UNETLoader (MODEL).
    AuxiliaryNetwork("SAM 3", lambda file: is_sam3_file(file.keys()), load_sam3,
                     frozenset({CHECKPOINT_LOADER, DIFFUSION_MODEL_LOADER})),
)


def auxiliary_network(file: Any, loader: str) -> AuxiliaryNetwork | None:
    """The auxiliary network whose file `file` is, when `loader` takes it; None for anything else
    (a diffusion family's file goes on to family detection)."""
    return next((net for net in AUXILIARY_NETWORKS if loader in net.loaders and net.claims(file)), None)


def load_vae(path: str | Path | Mapping[str, torch.Tensor], options: LoadOptions | None = None) -> VaePatcher:
    """A standalone VAE file, or a state dict in memory (keys `encoder.*`/`decoder.*`, or a
    checkpoint's `first_stage_model.*`, or diffusers' `AutoencoderKL` names) -> `VaePatcher` over
    an `AutoencoderKL`. Raises `CheckpointError` subclasses naming the file.

    An LTX-2 audio VAE (a whole LTX-2 checkpoint or the audio VAE alone: ComfyUI's `comfy.sd.VAE`
    detects its vocoder) becomes an `AudioVaePatcher` (comfy_core/patching/audio_vae.py), float32 as
    ComfyUI runs it; a file of another registered kind (the audio VAEs) its own patcher."""
    options = options or LoadOptions()
    default_registry()  # imports the family packages, whose own VAE kinds register in STATE_DICT_KINDS
    names, metadata = _vae_names(path)  # the header once, for both tests below
    if names is not None and not isinstance(path, Mapping) and is_ltx_audio_vae(names):
        return _ltx_audio_vae(path, options)
    if names is not None and any(reads(names) for reads, _kind in STATE_DICT_KINDS):
        return _registered_kind_vae(path, names, metadata, options)
    vae = vae_module_from(path, options.dtype_policy.dtype_for(VAE), mmap=options.mmap, workers=options.io_workers)
    return VaePatcher(vae, load_device=options.device, offload_device="cpu")


def _vae_names(path: Any) -> tuple[Any, Mapping[str, str]]:
    """The tensor names (and metadata) of a state dict or a `.safetensors` file's header; (None, {})
    for another file or an unreadable one (the generic path reports it with its own error)."""
    if isinstance(path, Mapping):
        return path.keys(), {}
    if not str(path).endswith(".safetensors"):
        return None, {}
    try:
        header = read_safetensors_header(Path(path))
    except CheckpointError:
        return None, {}
    return header.tensors.keys(), header.metadata or {}


def _registered_kind_vae(path: Any, names: Any, metadata: Mapping[str, str], options: LoadOptions) -> VaePatcher:
    """A standalone VAE of a kind registered in `STATE_DICT_KINDS` (comfy_core/patching/vae.py: the
    audio VAEs, Stable Audio's / ACE-Step 1.5's Oobleck, Stable Audio 3's, ACE-Step 1's music DCAE),
    built from the file's tensors (`names`) as ComfyUI's `comfy.sd.VAE(sd=...)` builds it (read in
    float32, the kind chooses its dtype)."""
    if isinstance(path, Mapping):
        state: Mapping[str, torch.Tensor] = path
    else:
        with CheckpointFile(path) as checkpoint:
            # floats in float32; integer tensors (int8 weights, `comfy_quant` bytes) as stored
            state = {name: checkpoint.read(name, torch.float32 if checkpoint.read_stored(name).is_floating_point()
                                           else None) for name in names}
    try:
        return VaePatcher(sd=state, load_device=options.device, offload_device="cpu", metadata=metadata)
    except (ValueError, TypeError, RuntimeError) as exc:  # config errors; load_state_dict's size mismatches
        raise ShapeMismatchError(path if not isinstance(path, Mapping) else "<state dict>", str(exc)) from None


def _ltx_audio_vae(path: Any, options: LoadOptions) -> VaePatcher:
    """The LTX audio VAE of a `.safetensors` file whose names say it holds one (a whole LTX-2
    checkpoint or the audio VAE alone: only its audio tensors are read)."""
    try:
        model = load_ltx_audio_vae(path)
    except AudioVAEConfigError as exc:
        raise ShapeMismatchError(path, f"LTX audio VAE: {exc}") from None
    return AudioVaePatcher(model, load_device=options.device, offload_device="cpu")
