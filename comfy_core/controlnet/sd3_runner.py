"""The CONTROL_NET objects of SD3 / SD3.5 ControlNets: their hint (a latent of the VAE-encoded
image) and, for SAI's SD3.5 format, the embedder the main model lends them.

Behaviour of ComfyUI's `comfy/controlnet.py` (`load_controlnet_mmdit`, `load_controlnet_sd35`,
`ControlNetSD35`), read there and written here:

- the hint image is resized to the latent size times the VAE's downscale (`compression_ratio`
  1: the network sees latent-sized hints), encoded by the VAE given to the apply node and put in
  the SD3 latent space (`latent_format.process_in`): SD3's format for SAI's ControlNets, the same
  with no shift for the diffusers-layout ones ("SD3 controlnet weirdness" in ComfyUI);
- SAI's canny ControlNet takes `image * 255 * 0.5 + 0.5` and the depth one `1 - image` before the
  VAE (`preprocess_image`, chosen by the file's `control_type`), blur the image as it is;
- `ControlNetSD35.pre_run` gives the network the main model's `x_embedder` (or, for the
  double-y-embedding variant, its `y_embedder` as `orig_y_embedder`): ComfyUI copies the weights
  into the ControlNet; here the network's patcher gets an object patch for the run, a module
  holding the main model's (patched) tensors in the ControlNet's dtype, so the shared ControlNet
  module is never changed and `cleanup` leaves it as loaded.
"""
from __future__ import annotations

from dataclasses import replace
from typing import Any, Callable

import torch
from torch import nn

from comfy_core.checkpoint.meta_build import meta_build
from comfy_core.controlnet.runner import ControlNet, ControlNetRunError
from comfy_core.models.latent_formats import LatentFormat
from comfy_core.families.sd3.latent_format import sd3_latent_format
from comfy_core.families.sd3.mmdit_blocks import PatchEmbed, VectorEmbedder


def canny_hint(image: torch.Tensor) -> torch.Tensor:
    """SAI's canny ControlNet input: `image * 255 * 0.5 + 0.5` (as ComfyUI's `load_controlnet_sd35`)."""
    return image * 255 * 0.5 + 0.5


def depth_hint(image: torch.Tensor) -> torch.Tensor:
    """SAI's depth ControlNet input: the inverted depth map, `1 - image`."""
    return 1.0 - image


def blur_hint(image: torch.Tensor) -> torch.Tensor:
    return image


HINT_PREPROCESS: dict[int, Callable[[torch.Tensor], torch.Tensor]] = {1: canny_hint, 2: depth_hint}


def preprocess_for(control_type: int | None) -> Callable[[torch.Tensor], torch.Tensor]:
    """The hint preprocessing of a SAI SD3.5 ControlNet with this `control_type` (0 blur,
    1 canny, 2 depth; anything else or None: the image as it is)."""
    return HINT_PREPROCESS.get(control_type, blur_hint) if control_type is not None else blur_hint


def sd3_controlnet_latent_format() -> LatentFormat:
    """The hint latent space of diffusers-layout SD3 ControlNets: SD3's scale without its shift."""
    return replace(sd3_latent_format(), shift_factor=0.0)


def make_sd3_controlnet(network: nn.Module, *, concat_mask: bool = False, load_device: Any = None,
                        manual_cast_dtype: torch.dtype | None = None) -> ControlNet:
    """The CONTROL_NET of a diffusers-layout SD3 ControlNet (`MMDiTControlNet`)."""
    return ControlNet(network, compression_ratio=1, latent_format=sd3_controlnet_latent_format(),
                      concat_mask=concat_mask, load_device=load_device, manual_cast_dtype=manual_cast_dtype)


def make_sd35_controlnet(network: nn.Module, control_type: int | None = None, *, load_device: Any = None,
                         manual_cast_dtype: torch.dtype | None = None) -> "ControlNetSD35":
    """The CONTROL_NET of a SAI-format SD3.5 ControlNet (`ControlNetEmbedder`)."""
    return ControlNetSD35(network, compression_ratio=1, latent_format=sd3_latent_format(), load_device=load_device,
                          manual_cast_dtype=manual_cast_dtype, preprocess_image=preprocess_for(control_type))


