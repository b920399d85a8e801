"""Loading a diffusion model built from caller-given layer classes (ComfyUI's `custom_operations`).

After ComfyUI's `comfy/sd.py: load_diffusion_model_state_dict` with
`model_options["custom_operations"]`: the UNet's layers are the caller's classes (e.g.
ComfyUI-GGUF's `GGMLOps`, subclasses of `comfy.ops.manual_cast`), and the weights are given to
them through `nn.Module.load_state_dict(strict=False)`, so each layer's own
`_load_from_state_dict` decides how to hold its tensors: a pack's tensor subclass (GGUF's
quantized `GGMLTensor`, whose `.shape` is the logical shape and whose data is packed bytes)
stays exactly the object the pack made, to be dequantized by the pack's layer at run time.

Differences from our file loaders (`comfy_core.checkpoint.materialize`), each for that reason:
no dtype conversion of a tensor subclass (only the layer knows what its bytes mean), plain
floating tensors are stored in the UNet's storage dtype (what ComfyUI's copy into the module's
parameters does), and no memory-mapped bulk read (the tensors are the caller's already).
"""
from __future__ import annotations

import itertools
import logging
from typing import Any, Mapping

import torch
from torch import nn

from comfy_core.checkpoint.errors import ShapeMismatchError, UnsupportedFormatError
from comfy_core.checkpoint.materialize import build_on_meta
from comfy_core.checkpoint.reader import CheckpointFile
from comfy_core.families import Detection

log = logging.getLogger(__name__)


def build_unet_with_operations(checkpoint: CheckpointFile, detection: Detection, operations: Any) -> nn.Module:
    """The detected UNet built on the meta device from the layer classes `operations`."""
    if detection.unet_config is None:
        raise ShapeMismatchError(checkpoint.path, "no UNet in the file")
    if detection.family.components is not None:
        raise UnsupportedFormatError(
            checkpoint.path, f"custom_operations: {detection.family.display_name} diffusion models have their own "
                             "UNet builder, which does not take ComfyUI operations classes")
    config = detection.unet_config
    return build_on_meta(lambda: detection.family.architecture.build(config, operations=operations))


def load_with_operations(module: nn.Module, checkpoint: CheckpointFile, prefix: str, storage: torch.dtype,
                         component: str = "UNet") -> nn.Module:
    """Give `module` (built on meta from custom operations) the tensors of `checkpoint` under
    `prefix` through its layers' own `_load_from_state_dict` (ComfyUI's `load_state_dict(sd,
    strict=False)`), by assignment since the module was built without memory.

    Plain floating tensors are stored in `storage`; tensor subclasses are handed over as they are.
    Missing and unexpected names are logged as ComfyUI logs them; a module tensor that no layer
    filled (still on meta) is an error naming it, not a failure at the first forward.
    """
    state: dict[str, torch.Tensor] = {}
    for name in checkpoint.keys():
        if not name.startswith(prefix):
            continue
        tensor = checkpoint.read_stored(name)
        if type(tensor) is torch.Tensor and tensor.is_floating_point() and tensor.dtype != storage:
            tensor = tensor.to(storage)
        state[name[len(prefix):]] = tensor
    result = module.load_state_dict(state, strict=False, assign=True)
    if result.missing_keys:
        log.warning("%s: %d tensors missing from %s, e.g. %s", component, len(result.missing_keys),
                    checkpoint.path.name, ", ".join(result.missing_keys[:3]))
    if result.unexpected_keys:
        log.warning("%s: %d unused tensors in %s, e.g. %s", component, len(result.unexpected_keys),
                    checkpoint.path.name, ", ".join(result.unexpected_keys[:3]))
    left = [n for n, t in itertools.chain(module.named_parameters(), module.named_buffers()) if t.is_meta]
    if left:
        raise ShapeMismatchError(checkpoint.path, f"{component}: {len(left)} module tensors were given no tensor by "
                                                  f"their layers (custom operations), e.g. {', '.join(left[:5])}")
    return module


def storage_of(module: nn.Module) -> Mapping[str, int]:
    """`{dtype name: tensor count}` of the module's parameters, for the load log line."""
    counts: dict[str, int] = {}
    for tensor in module.parameters():
        key = getattr(getattr(tensor, "tensor_type", None), "name", None) or str(tensor.dtype).replace("torch.", "")
        counts[key] = counts.get(key, 0) + 1
    return counts
