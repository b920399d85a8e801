"""`ModelPatcher`: the patcher MODEL carries, over a `comfy_core.models.diffusion.DiffusionModel`.

It adds ComfyUI's `model_options` conventions (comfy/model_patcher.py) that node packs call:
sampler hooks at the top level of `model_options` and block patches under
`model_options["transformer_options"]["patches"|"patches_replace"]`. The sampler and the UNet
read them; this class only stores them.
"""
from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Any, Callable

import torch

from comfy_core.patching.patcher import Patcher


def _positional_arity(fn: Callable) -> int | None:
    """How many parameters `fn` declares (None when it cannot be inspected), as ComfyUI counts them."""
    try:
        return len(inspect.signature(fn).parameters)
    except (TypeError, ValueError):
        return None


@dataclass(frozen=True)
class _OldCfgFunction:
    """ComfyUI's pre-args `sampler_cfg_function(cond, uncond, cond_scale)` seen through the args form."""

    fn: Callable

    def __call__(self, args: dict) -> Any:
        return self.fn(args["cond"], args["uncond"], args["cond_scale"])


class ModelPatcher(Patcher):
    """Patcher for MODEL. `model` is the DiffusionModel; its UNet is `model.diffusion_model`."""

    @property
    def model_sampling(self) -> Any:
        return self.get_model_object("model_sampling")

    def model_dtype(self) -> torch.dtype:
        for p in self.model.parameters():
            return p.dtype
        return torch.float32

    # --- sampler-level hooks (read by the sampler) ---

    def set_model_sampler_cfg_function(self, sampler_cfg_function: Callable, disable_cfg1_optimization: bool = False) -> None:
        """Replace CFG by `fn(args) -> noise prediction` (see comfy_core/sampling/cfg.py); a function of
        three parameters is ComfyUI's old form `fn(cond, uncond, cond_scale)` and is adapted."""
        if _positional_arity(sampler_cfg_function) == 3:
            sampler_cfg_function = _OldCfgFunction(sampler_cfg_function)
        self.model_options["sampler_cfg_function"] = sampler_cfg_function
        if disable_cfg1_optimization:
            self.model_options["disable_cfg1_optimization"] = True

    def set_model_sampler_post_cfg_function(self, post_cfg_function: Callable, disable_cfg1_optimization: bool = False) -> None:
        """Append `fn(args) -> x0 prediction`, run after CFG in order (args["denoised"] is the result so far)."""
        self.model_options["sampler_post_cfg_function"] = self.model_options.get("sampler_post_cfg_function", []) + [post_cfg_function]
        if disable_cfg1_optimization:
            self.model_options["disable_cfg1_optimization"] = True

    def set_model_sampler_pre_cfg_function(self, pre_cfg_function: Callable, disable_cfg1_optimization: bool = False) -> None:
        """Append `fn(args) -> conds_out`, run before CFG on the list [positive x0, negative x0, ...]."""
        self.model_options["sampler_pre_cfg_function"] = self.model_options.get("sampler_pre_cfg_function", []) + [pre_cfg_function]
        if disable_cfg1_optimization:
            self.model_options["disable_cfg1_optimization"] = True

    def set_model_unet_function_wrapper(self, unet_wrapper_function: Callable) -> None:
        self.model_options["model_function_wrapper"] = unet_wrapper_function

    def set_model_denoise_mask_function(self, denoise_mask_function: Callable) -> None:
        self.model_options["denoise_mask_function"] = denoise_mask_function

    # --- block-level patches (read by the UNet's transformer blocks) ---

    def _transformer_options(self) -> dict:
        return self.model_options.setdefault("transformer_options", {})

    def set_model_patch(self, patch: Callable, name: str) -> None:
        patches = self._transformer_options().setdefault("patches", {})
        patches[name] = patches.get(name, []) + [patch]

    def set_model_patch_replace(self, patch: Callable, name: str, block_name: str, number: int,
                                transformer_index: int | None = None) -> None:
        replace = self._transformer_options().setdefault("patches_replace", {})
        block = (block_name, number) if transformer_index is None else (block_name, number, transformer_index)
        replace.setdefault(name, {})[block] = patch

    def set_model_attn1_patch(self, patch: Callable) -> None:
        self.set_model_patch(patch, "attn1_patch")

    def set_model_attn2_patch(self, patch: Callable) -> None:
        self.set_model_patch(patch, "attn2_patch")

    def set_model_attn1_output_patch(self, patch: Callable) -> None:
        self.set_model_patch(patch, "attn1_output_patch")

    def set_model_attn2_output_patch(self, patch: Callable) -> None:
        self.set_model_patch(patch, "attn2_output_patch")

    def set_model_input_block_patch(self, patch: Callable) -> None:
        self.set_model_patch(patch, "input_block_patch")

    def set_model_input_block_patch_after_skip(self, patch: Callable) -> None:
        self.set_model_patch(patch, "input_block_patch_after_skip")

    def set_model_output_block_patch(self, patch: Callable) -> None:
        self.set_model_patch(patch, "output_block_patch")

    def set_model_attn1_replace(self, patch: Callable, block_name: str, number: int,
                                transformer_index: int | None = None) -> None:
        self.set_model_patch_replace(patch, "attn1", block_name, number, transformer_index)

    def set_model_attn2_replace(self, patch: Callable, block_name: str, number: int,
                                transformer_index: int | None = None) -> None:
        self.set_model_patch_replace(patch, "attn2", block_name, number, transformer_index)

    def model_patches_to(self, device: torch.device | str | torch.dtype) -> None:
        """Move tensors held by block patches (objects with `.to`) to `device` (or cast to a dtype)."""
        to = self.model_options.get("transformer_options", {})
        for patch_list in to.get("patches", {}).values():
            for i, patch in enumerate(patch_list):
                if hasattr(patch, "to"):
                    patch_list[i] = patch.to(device)
        for by_block in to.get("patches_replace", {}).values():
            for block, patch in by_block.items():
                if hasattr(patch, "to"):
                    by_block[block] = patch.to(device)
        wrapper = self.model_options.get("model_function_wrapper")
        if hasattr(wrapper, "to"):
            self.model_options["model_function_wrapper"] = wrapper.to(device)
