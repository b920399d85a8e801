"""`load_controlnet(path, model=None)`: a ControlNet-family file -> its CONTROL_NET object.

Detection follows ComfyUI's `comfy/controlnet.py: load_controlnet_state_dict` (names only, read
from the header): a `lora_controlnet` tensor marks a control-LoRA; `controlnet_cond_embedding.*`
the diffusers layout (union/ProMax when `control_add_embedding.*` is there); `control_model.*`
the original ControlNet release layout (a diff ControlNet when it also holds `difference`: its
weights are offsets added to the given model's UNet weights); bare `zero_convs.*` the same
without prefix; `controlnet_blocks.*` with `pos_embed_input.*` an SD3 / SD3.5 ControlNet (SAI's
format or diffusers', `load_mmdit.py`); `controlnet_blocks.*` with Qwen-Image transformer blocks
(InstantX's) or `control_img_in.*` with `control_blocks.*.after_proj` (VideoX-Fun's) a Qwen-Image
ControlNet (`load_qwen_image.py`); anything else is tried as a T2I-Adapter (full, light,
SDXL; original or diffusers names). The network is built on the meta device and given its
tensors by assignment (`comfy_core.checkpoint`), every one checked against the detected
structure; floating tensors are read in `dtype` (the loaders pass the dtype policy's UNet dtype,
so a ControlNet runs in the model's dtype). Files named `*_shuffle` get global average pooling,
as in ComfyUI.
"""
from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, Mapping

import torch
from torch import nn

from comfy_core.checkpoint.bulk import load_tensors
from comfy_core.checkpoint.errors import MissingComponentError, ShapeMismatchError
from comfy_core.checkpoint.materialize import build_on_meta
from comfy_core.checkpoint.reader import TORCH_DTYPES, CheckpointFile
from comfy_core.controlnet.base import ControlBase
from comfy_core.controlnet.config import ControlNetConfig, ControlNetConfigError
from comfy_core.controlnet.control_lora import MARKER as CONTROL_LORA_MARKER
from comfy_core.controlnet.control_lora import ControlLora
from comfy_core.controlnet.diffusers_keys import DIFFUSERS_MARKER, diffusers_to_original
from comfy_core.controlnet.load_mmdit import load_mmdit_controlnet, mmdit_controlnet_layout
from comfy_core.controlnet.load_qwen_image import load_qwen_image_controlnet, qwen_image_controlnet_layout
from comfy_core.controlnet.model import ControlNetModel
from comfy_core.controlnet.runner import ControlNet
from comfy_core.controlnet.t2i import T2IAdapter
from comfy_core.controlnet.t2i_model import AdapterConfig, build_adapter, diffusers_adapter_names

log = logging.getLogger(__name__)

PTH_PREFIX = "control_model."
DIFF_MARKER = "difference"


def load_controlnet(path: str | Path, model: Any = None, dtype: torch.dtype = torch.float32, *,
                    load_device: Any = None, mmap: bool = True,
                    global_average_pooling: bool | None = None) -> ControlBase:
    """Load a ControlNet, control-LoRA or T2I-Adapter file (see the module docstring).

    `model`: the MODEL a diff ControlNet's offsets are added to (DiffControlNetLoader).
    Raises `MissingComponentError` for a file that is none of these, `ShapeMismatchError` for one
    whose tensors do not fit the detected structure; both name the file.
    """
    path = Path(path)
    if global_average_pooling is None:
        global_average_pooling = path.stem.endswith(("_shuffle", "_shuffle_fp16"))
    with CheckpointFile(path) as checkpoint:
        names = list(checkpoint.tensors)
        if CONTROL_LORA_MARKER in checkpoint.tensors:
            weights = load_tensors(checkpoint, {n: _stored(checkpoint, n) for n in names}, zero_copy=mmap)
            return ControlLora(weights, global_average_pooling=global_average_pooling)
        if mmdit_controlnet_layout(checkpoint.tensors) is not None:  # SD3 / SD3.5 ControlNets
            return load_mmdit_controlnet(checkpoint, dtype, load_device=load_device, mmap=mmap)
        if qwen_image_controlnet_layout(checkpoint.tensors) is not None:  # InstantX's, VideoX-Fun's
            return load_qwen_image_controlnet(checkpoint, dtype, load_device=load_device, mmap=mmap)
        if DIFFUSERS_MARKER in checkpoint.tensors:
            source, left = diffusers_to_original(names)
            if left:
                log.warning("ControlNet %s: %d diffusers keys not understood, e.g. %s", path.name, len(left),
                            ", ".join(left[:3]))
        elif PTH_PREFIX + "zero_convs.0.0.weight" in checkpoint.tensors:
            source = {n[len(PTH_PREFIX):]: n for n in names if n.startswith(PTH_PREFIX)}
        elif "zero_convs.0.0.weight" in checkpoint.tensors:
            source = {n: n for n in names}
        else:
            return _load_t2i(checkpoint, names, mmap)
        try:
            config = ControlNetConfig.detect_from_weights({k: checkpoint.tensors[v] for k, v in source.items()})
        except ControlNetConfigError as exc:
            raise ShapeMismatchError(checkpoint.path, str(exc)) from None
        network = build_on_meta(lambda: ControlNetModel(config))
        offsets = None
        if DIFF_MARKER in checkpoint.tensors and PTH_PREFIX + "zero_convs.0.0.weight" in checkpoint.tensors:
            offsets = _model_weights(model, path)
        _assign(network, checkpoint, source, dtype, "ControlNet", mmap, offsets)
    network.eval().requires_grad_(False)
    log.info("ControlNet %s: %d levels, %d channels, hint %d channels%s", path.name, len(config.unet.channel_mult),
             config.unet.model_channels, config.hint_channels,
             f", union of {config.union_control_types} control types" if config.union_control_types else "")
    return ControlNet(network, global_average_pooling=global_average_pooling, load_device=load_device)


