"""`comfy.model_management`'s loaded models and memory rules, over our `MemoryManager`.

ComfyUI keeps `current_loaded_models`, a list of `LoadedModel` records (most recently used
first), and moves models with `load_models_gpu` / `free_memory`. Here the server's
`comfy_core.memory.MemoryManager` (the environment's `memory`) tracks our patchers; these
functions answer with ComfyUI's names, signatures and return conventions over it. Weights are
patched inside `Patcher.applied()` (reversible patches), and `load_models_gpu` leaves a module
patched until another patch set wants it (`Patcher.keep_loaded`); `LoadedModel` offers what
reads and frees, not ComfyUI's `model_load` (which returns a module patched for good).

The memory constants and load-device rules (`minimum_inference_memory`, `unet_inital_load_device`,
`text_encoder_initial_device`, ...) follow ComfyUI 0.3.64's comfy/model_management.py.
"""
from __future__ import annotations

import logging
import weakref
from typing import TYPE_CHECKING, Any, Iterable

from compat.devices import (WINDOWS, VRAMState, current_vram_state, dtype_size, flag, get_free_memory,
                            get_torch_device, get_total_memory, is_device_cuda, is_device_mps, is_device_xpu,
                            server_memory, soft_empty_cache)

if TYPE_CHECKING:
    import torch

log = logging.getLogger(__name__)

GiB = 1024 ** 3
MiB = 1024 ** 2


class _NoFinalizer:
    """A `weakref.finalize` stand-in that is never alive."""

    alive = False

    def detach(self) -> None:
        return None

    def __call__(self) -> None:
        return None


class LoadedModel:
    """ComfyUI's record of a model the memory manager tracks: `.model` is the patcher (held
    weakly, as ComfyUI does), `.device` its load device."""

    def __init__(self, model: Any) -> None:
        self._model = weakref.ref(model)
        self.device = getattr(model, "load_device", None)
        self.currently_used = True
        self.real_model = None

    @property
    def model(self) -> Any:
        return self._model()

    def model_memory(self) -> int:
        """Bytes of the model's weights."""
        return self.model.model_size()

    def model_loaded_memory(self) -> int:
        """Bytes of the weights on the load device: the resident part of a model loaded in part."""
        model = self.model
        loaded_size = getattr(model, "loaded_size", None)
        if loaded_size is not None:
            return loaded_size()
        return model.model_size() if model.current_device() == model.load_device else 0

    def model_offloaded_memory(self) -> int:
        return self.model_memory() - self.model_loaded_memory()

    def model_memory_required(self, device: Any) -> int:
        """What loading onto `device` still costs: the offloaded part, or all of it elsewhere."""
        if device == self.model.current_device():
            return self.model_offloaded_memory()
        return self.model_memory()

    def model_load(self, lowvram_model_memory: int = 0, force_patch_weights: bool = False) -> Any:
        """Load the model onto its device, patched, as `load_models_gpu` does (the memory manager
        decides a partial load itself, so `lowvram_model_memory` is not a budget here); returns
        the module (`real_model`). Packs that replace `load_models_gpu` (ComfyUI-MultiGPU) call it."""
        load_models_gpu([self.model], force_patch_weights=force_patch_weights)
        self.real_model = getattr(self.model, "model", None)
        return self.real_model

    @property
    def model_finalizer(self) -> "_NoFinalizer":
        """ComfyUI's finalizer of the loaded module: nothing to finalize here (the memory manager
        holds patchers weakly), so `detach()` has nothing to cancel."""
        return _NoFinalizer()

    def model_unload(self, memory_to_free: Any = None, unpatch_weights: bool = True) -> bool:
        """Move the model off the compute device (unless it is running); True when it was."""
        memory = server_memory()
        model = self.model
        if memory is None or model is None or getattr(model, "in_use", False):
            return False
        memory.offload(model)
        return True

    def is_dead(self) -> bool:
        return self.model is None

    def __eq__(self, other: object) -> bool:
        return isinstance(other, LoadedModel) and self.model is other.model

    __hash__ = None  # type: ignore[assignment]  # ComfyUI's LoadedModel is unhashable too


