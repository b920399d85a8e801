"""Loading SD3 / SD3.5 ControlNet files, in every layout they come in, detected from names and
shapes (ComfyUI's `load_controlnet_state_dict` branch on `controlnet_blocks.0.weight` +
`pos_embed_input.proj.weight`):

- SAI's SD3.5 format (`transformer_blocks.0.adaLN_modulation.1.bias`; ComfyUI's
  `load_controlnet_sd35`) -> `ControlNetEmbedder` in a `ControlNetSD35` (its `control_type`
  tensor picks the hint preprocessing);
- diffusers' conversion of those files (single transformer blocks, no text stream; ComfyUI does
  not read these) -> the same network, q/k/v fused into `attn.qkv`;
- diffusers' `SD3ControlNetModel` with joint blocks (InstantX's and other SD3 ControlNets;
  ComfyUI's `load_controlnet_mmdit`) -> `MMDiTControlNet` in a `ControlNet`.

The network is built on the meta device and given its tensors by assignment, read in `dtype`
and checked against the detected structure. The SAI format's lent embedder (`x_embedder`, or
`orig_y_embedder`) is not in the files: it is given zeros here, as placeholders the run's object
patch replaces (`sd3_runner.ControlNetSD35.pre_run`).
"""
from __future__ import annotations

import logging
from typing import Any, Mapping

import torch
from torch import nn

from comfy_core.checkpoint.bulk import load_tensors
from comfy_core.checkpoint.errors import ShapeMismatchError
from comfy_core.checkpoint.materialize import build_on_meta
from comfy_core.checkpoint.reader import TORCH_DTYPES, CheckpointFile
from comfy_core.controlnet.dit_embedder import (CONTROL_TYPE_KEY, CONTROL_TYPES, SD35ControlNetConfig,
                                                build_sd35_controlnet, diffusers_single_block_names,
                                                is_diffusers_sd35_controlnet, is_sd35_controlnet, module_names)
from comfy_core.controlnet.mmdit_controlnet import (SD3ControlNetConfig, build_sd3_controlnet, convert_sd3_controlnet,
                                                    is_sd3_controlnet)
from comfy_core.controlnet.runner import ControlNet
from comfy_core.controlnet.sd3_runner import make_sd3_controlnet, make_sd35_controlnet
from comfy_core.families.sd3.mmdit import MMDiTConfigError

log = logging.getLogger(__name__)


def mmdit_controlnet_layout(names: Any) -> str | None:
    """"sd35" (SAI's format), "diffusers_sd35" (its diffusers conversion), "diffusers" (an
    `SD3ControlNetModel` with joint blocks), or None for a file that is no SD3 ControlNet."""
    if is_sd35_controlnet(names):
        return "sd35"
    if is_diffusers_sd35_controlnet(names):
        return "diffusers_sd35"
    if is_sd3_controlnet(names):
        return "diffusers"
    return None


def load_mmdit_controlnet(checkpoint: CheckpointFile, dtype: torch.dtype = torch.float32, *, load_device: Any = None,
                          mmap: bool = True) -> ControlNet:
    """The CONTROL_NET of an SD3 / SD3.5 ControlNet file (see the module docstring). Raises
    `ShapeMismatchError` naming the file when its tensors do not make the detected structure."""
    names = list(checkpoint.tensors)
    layout = mmdit_controlnet_layout(names)
    if layout is None:
        raise ShapeMismatchError(checkpoint.path, "not an SD3 ControlNet (controlnet_blocks.0.weight and "
                                                  "pos_embed_input.proj.weight expected)")
    try:
        if layout == "diffusers":
            return _load_diffusers(checkpoint, dtype, load_device, mmap)
        return _load_sd35(checkpoint, layout, dtype, load_device, mmap)
    except MMDiTConfigError as exc:
        raise ShapeMismatchError(checkpoint.path, str(exc)) from None


def _requests(checkpoint: CheckpointFile, names: list[str], dtype: torch.dtype) -> dict[str, torch.dtype]:
    out = {}
    for name in names:
        stored = TORCH_DTYPES[checkpoint.tensors[name].dtype]
        out[name] = dtype if stored.is_floating_point else stored
    return out


