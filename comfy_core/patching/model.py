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

from comfy_core import extension_points
from comfy_core.patching import model_options as mo
from comfy_core.patching.errors import PatchError
from comfy_core.patching.model_extensions import ModelPatcherExtensions
from comfy_core.patching.patcher import Patcher, _resolve_parent
from comfy_core.patching.weight_access import stored_form, true_weight
from comfy_core.weights.entries import apply_patches, calculate_weight as _calculate_weight
from comfy_core.wrappers import CallbacksMP


def _positional_arity(fn: Callable) -> int | None:
    """How many parameters `fn` declares (None when it cannot be inspected), as ComfyUI counts them."""
    try:
        return len(inspect.signature(fn).parameters)
    except (TypeError, ValueError):
        return None


@dataclass(frozen=True)
class _Backup:
    """ComfyUI's `backup` entry (a `Dimension(weight, inplace_update)` namedtuple there)."""

    weight: torch.Tensor
    inplace_update: bool


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
        """Bytes of the model on `load_device` now: the resident part of a model its memory
        manager loads in part (comfy_core/memory.py), else all of it or nothing."""
        partial = getattr(self.memory, "loaded_weight_bytes", None) if self.memory is not None else None
        if partial is not None and (resident := partial(self)) is not None:
            return resident
        return self.model_size() if self.current_device() == self.load_device else 0

    def lowvram_patch_counter(self) -> int:
        """Weight patches on modules streamed per forward (a model loaded in part), else 0."""
        count = getattr(self.memory, "lowvram_patch_count", None) if self.memory is not None else None
        return count(self) if count is not None else 0

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
        `patch_model()`: inside one the weight already holds its patches, outside it is an error.

        A subclass that overrides this (ComfyUI-GGUF's GGUFModelPatcher) is called for each
        patched key while `applied()` puts the patches on (see `_patch_weights_one_by_one`); when
        it calls this method there, the weight is patched here, as ComfyUI's
        comfy/model_patcher.py `patch_weight_to_device` (float32 copy, `comfy.lora.calculate_weight`)."""
        if self.__dict__.get("_patching_one_by_one"):
            self._patch_one_weight(key, device_to, inplace_update)
            return
        if not self.in_use:
            raise PatchError(f"patch_weight_to_device({key!r}): weights are patched by ModelPatcher.patch_model() "
                             "or `with patcher.applied():`, not one by one")

    def unpatch_model(self, device_to: torch.device | str | None = None, unpatch_weights: bool = True) -> None:
        """ComfyUI's explicit form (comfy_core/patching/patcher.py). Called by our own restore
        (`_unpatch_after_restore`), it restores what a subclass changed in place from `backup`."""
        if self.__dict__.get("_restoring"):
            self._restore_backup()
            return
        super().unpatch_model(device_to)

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
        if weight_sig and type(self).patch_weight_to_device is not ModelPatcher.patch_weight_to_device:
            super()._apply(device, ())  # the device and object patches; the weights one by one:
            self._patch_weights_one_by_one(device)
        else:
            super()._apply(device, weight_sig)
        for callback in self.get_all_callbacks(CallbacksMP.ON_LOAD):
            callback(self, device, 0, True, True)  # (patcher, device_to, lowvram memory, force, full)

    # --- weights patched one by one by a subclass (ComfyUI's load / unpatch_model path) ---

    def _patch_weights_one_by_one(self, device: torch.device) -> None:
        """Call `patch_weight_to_device(key, device_to=device)` for each patched weight, as
        ComfyUI's `ModelPatcher.load` does, for a subclass that puts patches its own way (GGUF
        hangs them on its quantized tensors). Whatever tensor object it leaves at a key is swapped
        in through the shared state, so the module's own tensor comes back on restore; then
        `unpatch_model(unpatch_weights=True)` lets the subclass undo what it set on those tensors."""
        state = self._state
        state.on_restore(self._unpatch_after_restore)  # registered first: also runs if a key fails
        self.__dict__["_patching_one_by_one"] = True
        try:
            with torch.no_grad():
                for key, entries in self.patches.items():
                    if not entries:
                        continue
                    owner, attr = _resolve_parent(self.model, key)
                    store = owner._parameters if attr in owner._parameters else owner._buffers
                    original = store.get(attr)
                    if original is None:
                        raise PatchError(f"weight patch {key!r}: the module has no tensor there")
                    self.patch_weight_to_device(key, device_to=device)
                    replaced = store.get(attr)
                    if replaced is not original:
                        store[attr] = original  # the state records the module's own tensor ...
                        state.swap_weight(owner, attr, key, replaced)  # ... and puts the new one in
                    state.stats.weights_computed += 1
        finally:
            del self.__dict__["_patching_one_by_one"]

    def _patch_one_weight(self, key: str, device_to: Any, inplace_update: bool) -> None:
        """ComfyUI's own `patch_weight_to_device` (a subclass calling super() gets this)."""
        if key not in self.patches:
            return
        calculate_weight = extension_points.current().calculate_weight or apply_patches

        owner, attr = _resolve_parent(self.model, key)
        weight = owner._parameters.get(attr) if attr in owner._parameters else owner._buffers.get(attr)
        working = true_weight(owner, attr, weight, device_to or weight.device)  # scaled fp8: times its scale
        patched = stored_form(owner, attr, key, calculate_weight(self.patches[key], working, key),
                              weight.dtype)
        if inplace_update or self.weight_inplace_update:
            if key not in self.backup:
                self.backup[key] = _Backup(weight.detach().to(self.offload_device, copy=True), True)
            weight.data.copy_(patched)
        elif attr in owner._parameters:
            owner._parameters[attr] = nn.Parameter(patched, requires_grad=False)
        else:
            owner._buffers[attr] = patched

    def _unpatch_after_restore(self) -> None:
        """Run by the shared state once the module's own tensors are back: the subclass's
        `unpatch_model(unpatch_weights=True)` (GGUF clears the patches it hung on them)."""
        self.__dict__["_restoring"] = True
        try:
            self.unpatch_model(None, unpatch_weights=True)
        finally:
            del self.__dict__["_restoring"]

    def _restore_backup(self) -> None:
        """Values a subclass changed in place (ComfyUI's `backup` with `inplace_update`) copied back."""
        with torch.no_grad():
            for key, saved in self.backup.items():
                if getattr(saved, "inplace_update", False):
                    owner, attr = _resolve_parent(self.model, key)
                    current = owner._parameters.get(attr) if attr in owner._parameters else owner._buffers.get(attr)
                    current.data.copy_(saved.weight.to(current.device))
        self.backup.clear()

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
