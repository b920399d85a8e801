"""Skip-Layer Guidance for DiT models (SD3 / SD3.5 MMDiT, Flux): the model run once more with some
transformer blocks skipped, and the guidance moved away from that weakened prediction.

Behaviour of ComfyUI 0.3.64's comfy_extras/nodes_slg.py (Dango233's experimental SD3 guidance at
Stability AI, inspired by Perturbed-Attention Guidance, Ahn et al. 2024, arXiv 2403.17377):

- a block is skipped by a `transformer_options["patches_replace"]["dit"][(kind, index)]` entry
  (kind "double_block" or "single_block") that returns its input unchanged: the DiT models call
  such a replacement with the block's inputs as a dict (`{"img", "txt", ...}`) and take the
  block's outputs from the dict it returns;
- `SkipLayerGuidance` (a `sampler_post_cfg_function`): while `sigma_end <= sigma <= sigma_start`
  and `scale > 0`, `cfg + (cond - cond_skipped) * scale`, then optionally rescaled towards the
  positive prediction's standard deviation (`rescaling_scale`, as CFG-rescale);
- `SkipLayerUncond` (a `sampler_calc_cond_batch_function`): in the sigma range, the negative
  prediction comes from the skipped model, the positive from the whole one (two passes).

Settings are data (frozen dataclasses), so equal settings give equal cache signatures.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
import torch

from comfy_core.patching.model_options import set_model_options_patch_replace
from comfy_core.sampling import cond_batch as _cond_batch

DIT_PATCH = "dit"
DOUBLE_BLOCK = "double_block"
SINGLE_BLOCK = "single_block"


def parse_layers(text: str) -> tuple[int, ...]:
    """Block indices in `text`: every run of digits, in order ("7, 8, 9" -> (7, 8, 9); ComfyUI's
    `re.findall(r"\\d+", ...)`, so any separator works and signs are ignored)."""
    return tuple(int(digits) for digits in re.findall(r"\d+", text))


def skip_block(args: dict, extra_args: dict) -> dict:
    """A DiT block replacement that skips the block: its inputs are its outputs."""
    return args


def with_skipped_blocks(model_options: dict, double_layers: tuple[int, ...],
                        single_layers: tuple[int, ...] = ()) -> dict:
    """A copy of `model_options` whose `patches_replace["dit"]` skips those double and single
    blocks (the containers on the way are copied: the caller's options are never changed)."""
    options = dict(model_options)
    for index in double_layers:
        options = set_model_options_patch_replace(options, skip_block, DIT_PATCH, DOUBLE_BLOCK, index)
    for index in single_layers:
        options = set_model_options_patch_replace(options, skip_block, DIT_PATCH, SINGLE_BLOCK, index)
    return options


def in_sigma_range(sigma: torch.Tensor, sigma_start: float, sigma_end: float) -> bool:
    """Whether the step's sigma (the first of the batch `[B]`, as ComfyUI) is in `[end, start]`."""
    value = sigma[0].item()
    return sigma_end <= value <= sigma_start


def rescale_to_cond(guided: torch.Tensor, cond_pred: torch.Tensor, rescaling_scale: float) -> torch.Tensor:
    """`guided * (r * std(cond) / std(guided) + 1 - r)`: the result's spread pulled towards the
    positive prediction's (whole-batch standard deviations, as ComfyUI's SLG)."""
    factor = cond_pred.std() / guided.std()
    return guided * (rescaling_scale * factor + (1 - rescaling_scale))


@dataclass(frozen=True)
class SkipLayerGuidance:
    """`sampler_post_cfg_function`: `cfg + (cond - cond with blocks skipped) * scale` in the sigma
    range (one more pass of the positive per step there), then the optional rescale."""

    double_layers: tuple[int, ...]
    single_layers: tuple[int, ...]
    scale: float
    sigma_start: float
    sigma_end: float
    rescaling_scale: float = 0.0

    def __call__(self, args: dict) -> torch.Tensor:
        guided = args["denoised"]  # [B, C, h, w]
        if not (self.scale > 0 and in_sigma_range(args["sigma"], self.sigma_start, self.sigma_end)):
            return guided
        options = with_skipped_blocks(args["model_options"], self.double_layers, self.single_layers)
        (skipped,) = _cond_batch.calc_cond_batch_in_force()(args["model"], [args["cond"]], args["input"], args["sigma"], options)
        cond_pred = args["cond_denoised"]
        guided = guided + (cond_pred - skipped) * self.scale
        if self.rescaling_scale != 0:
            guided = rescale_to_cond(guided, cond_pred, self.rescaling_scale)
        return guided

    def cache_signature(self) -> tuple:
        return ("SkipLayerGuidance", self.double_layers, self.single_layers, self.scale, self.sigma_start,
                self.sigma_end, self.rescaling_scale)


@dataclass(frozen=True)
class SkipLayerUncond:
    """`sampler_calc_cond_batch_function`: in the sigma range, and when there is a negative, the
    positive from the whole model and the negative from the model with the blocks skipped (two
    passes); otherwise the usual batched evaluation."""

    double_layers: tuple[int, ...]
    single_layers: tuple[int, ...]
    sigma_start: float
    sigma_end: float

    def __call__(self, args: dict) -> list[torch.Tensor]:
        model, conds, x, sigma = args["model"], args["conds"], args["input"], args["sigma"]
        model_options = args["model_options"]
        cond, uncond = conds
        if uncond is None or not in_sigma_range(sigma, self.sigma_start, self.sigma_end):
            return _cond_batch.calc_cond_batch(model, conds, x, sigma, model_options)
        skipped = with_skipped_blocks(model_options, self.double_layers, self.single_layers)
        cond_out, _ = _cond_batch.calc_cond_batch(model, [cond, None], x, sigma, model_options)
        _, uncond_out = _cond_batch.calc_cond_batch(model, [None, uncond], x, sigma, skipped)
        return [cond_out, uncond_out]

    def cache_signature(self) -> tuple:
        return ("SkipLayerUncond", self.double_layers, self.single_layers, self.sigma_start, self.sigma_end)