def current_loaded_models() -> list[LoadedModel]:
    """`current_loaded_models` now: the tracked patchers, most recently used first (a snapshot;
    changing the list moves nothing, unload with `LoadedModel.model_unload` or `free_memory`)."""
    memory = server_memory()
    if memory is None:
        return []
    return [LoadedModel(p) for p in reversed(memory.loaded_models())]


def loaded_models(only_currently_used: bool = False) -> list[Any]:
    """The tracked patchers, most recently used first."""
    return [record.model for record in current_loaded_models()
            if record.currently_used or not only_currently_used]


def module_size(module: Any) -> int:
    """Bytes of a module's state dict (parameters and buffers)."""
    return sum(t.nelement() * t.element_size() for t in module.state_dict().values())


def offloaded_memory(loaded_models: Iterable[LoadedModel], device: Any) -> int:
    return sum(m.model_offloaded_memory() for m in loaded_models if m.device == device)


def extra_reserved_memory() -> int:
    """Bytes kept free for other programs: `--reserve-vram` GB, else 400 MiB (600 MiB on Windows,
    700 MiB there with more than 15 GiB of VRAM), ComfyUI's `EXTRA_RESERVED_VRAM`."""
    reserve = flag("reserve_vram", None)
    if reserve is not None:
        return int(reserve * GiB)
    if not WINDOWS:
        return 400 * MiB
    return (700 if get_total_memory(get_torch_device()) / MiB > 15 * 1024 else 600) * MiB


def minimum_inference_memory() -> float:
    return 0.8 * GiB + extra_reserved_memory()


def maximum_vram_for_weights(device: Any = None) -> float:
    return get_total_memory(device) * 0.88 - minimum_inference_memory()


def free_memory(memory_required: float, device: Any, keep_loaded: Iterable[Any] = ()) -> list[LoadedModel]:
    """Offload models on `device`, least recently used first and skipping `keep_loaded`, until
    `memory_required` bytes are free (all of them with `--disable-smart-memory`); returns the
    records of the models offloaded."""
    import torch

    memory = server_memory()
    if memory is None:
        return []
    target = torch.device(device)
    kept = {id(getattr(k, "model", k)) for k in keep_loaded}
    unloaded: list[LoadedModel] = []
    smart = not flag("disable_smart_memory")
    for patcher in memory.loaded_models():  # least recently used first
        if patcher.load_device != target or id(patcher) in kept:
            continue
        if smart and get_free_memory(target) > memory_required:
            break
        record = LoadedModel(patcher)
        if record.model_unload():
            record.currently_used = False
            unloaded.append(record)
    if unloaded:
        soft_empty_cache()
    return unloaded


def _same_base(patcher: Any, other: Any) -> bool:
    """ComfyUI's "same `clone_base_uuid`": both patch one base module (`Patcher.is_clone`)."""
    is_clone = getattr(patcher, "is_clone", None)
    if callable(is_clone):
        return bool(is_clone(other))
    return patcher is other


def unload_model_and_clones(model: Any, unload_additional_models: bool = True, all_devices: bool = False) -> None:
    """Offload `model`, every tracked clone of it (a patcher of the same base module) and, with
    `unload_additional_models`, its nested additional models and their clones: `free_memory(1e30,
    device, keep_loaded=<every other tracked model>)` on the compute device, or on each device a
    tracked model is loaded on with `all_devices` (ComfyUI's, today's comfy/model_management.py)."""
    patcher = getattr(model, "patcher", model)
    targets = [patcher]
    if unload_additional_models:
        nested = getattr(patcher, "get_nested_additional_models", None)
        targets.extend(nested() if callable(nested) else [])
    records = current_loaded_models()
    keep = [r for r in records if r.model is not None and not any(_same_base(t, r.model) for t in targets)]
    devices = {str(r.device) for r in records if r.device is not None} if all_devices else {str(get_torch_device())}
    for device in devices:
        free_memory(1e30, device, keep_loaded=keep)


