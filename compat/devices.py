"""`comfy.model_management` for packs: devices, interrupts, memory (ComfyUI's names).

Interrupts map onto the running node's context (graph.context): `processing_interrupted()`
reads it and `throw_exception_if_processing_interrupted()` raises
`InterruptProcessingException`, which *is* `graph.context.Interrupted`, so the executor reports
`execution_interrupted` and a pack's `except InterruptProcessingException` catches ours. Devices
and unloading go to the server's `comfy_core.memory.MemoryManager` (the environment's `memory`).

torch is imported inside the functions (and `OOM_EXCEPTION` resolved on first access): packs
import `comfy.model_management` at start-up, before the server answers /object_info, and
start-up stays torch-free (torch loads in the background once the server listens,
web/warmup.py).
"""
from __future__ import annotations

import gc
from enum import Enum
from typing import TYPE_CHECKING, Any

from compat.session import active
from graph.context import Interrupted, current

if TYPE_CHECKING:
    import torch

InterruptProcessingException = Interrupted


def __getattr__(name: str) -> Any:
    """`OOM_EXCEPTION` (torch's out-of-memory error), looked up when a pack first reads it."""
    if name == "OOM_EXCEPTION":
        import torch

        return getattr(torch, "OutOfMemoryError", None) or torch.cuda.OutOfMemoryError
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


class VRAMState(Enum):
    """ComfyUI's enum; here only NORMAL_VRAM (GPU) and DISABLED (CPU) are ever reported."""

    DISABLED = 0
    NO_VRAM = 1
    LOW_VRAM = 2
    NORMAL_VRAM = 3
    HIGH_VRAM = 4
    SHARED = 5


def _memory() -> Any:
    return getattr(active().env, "memory", None)


def get_torch_device() -> torch.device:
    """The compute device of the server (its memory manager's), else the best available."""
    from comfy_core.memory import choose_device

    memory = _memory()
    return memory.device if memory is not None else choose_device()


def intermediate_device() -> torch.device:
    """Where nodes hand tensors to each other: the CPU, as in ComfyUI (without --gpu-only)."""
    import torch

    return torch.device("cpu")


def unet_offload_device() -> torch.device:
    import torch

    memory = _memory()
    return memory.offload_device if memory is not None else torch.device("cpu")


text_encoder_offload_device = vae_offload_device = unet_offload_device
text_encoder_device = vae_device = get_torch_device


def cpu_mode() -> bool:
    return get_torch_device().type == "cpu"


def is_device_cpu(device: Any) -> bool:
    import torch

    return torch.device(device).type == "cpu"


def is_device_mps(device: Any) -> bool:
    import torch

    return torch.device(device).type == "mps"


def is_device_cuda(device: Any) -> bool:
    import torch

    return torch.device(device).type == "cuda"


def vram_state() -> VRAMState:
    return VRAMState.DISABLED if cpu_mode() else VRAMState.NORMAL_VRAM


def get_total_memory(dev: Any = None, torch_total_too: bool = False) -> Any:
    import psutil
    import torch

    device = torch.device(dev) if dev is not None else get_torch_device()
    if device.type == "cuda":
        total = torch.cuda.get_device_properties(device).total_memory
        reserved = torch.cuda.memory_reserved(device)
        return (total, reserved) if torch_total_too else total
    total = psutil.virtual_memory().total
    return (total, total) if torch_total_too else total


def get_free_memory(dev: Any = None, torch_free_too: bool = False) -> Any:
    import psutil
    import torch

    device = torch.device(dev) if dev is not None else get_torch_device()
    if device.type == "cuda":
        free, _ = torch.cuda.mem_get_info(device)
        torch_free = torch.cuda.memory_reserved(device) - torch.cuda.memory_allocated(device)
        return (free + torch_free, torch_free) if torch_free_too else free + torch_free
    free = psutil.virtual_memory().available
    return (free, free) if torch_free_too else free


def processing_interrupted() -> bool:
    """True when the running prompt was interrupted (False outside a node)."""
    ctx = current()
    return bool(ctx is not None and ctx.is_interrupted())


def throw_exception_if_processing_interrupted() -> None:
    """Raise `InterruptProcessingException` when the running prompt was interrupted."""
    ctx = current()
    if ctx is not None:
        ctx.check_interrupt()


def interrupt_current_processing(value: bool = True) -> None:
    """Interrupt the running prompt (a pack's stop button); `False` is ignored here, because
    our interrupt flag belongs to one prompt and is cleared when the next one starts."""
    if not value:
        return
    state = active().state
    if state is None:
        raise RuntimeError("interrupt_current_processing: no server is bound to the compat layer")
    state.queue.interrupt()


def soft_empty_cache(force: bool = False) -> None:
    """Return cached allocator memory to the device (CUDA/MPS); a no-op on the CPU."""
    import torch

    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
        torch.cuda.ipc_collect()
    mps = getattr(torch, "mps", None)
    if mps is not None and getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available():
        mps.empty_cache()


def unload_all_models() -> None:
    """Offload every model the server's memory manager tracks (POST /free unload_models)."""
    memory = _memory()
    if memory is not None:
        memory.free_all()
    soft_empty_cache()


def free_memory(memory_required: int, device: Any, keep_loaded: Any = ()) -> None:
    """ComfyUI frees until `memory_required` bytes fit; our manager offloads whatever is idle."""
    unload_all_models()


def load_models_gpu(models: Any, memory_required: int = 0, force_patch_weights: bool = False,
                    minimum_memory_required: Any = None, force_full_load: bool = False) -> None:
    """Make room for these patchers on the compute device (the manager's `prepare`)."""
    memory = _memory()
    if memory is None:
        return
    for model in models:
        patcher = getattr(model, "patcher", model)
        if getattr(patcher, "memory", None) is None:
            memory.track(patcher)
        memory.prepare(patcher)


def load_model_gpu(model: Any) -> None:
    load_models_gpu([model])


def xformers_enabled() -> bool:
    from importlib.util import find_spec

    return find_spec("xformers") is not None


def unet_dtype(device: Any = None, model_params: int = 0, supported_dtypes: Any = None) -> torch.dtype:
    import torch

    return torch.float32 if cpu_mode() else torch.float16


def vae_dtype(device: Any = None, allowed_dtypes: Any = None) -> torch.dtype:
    import torch

    return torch.float32


def should_use_fp16(device: Any = None, model_params: int = 0, prioritize_performance: bool = True,
                    manual_cast: bool = False) -> bool:
    import torch

    device = torch.device(device) if device is not None else get_torch_device()
    return device.type == "cuda"


def should_use_bf16(device: Any = None, model_params: int = 0, prioritize_performance: bool = True,
                    manual_cast: bool = False) -> bool:
    import torch

    device = torch.device(device) if device is not None else get_torch_device()
    return device.type == "cuda" and torch.cuda.is_bf16_supported()