def _load_diffusers(checkpoint: CheckpointFile, dtype: torch.dtype, load_device: Any, mmap: bool) -> ControlNet:
    config = SD3ControlNetConfig.detect_from_weights(checkpoint.tensors)
    network = build_on_meta(lambda: build_sd3_controlnet(config))
    names = list(checkpoint.tensors)
    state = convert_sd3_controlnet(load_tensors(checkpoint, _requests(checkpoint, names, dtype), zero_copy=mmap))
    _assign(network, state, checkpoint, "SD3 ControlNet")
    log.info("SD3 ControlNet %s (diffusers layout): %d blocks for a %d-block model, hint %d channels",
             checkpoint.path.name, config.mmdit.num_blocks, config.mmdit.depth, config.control_latent_channels)
    return make_sd3_controlnet(network.eval().requires_grad_(False), concat_mask=config.concat_mask,
                               load_device=load_device)


def _load_sd35(checkpoint: CheckpointFile, layout: str, dtype: torch.dtype, load_device: Any,
               mmap: bool) -> ControlNet:
    names = list(checkpoint.tensors)
    source: Mapping[str, Any] = module_names(names) if layout == "sd35" else diffusers_single_block_names(names)
    shapes = {}
    for name, stored in source.items():
        if isinstance(stored, tuple):  # q, k, v -> the fused qkv
            parts = [tuple(checkpoint.tensors[s].shape) for s in stored]
            shapes[name] = _Shape((sum(p[0] for p in parts),) + parts[0][1:])
        else:
            shapes[name] = checkpoint.tensors[stored]
    config = SD35ControlNetConfig.detect_from_weights(shapes)
    network = build_on_meta(lambda: build_sd35_controlnet(config))
    files = sorted({s for v in source.values() for s in (v if isinstance(v, tuple) else (v,))})
    loaded = load_tensors(checkpoint, _requests(checkpoint, files, dtype), zero_copy=mmap)
    state = {name: torch.cat([loaded[s] for s in stored], dim=0) if isinstance(stored, tuple) else loaded[stored]
             for name, stored in source.items()}
    borrowed = config.borrowed + "."
    for name, meta in network.state_dict().items():
        if name.startswith(borrowed) and name not in state:
            state[name] = torch.zeros(meta.shape, dtype=dtype)  # placeholder: the model lends it per run
    control_type = None
    if CONTROL_TYPE_KEY in checkpoint.tensors:
        control_type = round(float(load_tensors(checkpoint, {CONTROL_TYPE_KEY: torch.float32})[CONTROL_TYPE_KEY]
                                   .reshape(-1)[0]))
    _assign(network, state, checkpoint, "SD3.5 ControlNet")
    log.info("SD3.5 ControlNet %s (%s layout): %d blocks for a %d-block model, %s%s", checkpoint.path.name,
             "SAI" if layout == "sd35" else "diffusers", config.num_layers, config.depth,
             CONTROL_TYPES.get(control_type, "unknown control type"), ", double y embedding" if config.double_y_emb
             else "")
    return make_sd35_controlnet(network.eval().requires_grad_(False), control_type, load_device=load_device)


class _Shape:
    def __init__(self, shape: tuple[int, ...]) -> None:
        self.shape = shape


def _assign(network: nn.Module, state: Mapping[str, torch.Tensor], checkpoint: CheckpointFile, component: str) -> None:
    """Give `network` (on meta) `state`, every tensor checked against the structure; tensors the
    structure has no place for are reported and left out."""
    expected = network.state_dict()
    missing = sorted(set(expected) - set(state))
    if missing:
        raise ShapeMismatchError(checkpoint.path, f"{component}: {len(missing)} tensors missing, e.g. "
                                                  f"{', '.join(missing[:5])}")
    unused = sorted(set(state) - set(expected))
    if unused:
        log.warning("%s: %d unused tensors in %s, e.g. %s", component, len(unused), checkpoint.path.name,
                    ", ".join(unused[:3]))
    for name, meta in expected.items():
        if tuple(state[name].shape) != tuple(meta.shape):
            raise ShapeMismatchError(checkpoint.path, f"{component}: tensor {name!r} has shape "
                                                      f"{list(state[name].shape)}, the detected structure needs "
                                                      f"{list(meta.shape)}")
    network.load_state_dict({name: state[name] for name in expected}, strict=True, assign=True)


__all__ = ["load_mmdit_controlnet", "mmdit_controlnet_layout"]
