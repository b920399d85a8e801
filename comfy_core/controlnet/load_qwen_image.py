"""Loading Qwen-Image ControlNet files (ControlNetLoader) into their CONTROL_NET objects.

After ComfyUI's `comfy/controlnet.py` (`load_controlnet_qwen_instantx`, `load_controlnet_qwen_fun`,
`QwenFunControlNet`), behaviour read there and written here:

- both take a latent hint: the hint image resized to the latent size times the VAE's downscale,
  encoded by the VAE given to the apply node (Qwen-Image's, the Wan 2.1 VAE) and put in model
  space with the Wan 2.1 latent format (`compression_ratio` 1); no extra conditions;
- InstantX's inpainting ControlNet (68 hint features) gets the mask concatenated to the hint
  latent (`concat_mask`; the apply node's mask, or ones);
- the Fun ControlNet (`QwenFunControlNet`) is handed the run's Qwen-Image network at `pre_run`
  (the `base_model` argument; its input layers embed the latent and the text) and dropped at
  `cleanup`; its strength is applied as `sqrt(strength)` (ComfyUI's softer response: 1 stays 1).

The network is built on the meta device and given its tensors by assignment, floating ones
read in `dtype`, every one checked against the structure detected from names and shapes.
"""
from __future__ import annotations

import logging
import math
from typing import Any, Callable

import torch

from comfy_core.checkpoint.bulk import load_tensors
from comfy_core.checkpoint.errors import ShapeMismatchError
from comfy_core.checkpoint.materialize import build_on_meta
from comfy_core.checkpoint.reader import TORCH_DTYPES, CheckpointFile
from comfy_core.controlnet.base import Residuals
from comfy_core.controlnet.load_mmdit import _assign
from comfy_core.controlnet.qwen_image_controlnet import (QwenImageControlNetConfig, QwenImageFunControlNetConfig,
                                                         QwenImageFunControlNetModel, build_instantx_controlnet,
                                                         is_qwen_fun_controlnet, is_qwen_instantx_controlnet)
from comfy_core.controlnet.runner import ControlNet, ControlNetRunError
from comfy_core.families.qwen_image.dit import QwenImageConfigError
from comfy_core.families.wan.latent_format import wan21_latent_format

log = logging.getLogger(__name__)


def qwen_image_controlnet_layout(names: Any) -> str | None:
    """"instantx", "fun", or None for a file that is no Qwen-Image ControlNet."""
    if is_qwen_instantx_controlnet(names):
        return "instantx"
    if is_qwen_fun_controlnet(names):
        return "fun"
    return None


def load_qwen_image_controlnet(checkpoint: CheckpointFile, dtype: torch.dtype = torch.float32, *,
                               load_device: Any = None, mmap: bool = True) -> ControlNet:
    """The CONTROL_NET of a Qwen-Image ControlNet file (see the module docstring). Raises
    `ShapeMismatchError` naming the file when its tensors do not make the detected structure."""
    layout = qwen_image_controlnet_layout(checkpoint.tensors)
    if layout is None:
        raise ShapeMismatchError(checkpoint.path, "not a Qwen-Image ControlNet (controlnet_blocks.0.weight with "
                                                  "transformer_blocks.*, or control_img_in.weight with "
                                                  "control_blocks.0.after_proj.weight expected)")
    try:
        if layout == "instantx":
            return _load_instantx(checkpoint, dtype, load_device, mmap)
        return _load_fun(checkpoint, dtype, load_device, mmap)
    except QwenImageConfigError as exc:
        raise ShapeMismatchError(checkpoint.path, str(exc)) from None


def _state(checkpoint: CheckpointFile, dtype: torch.dtype, mmap: bool) -> dict[str, torch.Tensor]:
    requests = {}
    for name, info in checkpoint.tensors.items():
        stored = TORCH_DTYPES[info.dtype]
        requests[name] = dtype if stored.is_floating_point else stored
    return load_tensors(checkpoint, requests, zero_copy=mmap)


def _load_instantx(checkpoint: CheckpointFile, dtype: torch.dtype, load_device: Any, mmap: bool) -> ControlNet:
    config = QwenImageControlNetConfig.detect_from_weights(checkpoint.tensors)
    network = build_on_meta(lambda: build_instantx_controlnet(config, dtype=dtype))
    _assign(network, _state(checkpoint, dtype, mmap), checkpoint, "Qwen-Image ControlNet")
    log.info("Qwen-Image ControlNet %s (InstantX): %d blocks, %d wide%s", checkpoint.path.name,
             config.dit.num_layers, config.dit.hidden_size, ", inpainting (mask concatenated)" if config.concat_mask
             else "")
    return ControlNet(network.eval().requires_grad_(False), compression_ratio=1, latent_format=wan21_latent_format(),
                      concat_mask=config.concat_mask, load_device=load_device, extra_conds=())


def _load_fun(checkpoint: CheckpointFile, dtype: torch.dtype, load_device: Any, mmap: bool) -> "QwenFunControlNet":
    config = QwenImageFunControlNetConfig.detect_from_weights(checkpoint.tensors)
    network = build_on_meta(lambda: QwenImageFunControlNetModel.from_config(config, dtype=dtype))
    _assign(network, _state(checkpoint, dtype, mmap), checkpoint, "Qwen-Image Fun ControlNet")
    log.info("Qwen-Image Fun ControlNet %s: %d control blocks, %d wide, %d hint features", checkpoint.path.name,
             config.num_control_blocks, config.inner_dim, config.control_in_features)
    # Fun files handle their own 33-channel hint (zero mask and inpaint latent): no concat_mask.
    return QwenFunControlNet(network.eval().requires_grad_(False), compression_ratio=1,
                             latent_format=wan21_latent_format(), load_device=load_device, extra_conds=())


class QwenFunControlNet(ControlNet):
    """ComfyUI's `QwenFunControlNet`: the run's Qwen-Image network as `base_model`, strength
    through a square root (see the module docstring)."""

    def get_control(self, x_noisy: torch.Tensor, t: torch.Tensor, cond: dict, batched_number: int,
                    transformer_options: dict) -> Residuals | None:
        applied = self.strength
        self.strength = math.sqrt(max(applied, 0.0))
        try:
            return super().get_control(x_noisy, t, cond, batched_number, transformer_options)
        finally:
            self.strength = applied

    def pre_run(self, model: Any, percent_to_timestep_function: Callable[[float], float]) -> None:
        super().pre_run(model, percent_to_timestep_function)
        base = getattr(model, "diffusion_model", None)
        if base is None or not hasattr(base, "time_text_embed") or not hasattr(base, "img_in"):
            raise ControlNetRunError("a Qwen-Image Fun ControlNet runs with a Qwen-Image model; the model sampled "
                                     "is not one")
        self.set_extra_arg("base_model", base)

    def cleanup(self) -> None:
        self.extra_args.pop("base_model", None)
        super().cleanup()

    def copy(self) -> "QwenFunControlNet":
        c = QwenFunControlNet(None, global_average_pooling=self.global_average_pooling, load_device=self.load_device,
                              manual_cast_dtype=self.manual_cast_dtype)
        c.control_model = self.control_model
        c.control_model_wrapped = self.control_model_wrapped
        self.copy_to(c)
        return c


__all__ = ["QwenFunControlNet", "load_qwen_image_controlnet", "qwen_image_controlnet_layout"]
