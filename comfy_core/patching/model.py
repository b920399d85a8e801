"""`ModelPatcher`: the patcher MODEL carries, over a `comfy_core.models.diffusion.DiffusionModel`.

It holds patches and options as data, in ComfyUI's `model_options` conventions (sampler hooks at
the top level, block patches under `model_options["transformer_options"]["patches"|
"patches_replace"]`, read by the sampler and the model's blocks; this class only stores them:
`set_option`, `add_option_function`, `add_block_patch`, `set_block_replace`), with ComfyUI's
constructor `(model, load_device, offload_device, size=0, weight_inplace_update=False)`, its
wrappers, callbacks, attachments, injections and additional models
(comfy_core/patching/model_extensions.py), and its explicit `patch_model()` / `unpatch_model()`
(comfy_core/patching/patcher.py). ComfyUI's `set_model_*` methods and its other accessors are
compat's (`comfy.model_patcher.ModelPatcher`, a subclass): a patcher built where the extension points in
force name a class for it (`model_patcher_class`) becomes that class, and `clone()` keeps the
class (packs' subclasses too: ComfyUI-GGUF's, AnimateDiff's).
"""
from __future__ import annotations

import contextlib
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
from comfy_core.weights.entries import apply_patches
from comfy_core.wrappers import CallbacksMP


@dataclass(frozen=True)
class _Backup:
    """ComfyUI's `backup` entry (a `Dimension(weight, inplace_update)` namedtuple there)."""

    weight: torch.Tensor
    inplace_update: bool


class ModelPatcher(ModelPatcherExtensions, Patcher):
    """Patcher for MODEL. `model` is the DiffusionModel; its UNet is `model.diffusion_model`."""

    # A core class a host may have built as its own subclass (`ExtensionPoints.model_patcher_class`);
    # read from the class's own namespace, so subclasses (a host's, a pack's) are kept as they are.
    _host_replaceable = True

    def __init__(self, model: nn.Module, load_device: torch.device | str | None = None,
                 offload_device: torch.device | str | None = None, size: int = 0,
                 weight_inplace_update: bool = False, *, cache_patched_weights: bool = True) -> None:
        super().__init__(model, load_device, offload_device, cache_patched_weights=cache_patched_weights)
        # `weight_inplace_update` is ComfyUI's "copy patched values into the original tensors": with
        # it, applying copies them into the module's own tensors (which packs may hold) and back
        # after (comfy_core/patching/state.py `swap_weight`); without it tensor objects are swapped.
        self._init_extensions(size, weight_inplace_update)
        self._take_host_class()

    def _take_host_class(self) -> None:
        """Become the class the extension points in force name for this core class (compat:
        ComfyUI's `comfy.model_patcher.ModelPatcher`, with its `set_model_*` methods); the subclass
        adds no state. `clone()` keeps the class, as it keeps a pack's subclass."""
        cls = type(self)
        resolver = extension_points.current().model_patcher_class
        if resolver is None or not cls.__dict__.get("_host_replaceable", False):
            return
        chosen = resolver(cls)
        if chosen is None or chosen is cls:
            return
        if not (isinstance(chosen, type) and issubclass(chosen, cls)):
            raise TypeError(f"model_patcher_class for {cls.__name__}: {chosen!r} is not a subclass of it")
        self.__class__ = chosen

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

    # --- weights (ComfyUI's explicit forms) ---

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

    # --- hooks and block patches as data (read by the sampler and the model's blocks) ---

    def add_option_function(self, key: str, function: Callable, disable_cfg1_optimization: bool = False) -> None:
        """Append `function` to the list `model_options[key]` (`sampler_pre_cfg_function`,
        `sampler_post_cfg_function`: run in order by comfy_core/sampling/cfg.py); with
        `disable_cfg1_optimization`, the sampler also evaluates the negative at CFG 1."""
        mo.append_model_option(self.model_options, key, function, disable_cfg1_optimization)

    def add_block_patch(self, name: str, patch: Callable) -> None:
        """Append `patch` to `transformer_options["patches"][name]` (`attn1_patch`,
        `output_block_patch`, `double_block`, ...: the blocks run them in order)."""
        mo.set_model_options_patch(self.model_options, patch, name)

    def set_block_replace(self, name: str, block: tuple, patch: Callable) -> None:
        """`transformer_options["patches_replace"][name][block] = patch`: the block `block`
        (`(block_name, number)` or `(block_name, number, transformer_index)`) runs `patch` in
        place of its `name` part (`attn1`, `attn2`, `dit`)."""
        mo.set_model_options_patch_replace(self.model_options, patch, name, *block)
