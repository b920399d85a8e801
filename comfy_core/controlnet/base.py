"""`ControlBase`: what every ControlNet-like object shares (the CONTROL_NET wire value).

After ComfyUI's `comfy/controlnet.py: ControlBase` (the surface node packs use):
`set_cond_hint(hint, strength, (start, end), vae, extra_concat)`, `copy()`,
`set_previous_controlnet(prev)` (chains: each object runs its predecessor first and adds its
residuals to the predecessor's), `pre_run(model, percent_to_sigma)` before a sampling run (the
percent range becomes a sigma range, `timestep_range`), `cleanup()` after it, `get_models()`,
`set_extra_arg(name, value)` (e.g. the union `control_type`), `control_merge` (strength,
global average pooling, dtype, adding the previous residuals).

A subclass implements `get_control(x_noisy, sigma, cond, batched_number, transformer_options)`.
"""
from __future__ import annotations

import logging
from typing import Any, Callable

import torch

from comfy_core.controlnet.types import StrengthType

log = logging.getLogger(__name__)

Residuals = dict[str, list[torch.Tensor | None]]
KINDS = ("input", "middle", "output")


class ControlBase:
    """Hint, strength, percent range and chaining of one applied ControlNet (see module doc)."""

    def __init__(self) -> None:
        self.cond_hint_original: torch.Tensor | None = None  # [B, C, H, W] 0..1, as applied
        self.cond_hint: torch.Tensor | None = None  # prepared for the current latent size
        self.strength = 1.0
        self.timestep_percent_range: tuple[float, float] = (0.0, 1.0)
        self.latent_format: Any = None  # set for ControlNets that take a VAE-encoded hint
        self.vae: Any = None
        self.global_average_pooling = False
        self.timestep_range: tuple[float, float] | None = None  # sigmas, set by pre_run
        self.compression_ratio = 8
        self.upscale_algorithm = "nearest-exact"
        self.extra_args: dict[str, Any] = {}
        self.previous_controlnet: ControlBase | None = None
        self.extra_conds: list[str] = []
        self.strength_type = StrengthType.CONSTANT
        self.concat_mask = False
        self.extra_concat_orig: list[torch.Tensor] = []
        self.extra_concat: list[torch.Tensor] | None = None
        self.extra_hooks: Any = None
        self.preprocess_image: Callable[[torch.Tensor], torch.Tensor] = _identity

    # --- applying ---

    def set_cond_hint(self, cond_hint: torch.Tensor, strength: float = 1.0,
                      timestep_percent_range: tuple[float, float] = (0.0, 1.0), vae: Any = None,
                      extra_concat: list[torch.Tensor] | None = None) -> "ControlBase":
        """Set the hint `[B, C, H, W]`, strength and (start, end) percents; returns self.
        The VAE is kept only by ControlNets whose hint is a latent (`latent_format` set)."""
        self.cond_hint_original = cond_hint
        self.strength = strength
        self.timestep_percent_range = timestep_percent_range
        if self.latent_format is not None:
            if vae is None:
                log.warning("this ControlNet needs a VAE for its hint and none was given to the apply node")
            self.vae = vae
        self.extra_concat_orig = list(extra_concat or [])
        if self.concat_mask and not self.extra_concat_orig:
            self.extra_concat_orig.append(torch.tensor([[[[1.0]]]]))
        return self

    def set_previous_controlnet(self, controlnet: "ControlBase | None") -> "ControlBase":
        self.previous_controlnet = controlnet
        return self

    def set_extra_arg(self, argument: str, value: Any = None) -> None:
        self.extra_args[argument] = value

    # --- a sampling run ---

    def pre_run(self, model: Any, percent_to_timestep_function: Callable[[float], float]) -> None:
        """Before sampling: the percent range as sigmas (start is the larger sigma)."""
        start, end = self.timestep_percent_range
        self.timestep_range = (percent_to_timestep_function(start), percent_to_timestep_function(end))
        if self.previous_controlnet is not None:
            self.previous_controlnet.pre_run(model, percent_to_timestep_function)

    def cleanup(self) -> None:
        """After sampling: drop what was prepared for the run (here and down the chain)."""
        if self.previous_controlnet is not None:
            self.previous_controlnet.cleanup()
        self.cond_hint = None
        self.extra_concat = None
        self.timestep_range = None

    def in_range(self, sigma: torch.Tensor) -> bool:
        """Whether this step's sigma lies inside the range set by `pre_run` (always, before it)."""
        if self.timestep_range is None:
            return True
        return not (sigma[0] > self.timestep_range[0] or sigma[0] < self.timestep_range[1])

    def get_control(self, x_noisy: torch.Tensor, t: torch.Tensor, cond: dict, batched_number: int,
                    transformer_options: dict) -> Residuals | None:
        raise NotImplementedError

    def get_models(self) -> list[Any]:
        """The patchers this chain runs (ComfyUI loads them with the model)."""
        return self.previous_controlnet.get_models() if self.previous_controlnet is not None else []

    def get_extra_hooks(self) -> list[Any]:
        out = [self.extra_hooks] if self.extra_hooks is not None else []
        if self.previous_controlnet is not None:
            out += self.previous_controlnet.get_extra_hooks()
        return out

    def inference_memory_requirements(self, dtype: torch.dtype) -> int:
        if self.previous_controlnet is not None:
            return self.previous_controlnet.inference_memory_requirements(dtype)
        return 0

    # --- copying ---

    def copy(self) -> "ControlBase":
        raise NotImplementedError

    def copy_to(self, c: "ControlBase") -> None:
        """Copy the applied settings (not the prepared run state) onto `c`."""
        c.cond_hint_original = self.cond_hint_original
        c.strength = self.strength
        c.timestep_percent_range = self.timestep_percent_range
        c.global_average_pooling = self.global_average_pooling
        c.compression_ratio = self.compression_ratio
        c.upscale_algorithm = self.upscale_algorithm
        c.latent_format = self.latent_format
        c.extra_args = dict(self.extra_args)
        c.vae = self.vae
        c.extra_conds = list(self.extra_conds)
        c.strength_type = self.strength_type
        c.concat_mask = self.concat_mask
        c.extra_concat_orig = list(self.extra_concat_orig)
        c.extra_hooks = self.extra_hooks.clone() if self.extra_hooks is not None else None
        c.preprocess_image = self.preprocess_image

    # --- residuals ---

    def control_merge(self, control: Residuals, control_prev: Residuals | None,
                      output_dtype: torch.dtype | None) -> Residuals:
        """Scale this network's residuals (in place; a tensor shared between entries once), pool
        them when `global_average_pooling`, cast them, then add the previous chain's residuals."""
        out: Residuals = {kind: [] for kind in KINDS}
        for kind, residuals in control.items():
            scaled: set[int] = set()
            for i, x in enumerate(residuals):
                if x is not None:
                    if self.global_average_pooling:
                        x = x.mean(dim=(2, 3), keepdim=True).repeat(1, 1, x.shape[2], x.shape[3])
                    if id(x) not in scaled:
                        scaled.add(id(x))
                        if self.strength_type == StrengthType.CONSTANT:
                            x *= self.strength
                        elif self.strength_type == StrengthType.LINEAR_UP:
                            x *= self.strength ** float(len(residuals) - i)
                    if output_dtype is not None and x.dtype != output_dtype:
                        x = x.to(output_dtype)
                out.setdefault(kind, []).append(x)
        if control_prev is not None:
            for kind in KINDS:
                mine = out[kind]
                for i, prev in enumerate(control_prev.get(kind, [])):
                    if i >= len(mine):
                        mine.append(prev)
                    elif prev is not None:
                        mine[i] = prev if mine[i] is None else prev + mine[i]
        return out


def _identity(image: torch.Tensor) -> torch.Tensor:
    return image