def load_models_gpu(models: Any, memory_required: int = 0, force_patch_weights: bool = False,
                    minimum_memory_required: Any = None, force_full_load: bool = False) -> None:
    """Make room for these patchers on the compute device (the manager's `prepare`) and leave each
    module patched as its patcher says (`Patcher.keep_loaded`), as ComfyUI's load does: a pack that
    then runs the module itself (Easy-Use: `load_model_gpu(clip.patcher)`, then a tower's
    `encode_token_weights`) gets the LoRA. The patches come off as soon as a patcher with other
    patches applies the module, or when the memory manager moves it."""
    from comfy_core.patching.errors import PatchConflictError  # torch-free module import: the surface loads early

    memory = server_memory()
    for model in models:
        patcher = getattr(model, "patcher", model)
        device = None
        if memory is not None:
            if getattr(patcher, "memory", None) is None:
                memory.track(patcher)
            device = memory.prepare(patcher)
        keep_loaded = getattr(patcher, "keep_loaded", None)
        if callable(keep_loaded):
            try:
                keep_loaded(device)
            except PatchConflictError as exc:  # called inside a run of another patch set of this module
                log.debug("load_models_gpu: %s left as it is: %s", type(patcher).__name__, exc)


def load_model_gpu(model: Any) -> None:
    load_models_gpu([model])


def unload_all_models() -> None:
    """Offload every model the server's memory manager tracks (POST /free unload_models)."""
    memory = server_memory()
    if memory is not None:
        memory.free_all()
    soft_empty_cache()


def cleanup_models() -> None:
    """Forget records of models that no longer exist (the manager prunes them when listing)."""
    memory = server_memory()
    if memory is not None:
        memory.loaded_models()


cleanup_models_gc = cleanup_models


def unet_inital_load_device(parameters: int, dtype: Any) -> torch.device:
    """Where a UNet of `parameters` weights in `dtype` is first loaded (ComfyUI's rule, its
    spelling): the compute device with --highvram or shared memory; the CPU with --novram or
    --disable-smart-memory; otherwise the compute device when it has more free memory than the
    CPU and the weights fit."""
    import torch

    device = get_torch_device()
    state = current_vram_state()
    if state in (VRAMState.HIGH_VRAM, VRAMState.SHARED):
        return device
    cpu = torch.device("cpu")
    if flag("disable_smart_memory") or state == VRAMState.NO_VRAM:
        return cpu
    size = dtype_size(dtype) * parameters
    free_device, free_cpu = get_free_memory(device), get_free_memory(cpu)
    return device if free_device > free_cpu and size < free_device else cpu


def text_encoder_initial_device(load_device: Any, offload_device: Any, model_size: int = 0) -> Any:
    """Where a text encoder is first loaded (ComfyUI's rule): the offload device for small
    (<= 1 GiB) models or when both are the same; the load device on MPS, or when it has more
    than half the offload device's free memory and the model fits with 20% to spare."""
    if load_device == offload_device or model_size <= GiB:
        return offload_device
    if is_device_mps(load_device):
        return load_device
    free_load, free_offload = get_free_memory(load_device), get_free_memory(offload_device)
    return load_device if free_load > free_offload * 0.5 and model_size * 1.2 < free_load else offload_device


def current_stream(device: Any) -> Any:
    """The stream work on `device` is queued on now: the current CUDA stream for a CUDA device,
    the current XPU stream for an XPU one, None for None and any other device (the CPU)
    (today's ComfyUI, comfy/model_management.py @02b2b388)."""
    if device is None:
        return None
    import torch

    if is_device_cuda(device):
        return torch.cuda.current_stream()
    if is_device_xpu(device):
        return torch.xpu.current_stream()
    return None


def get_offload_stream(device: Any) -> None:
    """No asynchronous offload streams here (ComfyUI's answer without --async-offload)."""
    return None


def sync_stream(device: Any, stream: Any) -> None:
    """Make `device`'s current stream wait for `stream` (a pack's own side stream; ours never
    makes one); nothing to do for no stream or a device without streams (today's ComfyUI)."""
    current = current_stream(device) if stream is not None else None
    if current is not None:
        current.wait_stream(stream)