class ControlNetSD35(ControlNet):
    """ComfyUI's `ControlNetSD35`: a ControlNet whose network borrows an embedder of the model
    it runs with (see the module docstring)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._own_wrapped: Any = None  # the patcher as loaded, while a run's lending clone is in use

    def borrowed_name(self) -> str:
        """`orig_y_embedder` for the double-y-embedding variant, else `x_embedder`."""
        return "orig_y_embedder" if getattr(self.control_model, "double_y_emb", False) else "x_embedder"

    def pre_run(self, model: Any, percent_to_timestep_function: Callable[[float], float]) -> None:
        self._restore_wrapped()
        name = self.borrowed_name()
        source_name = "y_embedder" if name == "orig_y_embedder" else "x_embedder"
        source = getattr(getattr(model, "diffusion_model", None), source_name, None)
        if not isinstance(source, nn.Module):
            raise ControlNetRunError(f"this SD3.5 ControlNet needs the model's {source_name} (an SD3 / SD3.5 MMDiT); "
                                     f"the model has none")
        dtype = self.manual_cast_dtype or self.control_model.dtype
        lent = lend_embedder(name, source, self.control_model, dtype)
        self._own_wrapped = self.control_model_wrapped
        wrapped = self.control_model_wrapped.clone()
        wrapped.add_object_patch(name, lent)
        self.control_model_wrapped = wrapped
        super().pre_run(model, percent_to_timestep_function)

    def cleanup(self) -> None:
        self._restore_wrapped()
        super().cleanup()

    def _restore_wrapped(self) -> None:
        if self._own_wrapped is not None:
            self.control_model_wrapped, self._own_wrapped = self._own_wrapped, None

    def copy(self) -> "ControlNetSD35":
        c = ControlNetSD35(None, global_average_pooling=self.global_average_pooling, load_device=self.load_device,
                           manual_cast_dtype=self.manual_cast_dtype)
        c.control_model = self.control_model
        c.control_model_wrapped = self._own_wrapped or self.control_model_wrapped
        self.copy_to(c)
        return c


def lend_embedder(name: str, source: nn.Module, network: nn.Module, dtype: torch.dtype) -> nn.Module:
    """A new `PatchEmbed` (`x_embedder`) or `VectorEmbedder` (`orig_y_embedder`) holding `source`'s
    tensors cast to `dtype` (no copy when they are in it already), for `network`'s slot `name`.
    Raises `ControlNetRunError` when the model's embedder does not fit the ControlNet's width."""
    state = source.state_dict()
    hidden = network.hidden_size
    if name == "x_embedder":
        weight = state.get("proj.weight")
        if weight is None or weight.ndim != 4 or weight.shape[0] != hidden:
            raise ControlNetRunError(f"this SD3.5 ControlNet is {hidden} wide; the model's x_embedder.proj.weight is "
                                     f"{None if weight is None else list(weight.shape)}")
        with meta_build():
            lent: nn.Module = PatchEmbed(None, weight.shape[2], weight.shape[1], hidden, bias="proj.bias" in state,
                                         strict_img_size=True)
    else:
        weight = state.get("mlp.0.weight")
        if weight is None or weight.shape[0] != hidden:
            raise ControlNetRunError(f"this SD3.5 ControlNet is {hidden} wide; the model's y_embedder.mlp.0.weight is "
                                     f"{None if weight is None else list(weight.shape)}")
        with meta_build():
            lent = VectorEmbedder(weight.shape[1], hidden)
    wanted = lent.state_dict()
    tensors = {}
    for key in wanted:
        if key not in state:
            raise ControlNetRunError(f"this SD3.5 ControlNet needs the model's {name}.{key}; the model has none")
        tensors[key] = state[key].detach().to(dtype)
    lent.load_state_dict(tensors, strict=True, assign=True)
    return lent.eval().requires_grad_(False)


__all__ = ["ControlNetSD35", "HINT_PREPROCESS", "blur_hint", "canny_hint", "depth_hint", "lend_embedder",
           "make_sd3_controlnet", "make_sd35_controlnet", "preprocess_for", "sd3_controlnet_latent_format"]
