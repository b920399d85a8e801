"""`ControlLora`: Stability's control-LoRA files, a ControlNet stored as a low-rank delta over
the base model's own UNet encoder weights.

After ComfyUI's `comfy/controlnet.py: ControlLora`: a file marked by a `lora_controlnet` tensor
holds full tensors for what the UNet lacks (the hint encoder, zero convolutions, norms it
retrained) and `X.up` / `X.down` pairs for the copied linear and convolution layers. At the start
of each sampling run (`pre_run`, when the model is known) the network is built with the model's
UNet structure, every weight taken from the file where it has one and otherwise from the
model's (patched) UNet, and `X.weight += up.flatten(1) @ down.flatten(1)` (reshaped), the merge
ComfyUI's ControlLoraOps perform in each forward, done once here. `cleanup` drops the network.
"""
from __future__ import annotations

from typing import Any, Callable, Mapping

import torch

from comfy_core.checkpoint.materialize import build_on_meta
from comfy_core.controlnet.base import ControlBase
from comfy_core.controlnet.config import ControlNetConfig
from comfy_core.controlnet.model import ControlNetModel
from comfy_core.controlnet.runner import ControlNet
from comfy_core.patching.patcher import Patcher

MARKER = "lora_controlnet"


class ControlLoraError(ValueError):
    """A control-LoRA whose weights do not fit the model it is applied to."""


def _file_weight(name: str) -> bool:
    """Tensors of the file that are weights of the network (ComfyUI's filter)."""
    return name != MARKER and "__" not in name and name.endswith((".up", ".down", ".weight", ".bias"))


def merged_state(network: torch.nn.Module, control_weights: Mapping[str, torch.Tensor],
                 unet_state: Mapping[str, torch.Tensor], dtype: torch.dtype,
                 device: torch.device) -> dict[str, torch.Tensor]:
    """The network's tensors: the file's where it has them, else the UNet's, plus the LoRA deltas."""
    state: dict[str, torch.Tensor] = {}
    missing = []
    for name, meta in network.state_dict().items():
        if name in control_weights and _file_weight(name):
            tensor = control_weights[name].to(device=device, dtype=dtype)
        elif name in unet_state:
            tensor = unet_state[name].to(device=device, dtype=dtype)
        else:
            missing.append(name)
            continue
        if tuple(tensor.shape) != tuple(meta.shape):
            raise ControlLoraError(f"control-LoRA: {name} is {list(tensor.shape)}, the model's ControlNet needs "
                                   f"{list(meta.shape)} (a control-LoRA for another model family?)")
        stem = name[: -len(".weight")] if name.endswith(".weight") else None
        if stem is not None and f"{stem}.up" in control_weights and f"{stem}.down" in control_weights:
            up = control_weights[f"{stem}.up"].to(device=device, dtype=dtype).flatten(start_dim=1)
            down = control_weights[f"{stem}.down"].to(device=device, dtype=dtype).flatten(start_dim=1)
            if up.shape[0] * down.shape[1] != tensor.numel() or up.shape[1] != down.shape[0]:
                raise ControlLoraError(f"control-LoRA: {stem}.up/.down ({list(up.shape)} x {list(down.shape)}) do not "
                                       f"fit the model's {list(tensor.shape)} (a control-LoRA for another family?)")
            tensor = tensor + torch.mm(up, down).reshape(tensor.shape).to(dtype)
        state[name] = tensor
    if missing:
        raise ControlLoraError(f"control-LoRA: {len(missing)} tensors neither in the file nor in the model, e.g. "
                               f"{', '.join(missing[:5])}")
    return state


class ControlLora(ControlNet):
    def __init__(self, control_weights: Mapping[str, torch.Tensor], global_average_pooling: bool = False,
                 model_options: dict | None = None) -> None:
        ControlBase.__init__(self)
        self.control_weights = control_weights
        self.global_average_pooling = global_average_pooling
        self.extra_conds += ["y"]
        self.control_model = None
        self.control_model_wrapped = None
        self.model_sampling_current = None
        self.manual_cast_dtype = None
        self.load_device = None

    def pre_run(self, model: Any, percent_to_timestep_function: Callable[[float], float]) -> None:
        super().pre_run(model, percent_to_timestep_function)
        unet = model.diffusion_model
        hint = self.control_weights.get("input_hint_block.0.weight")
        if hint is None:
            raise ControlLoraError("control-LoRA: the file has no input_hint_block.0.weight")
        config = ControlNetConfig(unet=unet.config, hint_channels=hint.shape[1])
        dtype = model.get_dtype()
        device = next(unet.parameters()).device
        network = build_on_meta(lambda: ControlNetModel(config))
        state = merged_state(network, self.control_weights, unet.state_dict(), dtype, device)
        network.load_state_dict(state, strict=True, assign=True)
        network.eval().requires_grad_(False)
        self.control_model = network
        self.control_model_wrapped = Patcher(network, load_device=device, offload_device=device)

    def copy(self) -> "ControlLora":
        c = ControlLora(self.control_weights, global_average_pooling=self.global_average_pooling)
        self.copy_to(c)
        return c

    def cleanup(self) -> None:
        self.control_model = None
        self.control_model_wrapped = None
        super().cleanup()

    def get_models(self) -> list[Any]:
        return ControlBase.get_models(self)

    def inference_memory_requirements(self, dtype: torch.dtype) -> int:
        size = torch.empty((), dtype=dtype).element_size()
        own = sum(t.numel() for t in self.control_weights.values()) * size
        return own + ControlBase.inference_memory_requirements(self, dtype)
