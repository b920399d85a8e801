"""`load_diffusion_model`: a diffusion model file on its own -> MODEL (ComfyUI's UNETLoader).

After ComfyUI's `comfy/sd.py: load_diffusion_model_state_dict`. The file may be a bare UNet in
the LDM layout (`input_blocks.0.0.weight`, ...: what ComfyUI's models/diffusion_models holds), a
whole checkpoint (its `model.diffusion_model.*` tensors are used), or a diffusers
`UNet2DConditionModel` (`down_blocks.0.resnets.0.conv1.weight`, ...), whose names are mapped onto
ours (`comfy_core.checkpoint.diffusers_keys`). Whatever the layout, the file is presented under
the single-file names (`comfy_core.checkpoint.renamed.RenamedCheckpoint`) and detected and built
exactly as a checkpoint's UNet is: the family from the UNet's names and shapes
(`FamilyRegistry.detect_diffusion_model`), the prediction type by the single-file rule
(`comfy_core.loading.resolve_prediction`: option, metadata, SD2's one tensor read, default).

`weight_dtype` fp8 (ComfyUI's `model_options["dtype"]`) stores every UNet weight in fp8 and
computes in the device's UNet dtype (ComfyUI's `unet_manual_cast`: float32 on the CPU, float16
on CUDA), each layer casting its weights as it runs (`comfy_core.models.storage_cast`);
`fp8_optimizations` (ComfyUI's fp8_e4m3fn_fast) also multiplies in fp8 where the GPU can.

A scaled-fp8 file (ComfyUI's `*_fp8_scaled`: a `scaled_fp8` marker, a `scale_weight` per linear
layer) keeps its fp8 weights as stored, left in the file mapping, with the scales applied in each
layer's per-call cast (`storage_cast.keep_scaled_fp8`, ComfyUI's `scaled_fp8_ops`): a 14 B model
takes its fp8 file size, never a bfloat16 copy.

ComfyUI's mixed-precision quantised files (a `comfy_quant` description per layer or the
`_quantization_metadata` metadata: int8 with or without ConvRot, fp8 with a tensor scale, MXFP8,
NVFP4; comfy_core/weights/quant_registry.py) are detected as their float original, loaded without
their quantised layers' tensors, and those layers then keep their weights as stored with their
scales (comfy_core/models/quant_linear.py, ComfyUI's `mixed_precision_ops`). A `.gguf` file is
read the same way, its quantised weights kept as ggml blocks (comfy_core/weights/quant_gguf.py;
ComfyUI itself reads GGUF only through the ComfyUI-GGUF pack).
"""
from __future__ import annotations

import dataclasses
import logging
import time
from pathlib import Path
from typing import Any, Mapping

import torch

from comfy_core.checkpoint.bulk import BulkRead
from comfy_core.checkpoint.diffusers_keys import DiffusersLayoutError, is_diffusers_unet, unet_names
from comfy_core.checkpoint.dtype import UNET
from comfy_core.checkpoint.errors import CorruptCheckpointError, MissingComponentError, ShapeMismatchError
from comfy_core.checkpoint.materialize import tensor_requests
from comfy_core.checkpoint.reader import CheckpointFile
from comfy_core.checkpoint.renamed import RenamedCheckpoint
from comfy_core.families import FamilyRegistry, default_registry
from comfy_core.loading import (DIFFUSION_MODEL_LOADER, LoadOptions, QuantizedUnet, _build_unet, _load_model,
                                auxiliary_network, finish_unet, model_from_unet, resolve_prediction, unet_storage,
                                warn_if_emulated_bf16)
from comfy_core.patching.model import ModelPatcher
from comfy_core.split.custom_operations import build_unet_with_operations, load_with_operations, storage_of
from comfy_core.weights.gguf import GGUFError
from comfy_core.weights.quant_gguf import gguf_diffusion_state

log = logging.getLogger(__name__)

# Where single-file checkpoints keep the UNet, the names our families detect and load under.
UNET_PREFIX = "model.diffusion_model."
LDM_MARKER = "input_blocks.0.0.weight"


