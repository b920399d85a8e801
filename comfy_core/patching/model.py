"""`ModelPatcher`: the patcher MODEL carries, over a `comfy_core.models.diffusion.DiffusionModel`.

It is also ComfyUI's `comfy.model_patcher.ModelPatcher` for node packs (the surface module names
this class): ComfyUI's constructor `(model, load_device, offload_device, size=0,
weight_inplace_update=False)`, its `model_options` conventions (sampler hooks at the top level,
block patches under `model_options["transformer_options"]["patches"|"patches_replace"]`, read by
the sampler and the UNet; this class only stores them), its wrappers, callbacks, attachments,
injections and additional models (comfy_core/patching/model_extensions.py), and its explicit
`patch_model()` / `unpatch_model()` (comfy_core/patching/patcher.py). Subclasses packs write
(ComfyUI-GGUF's, AnimateDiff's) keep their class through `clone()`.
"""
from __future__ import annotations

import contextlib
import inspect
from dataclasses import dataclass
from typing import Any, Callable, Iterator

import torch
from torch import nn

from comfy_core.patching import model_options as mo
from comfy_core.patching.errors import PatchError
from comfy_core.patching.model_extensions import ModelPatcherExtensions
from comfy_core.patching.patcher import Patcher
from comfy_core.patching.weights import calculate_weight as _calculate_weight
from comfy_core.patching.wrappers import CallbacksMP


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


class ModelPatcher(ModelPatcherExtensions, Patcher):
    """Patcher for MODEL. `model` is the DiffusionModel; its UNet is `model.diffusion_model`."""

    def __init__(self, model: nn.Module, load_device: torch.device | str | None = None,
                 offload_device: torch.device | str | None = None, size: int = 0,
                 weight_inplace_update: bool = False, *, cache_patched_weights: bool = True) -> None:
        super().__init__(model, load_device, offload_device, cache_patched_weights=cache_patched_weights)
        # `weight_inplace_update` is ComfyUI's "copy patched values into the original tensors";
        # ours always swaps tensor objects (restored bit-exactly), so it is kept for packs to read.
        self._init_extensions(size, weight_inplace_update)

    def clone(self) -> "ModelPatcher":
        n = super().clone()
        self._clone_extensions(n)
        return n

    @property
    def model_sampling(self) -> Any:
        return self.get_model_object("model_sampling")

    def model_dtype(self) -> torch.dtype:
        get_dtype = getattr(self.model, "get_dtype", None)
        if get_dtype is not None:
            return get_dtype()
        for p in self.model.parameters():
            return p.dtype
        return torch.float32

    # --- sizes and devices (ComfyUI's names) ---

    def model_size(self) -> int:
        """Bytes of the base module's tensors (`size` when the constructor was given one)."""
        if self.size > 0:
            return self.size
        self.size = super().model_size()
        return self.size

    def loaded_size(self) -> int:
        """Bytes of the model on `load_device` now: all of it or nothing (we never load in part)."""
        return self.model_size() if self.current_device() == self.load_device else 0

    def lowvram_patch_counter(self) -> int:
        """Weights patched on the fly by low-VRAM loading: none here (patches apply whole)."""
        return 0

    def current_loaded_device(self) -> torch.device:
        return self.current_device()

    def memory_required(self, input_shape: Any) -> float:
        return self.model.memory_required(input_shape=input_shape)

    # --- weights (ComfyUI's explicit forms) ---

    def calculate_weight(self, patches: list, weight: torch.Tensor, key: str,
                         intermediate_dtype: torch.dtype = torch.float32) -> torch.Tensor:
        """`weight` with ComfyUI-form patch entries applied (comfy.lora.calculate_weight)."""
        return _calculate_weight(weight, patches, key)

    def patch_weight_to_device(self, key: str, device_to: Any = None, inplace_update: bool = False) -> None:
        """ComfyUI patches one weight here; ours are patched together by `applied()` /
        `patch_model()`: inside one the weight already holds its patches, outside it is an error."""
        if not self.in_use:
            raise PatchError(f"patch_weight_to_device({key!r}): weights are patched by ModelPatcher.patch_model() "
                             "or `with patcher.applied():`, not one by one")

    def set_model_compute_dtype(self, dtype: torch.dtype | None) -> None:
        """Compute in `dtype` (weights cast per layer), as ComfyUI: the model's `manual_cast_dtype`."""
        self.add_object_patch("manual_cast_dtype", dtype)

    # --- application: injections and ON_LOAD callbacks ---

    @contextlib.contextmanager
    def applied(self, device: torch.device | str | None = None) -> Iterator[nn.Module]:
        """As `Patcher.applied`, with the pack injections (`set_injections`) on for the block."""
        with super().applied(device) as module:
            injected = bool(self.injections) and not self.is_injected
            if injected:
                self.inject_model()
            try:
                yield module
            finally:
                if injected:
                    self.eject_model()

    def _apply(self, device: torch.device, weight_sig: Any) -> None:
        super()._apply(device, weight_sig)
        for callback in self.get_all_callbacks(CallbacksMP.ON_LOAD):
            callback(self, device, 0, True, True)  # (patcher, device_to, lowvram memory, force, full)

    def model_patches_models(self) -> list:
        """Models that block patches carry (objects with `.models()`), loaded beside this one."""
        to = self.model_options.get("transformer_options", {})
        found = [p for plist in to.get("patches", {}).values() for p in plist]
        found += [p for by_block in to.get("patches_replace", {}).values() for p in by_block.values()]
        wrapper = self.model_options.get("model_function_wrapper")
        if wrapper is not None:
            found.append(wrapper)
        return [m for p in found if hasattr(p, "models") for m in p.models()]

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
        mo.set_model_options_post_cfg_function(self.model_options, post_cfg_function, disable_cfg1_optimization)

    def set_model_sampler_pre_cfg_function(self, pre_cfg_function: Callable, disable_cfg1_optimization: bool = False) -> None:
        """Append `fn(args) -> conds_out`, run before CFG on the list [positive x0, negative x0, ...]."""
        mo.set_model_options_pre_cfg_function(self.model_options, pre_cfg_function, disable_cfg1_optimization)

    def set_model_sampler_calc_cond_batch_function(self, sampler_calc_cond_batch_function: Callable) -> None:
        """Replace the batching of conds: `fn(args) -> [x0 per cond]` (comfy_core/sampling/cfg.py)."""
        self.model_options["sampler_calc_cond_batch_function"] = sampler_calc_cond_batch_function

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

    def set_model_emb_patch(self, patch: Callable) -> None:
        self.set_model_patch(patch, "emb_patch")

    def set_model_forward_timestep_embed_patch(self, patch: Callable) -> None:
        self.set_model_patch(patch, "forward_timestep_embed_patch")

    def set_model_double_block_patch(self, patch: Callable) -> None:
        self.set_model_patch(patch, "double_block")

    def set_model_post_input_patch(self, patch: Callable) -> None:
        self.set_model_patch(patch, "post_input")

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
