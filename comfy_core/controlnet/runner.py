"""`ControlNet`: a ControlNet network applied to one conditioning, run at each sampler step.

After ComfyUI's `comfy/controlnet.py: ControlNet.get_control`: inside the (start, end) sigma
range, the hint is prepared once per latent size (resized to `latent * compression_ratio` with
`upscale_algorithm` and a centre crop, optionally VAE-encoded for latent-hint ControlNets, extra
channels such as an inpainting mask concatenated, cast to the network's dtype), broadcast to the
batch, and the network is run on the same scaled input and discrete timestep the UNet gets
(`model_sampling.calculate_input` / `.timestep`) with the cross-attention context (or
`crossattn_controlnet` when a conditioning carries one) and `y` for SDXL. Outside the range only
the previous ControlNet's residuals (if any) are returned.

The network lives in a `Patcher` (`control_model_wrapped`), so it is moved to the sampler's
device with the memory manager's knowledge and runs under the model's attention backend.
"""
from __future__ import annotations

from typing import Any, Callable

import torch
from torch import nn

from comfy_core.controlnet.base import ControlBase, Residuals, _identity
from comfy_core.controlnet.hint import broadcast_image_to, repeat_to_batch_size, resize_hint
from comfy_core.controlnet.types import StrengthType
from comfy_core.patching.patcher import Patcher


class ControlNetRunError(ValueError):
    """A ControlNet that cannot run as applied (a latent-hint ControlNet without a VAE)."""


class ControlNet(ControlBase):
    def __init__(self, control_model: nn.Module | None = None, global_average_pooling: bool = False,
                 compression_ratio: int = 8, latent_format: Any = None, load_device: Any = None,
                 manual_cast_dtype: torch.dtype | None = None, extra_conds: list[str] | tuple[str, ...] = ("y",),
                 strength_type: StrengthType = StrengthType.CONSTANT, concat_mask: bool = False,
                 preprocess_image: Callable[[torch.Tensor], torch.Tensor] = _identity) -> None:
        super().__init__()
        self.control_model = control_model
        self.load_device = load_device
        self.control_model_wrapped: Patcher | None = None
        if control_model is not None:
            self.control_model_wrapped = Patcher(control_model, load_device=load_device, offload_device="cpu")
        self.compression_ratio = compression_ratio
        self.global_average_pooling = global_average_pooling
        self.model_sampling_current: Any = None
        self.manual_cast_dtype = manual_cast_dtype
        self.latent_format = latent_format
        self.extra_conds += list(extra_conds)
        self.strength_type = strength_type
        self.concat_mask = concat_mask
        self.preprocess_image = preprocess_image

    def get_control(self, x_noisy: torch.Tensor, t: torch.Tensor, cond: dict, batched_number: int,
                    transformer_options: dict) -> Residuals | None:
        """x_noisy [B, C, h, w] (unscaled, as the sampler has it), t = sigma [B] -> residuals."""
        control_prev = None
        if self.previous_controlnet is not None:
            control_prev = self.previous_controlnet.get_control(x_noisy, t, cond, batched_number, transformer_options)
        if not self.in_range(t):
            return control_prev
        if self.model_sampling_current is None:
            raise ControlNetRunError("ControlNet.get_control called outside a sampling run (pre_run was not called)")
        dtype = self.manual_cast_dtype or self.control_model.dtype
        self._prepare_hint(x_noisy, dtype)
        if x_noisy.shape[0] != self.cond_hint.shape[0]:
            self.cond_hint = broadcast_image_to(self.cond_hint, x_noisy.shape[0], batched_number)
        context = cond.get("crossattn_controlnet", cond["c_crossattn"])
        extra = dict(self.extra_args)
        for name in self.extra_conds:
            value = cond.get(name)
            if value is not None:
                extra[name] = value.to(device=x_noisy.device, dtype=dtype) if isinstance(value, torch.Tensor) else value
        sampling = self.model_sampling_current
        timestep = sampling.timestep(t)
        x_in = sampling.calculate_input(t, x_noisy)
        with self.control_model_wrapped.applied(x_noisy.device) as network:
            control = network(x=x_in.to(dtype), hint=self.cond_hint, timesteps=timestep.to(dtype),
                              context=context.to(device=x_noisy.device, dtype=dtype), **extra)
        return self.control_merge(control, control_prev, output_dtype=None)

    def _prepare_hint(self, x_noisy: torch.Tensor, dtype: torch.dtype) -> None:
        """`cond_hint` for this latent size (kept while the size stays the same)."""
        ratio = self.compression_ratio
        # Keyed on the latent's spatial size (the last two axes: a video / one-frame latent is 5-D).
        if (self.cond_hint is not None and x_noisy.shape[-2] * ratio == self.cond_hint.shape[-2]
                and x_noisy.shape[-1] * ratio == self.cond_hint.shape[-1]):
            return
        self.cond_hint = None
        if self.vae is not None:
            ratio *= _vae_compression(self.vae)
        elif self.latent_format is not None:
            raise ControlNetRunError("this ControlNet needs a VAE but none was given: connect one to the "
                                     "apply node's vae input")
        hint = resize_hint(self.cond_hint_original, x_noisy.shape[-1] * ratio, x_noisy.shape[-2] * ratio,
                           self.upscale_algorithm)
        hint = self.preprocess_image(hint)
        if self.vae is not None:
            hint = self.vae.encode(hint.movedim(1, -1))
        if self.latent_format is not None:
            hint = self.latent_format.process_in(hint)
        if self.extra_concat_orig:
            extra = []
            for c in self.extra_concat_orig:
                c = resize_hint(c.to(hint.device), hint.shape[-1], hint.shape[-2], self.upscale_algorithm)
                if c.ndim < hint.ndim:  # a 5-D hint latent [B, C, T, h, w]: the mask on every frame
                    c = repeat_to_batch_size(c.unsqueeze(2), hint.shape[2], dim=2)
                extra.append(repeat_to_batch_size(c, hint.shape[0]))
            hint = torch.cat([hint] + extra, dim=1)
        self.cond_hint = hint.to(device=x_noisy.device, dtype=dtype)

    def copy(self) -> "ControlNet":
        c = ControlNet(None, global_average_pooling=self.global_average_pooling, load_device=self.load_device,
                       manual_cast_dtype=self.manual_cast_dtype)
        c.control_model = self.control_model
        c.control_model_wrapped = self.control_model_wrapped
        self.copy_to(c)
        return c

    def get_models(self) -> list[Any]:
        out = super().get_models()
        if self.control_model_wrapped is not None:
            out.append(self.control_model_wrapped)
        return out

    def pre_run(self, model: Any, percent_to_timestep_function: Callable[[float], float]) -> None:
        super().pre_run(model, percent_to_timestep_function)
        self.model_sampling_current = model.model_sampling

    def cleanup(self) -> None:
        self.model_sampling_current = None
        super().cleanup()


def _vae_compression(vae: Any) -> int:
    """The VAE's spatial downscale (ComfyUI's `spacial_compression_encode`), 8 for SD VAEs."""
    fn = getattr(vae, "spacial_compression_encode", None)
    return int(fn()) if callable(fn) else 8