def diffusion_model_names(checkpoint: CheckpointFile) -> dict[str, str]:
    """`{our name: stored name}` for the UNet tensors of `checkpoint`, whatever its layout."""
    names = list(checkpoint.tensors)
    if UNET_PREFIX + LDM_MARKER in checkpoint.tensors:
        return {n: n for n in names if n.startswith(UNET_PREFIX)}
    if LDM_MARKER in checkpoint.tensors:
        return {UNET_PREFIX + n: n for n in names}
    if is_diffusers_unet(names):
        try:
            return unet_names(names, UNET_PREFIX)
        except DiffusersLayoutError as exc:
            raise ShapeMismatchError(checkpoint.path, str(exc)) from None
    raise MissingComponentError(
        checkpoint.path, f"not a diffusion model: no {LDM_MARKER!r} (LDM layout, with or without "
                         f"{UNET_PREFIX!r}) and no diffusers UNet names (e.g. 'down_blocks.0.resnets.0.conv1.weight')")


def diffusion_model_view(checkpoint: CheckpointFile, registry: FamilyRegistry) -> Any:
    """`checkpoint` presented under the single-file names our families detect and load.

    For each architecture the registry's families use (UNet, MMDiT, Flux DiT, ...), in order: its
    names under the family's diffusion-model prefix (`model.diffusion_model.`, Hunyuan3D's `model.`:
    a whole checkpoint) are used as they are, bare names get the prefix (a renamed view, no copy), and diffusers-layout names are converted to the family's
    names by the architecture's `from_diffusers` (a DiT's fused q/k/v are new tensors, the rest
    read from the file). UNets in any layout go through `diffusion_model_names`."""
    names = checkpoint.tensors
    seen: set[str] = set()
    for family in registry:
        architecture = family.architecture
        if architecture.name in seen or architecture.head_layout:
            continue
        seen.add(architecture.name)
        prefix = family.unet_prefix  # `model.diffusion_model.` but for a few (Hunyuan3D's `model.`)
        if architecture.present(names, prefix):
            return RenamedCheckpoint(checkpoint, {n: n for n in names if n.startswith(prefix)})
        if architecture.present(names, ""):
            return RenamedCheckpoint(checkpoint, {prefix + n: n for n in names})
        if architecture.is_diffusers is not None and architecture.is_diffusers(names):
            state = {n: checkpoint.read_stored(n) for n in names}
            try:
                converted = architecture.from_diffusers(state)
            except ValueError as exc:
                raise ShapeMismatchError(checkpoint.path, f"diffusers-layout {architecture.name} file: {exc}") from None
            # In memory, named after the file it came from (for error messages).
            return CheckpointFile({UNET_PREFIX + n: t for n, t in converted.items()}, metadata=checkpoint.metadata,
                                  name=str(checkpoint.path))
    return RenamedCheckpoint(checkpoint, diffusion_model_names(checkpoint))