def _stored(checkpoint: CheckpointFile, name: str) -> torch.dtype:
    return TORCH_DTYPES[checkpoint.tensors[name].dtype]


def _model_weights(model: Any, path: Path) -> Mapping[str, torch.Tensor] | None:
    """The (patched) UNet weights of `model` a diff ControlNet's offsets apply to."""
    if model is None:
        log.warning("diff ControlNet %s loaded without a model: its weights are offsets and will not work", path.name)
        return None
    with model.applied() as diffusion:
        return {k: v.detach().clone() for k, v in diffusion.diffusion_model.state_dict().items()}


def _assign(network: nn.Module, checkpoint: CheckpointFile, source: Mapping[str, str], dtype: torch.dtype,
            component: str, mmap: bool, offsets: Mapping[str, torch.Tensor] | None = None) -> None:
    """Give `network` (on meta) its tensors: parameter `name` from file key `source[name]`, cast
    to `dtype` when floating, plus `offsets[name]` where given (diff ControlNets)."""
    expected = network.state_dict()
    missing = sorted(set(expected) - set(source))
    if missing:
        raise ShapeMismatchError(checkpoint.path, f"{component}: {len(missing)} tensors missing, e.g. "
                                                  f"{', '.join(missing[:5])}")
    unused = sorted(set(source) - set(expected) - {DIFF_MARKER})
    if unused:
        log.warning("%s: %d unused tensors in %s, e.g. %s", component, len(unused), checkpoint.path.name,
                    ", ".join(source[u] for u in unused[:3]))
    requests = {}
    for name, meta in expected.items():
        stored = checkpoint.tensors[source[name]]
        if tuple(stored.shape) != tuple(meta.shape):
            raise ShapeMismatchError(checkpoint.path, f"{component}: tensor {source[name]!r} has shape "
                                                      f"{list(stored.shape)}, the detected structure needs "
                                                      f"{list(meta.shape)}")
        requests[source[name]] = dtype if meta.is_floating_point() else meta.dtype
    loaded = load_tensors(checkpoint, requests, zero_copy=mmap)
    state = {}
    for name in expected:
        tensor = loaded[source[name]]
        if offsets is not None and name in offsets:
            tensor = tensor + offsets[name].to(tensor.dtype)
        state[name] = tensor
    network.load_state_dict(state, strict=True, assign=True)


def _load_t2i(checkpoint: CheckpointFile, names: list[str], mmap: bool) -> T2IAdapter:
    source = diffusers_adapter_names(names) if "adapter.body.0.resnets.0.block1.weight" in checkpoint.tensors \
        else {n: n for n in names}
    config = AdapterConfig.detect_from_weights({k: checkpoint.tensors[v] for k, v in source.items()})
    if config is None:
        raise MissingComponentError(checkpoint.path, "not a ControlNet, control-LoRA or T2I-Adapter: none of "
                                                     "control_model.*, zero_convs.*, controlnet_cond_embedding.*, "
                                                     "lora_controlnet, conv_in.* / body.0.in_conv.*")
    adapter = build_on_meta(lambda: build_adapter(config))
    _assign(adapter, checkpoint, source, torch.float32, "T2I-Adapter", mmap)
    adapter.eval().requires_grad_(False)
    log.info("T2I-Adapter %s: %s%s, %d input channels", checkpoint.path.name, config.kind, " (SDXL)" if config.xl else "",
             config.input_channels)
    return T2IAdapter(adapter, config.input_channels)