def load_diffusion_model(path: str | Path | Mapping[str, torch.Tensor], options: LoadOptions | None = None, *,
                         weight_dtype: torch.dtype | None = None, fp8_optimizations: bool = False,
                         registry: FamilyRegistry | None = None, operations: Any = None) -> ModelPatcher:
    """A diffusion model file -> `ModelPatcher` over a `DiffusionModel` (see the module docstring).

    `weight_dtype`: the UNet's storage dtype (None: the policy's, as for checkpoints).
    `operations`: layer classes to build the UNet from (ComfyUI's `model_options["custom_operations"]`,
    e.g. ComfyUI-GGUF's `GGMLOps`); the layers then load their own tensors
    (comfy_core/split/custom_operations.py). Raises `CheckpointError` subclasses naming the file
    (`UnknownFamilyError` for a UNet of no known family).
    """
    if operations is not None:
        return _load_with_operations(path, options or LoadOptions(), weight_dtype, registry or default_registry(),
                                     operations)
    options = options or LoadOptions()
    registry = registry or default_registry()
    started = time.perf_counter()
    policy = options.dtype_policy
    with _open_file(path) as file:
        auxiliary = auxiliary_network(file, DIFFUSION_MODEL_LOADER)  # RT-DETR, SAM 3: no family
        if auxiliary is not None:
            return auxiliary.load(file, policy, weight_dtype, load_device=options.device, with_clip=False)[0]
        view = diffusion_model_view(file, registry)
        # ComfyUI's quantised layers and scaled fp8, as a checkpoint's diffusion model
        # (comfy_core/loading.py `QuantizedUnet`, `unet_storage`, `finish_unet`).
        quantized = QuantizedUnet.of(view)
        detection = registry.detect_diffusion_model(quantized.detection, file.path, file.metadata)
        family = detection.family
        view = quantized.loading
        storage = unet_storage(view, family, policy, weight_dtype, fp8_optimizations)
        load_options = dataclasses.replace(options, dtype_policy=dataclasses.replace(policy, unet=storage.storage))
        prediction = resolve_prediction(view, family, options.prediction)
        requests: Mapping[str, torch.dtype] = tensor_requests(view, family.unet_prefix, storage.storage)
        with BulkRead(view, requests, zero_copy=options.mmap, workers=options.io_workers) as reading:
            unet = _build_unet(view, detection)
            quantized.detach(unet, family.unet_prefix)
            model = _load_model(view, family, unet, prediction, load_options, reading.result())
            finish_unet(model, storage, quantized, family.unet_prefix)
    cast = storage.compute
    log.info("loaded diffusion model %s in %.2fs: %s, %s-prediction, weights %s%s", file.path.name,
             time.perf_counter() - started, family.display_name, prediction, storage.storage,
             f", computed in {cast}" if cast is not None else "")
    warn_if_emulated_bf16(cast or storage.storage, options.device)
    return model


def _open_file(path: str | Path | Mapping[str, torch.Tensor]) -> CheckpointFile:
    """The file (or state dict) as a checkpoint; a `.gguf` file as its quantised-layer state dict
    (`comfy_core.weights.quant_gguf`: the ggml blocks stay views of the file)."""
    if isinstance(path, (str, Path)) and Path(path).suffix.lower() == ".gguf":
        try:
            tensors, metadata = gguf_diffusion_state(path)
        except GGUFError as exc:
            raise CorruptCheckpointError(Path(path), str(exc)) from None
        return CheckpointFile(tensors, metadata=metadata, name=str(path))
    return CheckpointFile(path)


def _load_with_operations(path: str | Path | Mapping[str, torch.Tensor], options: LoadOptions,
                          weight_dtype: torch.dtype | None, registry: FamilyRegistry, operations: Any) -> ModelPatcher:
    """`load_diffusion_model` with the UNet built from `operations` (ComfyUI's custom_operations)."""
    started = time.perf_counter()
    policy = options.dtype_policy
    storage = weight_dtype or policy.dtype_for(UNET)
    load_options = dataclasses.replace(options, dtype_policy=dataclasses.replace(policy, unet=storage))
    with CheckpointFile(path) as file:
        view = diffusion_model_view(file, registry)
        detection = registry.detect_diffusion_model(view.tensors, file.path, file.metadata)
        family = detection.family
        prediction = resolve_prediction(view, family, options.prediction)
        unet = build_unet_with_operations(view, detection, operations)
        unet = load_with_operations(unet, view, family.unet_prefix, storage)
        model = model_from_unet(view, family, unet, prediction, load_options)
    # The UNet computes in the storage dtype (ComfyUI's unet_dtype; the layers dequantize or cast
    # to their input's dtype). DiffusionModel reads its compute dtype from the output layer's
    # weight, which a pack's layer may hold packed (e.g. as bytes): then name it explicitly.
    if model.model.get_dtype() != storage:
        model.model.manual_cast_dtype = storage
    log.info("loaded diffusion model %s in %.2fs: %s, %s-prediction, custom operations %s (weights %s)",
             file.path.name, time.perf_counter() - started, family.display_name, prediction,
             getattr(operations, "__name__", type(operations).__name__), dict(storage_of(unet)))
    return model
