"""`comfy.model_management` for packs: devices, device state, memory totals, interrupts.

The face is split by concept: this file (which device, what kind of machine, how much memory,
interrupts, and the module attributes ComfyUI computes at import), `compat/device_memory.py`
(loaded models, freeing, load-device rules), `compat/device_dtypes.py` (dtype and cast rules)
and `compat/device_attention.py` (which attention is enabled). Names, signatures and return
conventions are ComfyUI 0.3.64's (comfy/model_management.py); the answers are this runtime's.

Our runtime computes on CUDA, MPS or the CPU (`comfy_core.memory.choose_device`), so the
predicates for devices it never uses (Intel XPU, Ascend NPU, Cambricon MLU, Iluvatar CoreX,
DirectML) answer False. The flags come from `comfy.cli_args.args` (the server's own).

Interrupts map onto the running node's context (graph.context): `processing_interrupted()`
reads it and `throw_exception_if_processing_interrupted()` raises
`InterruptProcessingException`, which *is* `graph.context.Interrupted`, so the executor reports
`execution_interrupted` and a pack's `except InterruptProcessingException` catches ours. Devices
and unloading go to the server's `comfy_core.memory.MemoryManager` (the environment's `memory`).

torch is imported inside the functions, and the values ComfyUI keeps as module globals
(`vram_state`, `cpu_state`, `total_vram`, `OOM_EXCEPTION`, `XFORMERS_IS_AVAILABLE`, ...) are
computed when a pack reads them (compat/device_globals.py, PEP 562): packs import
`comfy.model_management` at start-up, before the server answers /object_info, and start-up stays
torch-free (torch loads in the background once the server listens, web/warmup.py).
"""
from __future__ import annotations

import gc
import platform
from enum import Enum
from typing import TYPE_CHECKING, Any

from compat.active import active
from graph.context import Interrupted, current

if TYPE_CHECKING:
    import torch

InterruptProcessingException = Interrupted
MiB = 1024 * 1024

# ComfyUI's constants for machines and backends this runtime never uses.
WINDOWS = any(platform.win32_ver())
directml_enabled = False
xpu_available = npu_available = mlu_available = ixuca_available = False
lowvram_available = True  # ComfyUI: False only under DirectML
NUM_STREAMS = 1  # no asynchronous weight offloading here: get_offload_stream() is None


class VRAMState(Enum):
    """ComfyUI's enum of how models share the compute device's memory."""

    DISABLED = 0  # no VRAM: computing on the CPU
    NO_VRAM = 1
    LOW_VRAM = 2
    NORMAL_VRAM = 3
    HIGH_VRAM = 4
    SHARED = 5  # memory shared between CPU and GPU (Apple MPS)


class CPUState(Enum):
    GPU = 0
    CPU = 1
    MPS = 2


def flag(name: str, default: Any = False) -> Any:
    """The server's value of ComfyUI flag `name` (`comfy.cli_args.args`), `default` if unknown."""
    from compat.cli_args import args

    return getattr(args, name, default)


def server_memory() -> Any:
    """The server's comfy_core.memory.MemoryManager (the environment's `memory`), or None."""
    return getattr(active().env, "memory", None)


def dtype_size(dtype: Any) -> int:
    """Bytes per element (4 for dtypes that do not say); here, below the dtype and memory rules
    that both need it."""
    import torch

    if dtype in (torch.float16, torch.bfloat16):
        return 2
    if dtype == torch.float32:
        return 4
    return getattr(dtype, "itemsize", 4)


# -- which device ---------------------------------------------------------------------------------
def get_torch_device() -> torch.device:
    """The compute device of the server (its memory manager's), else the best available."""
    from comfy_core.memory import choose_device

    memory = server_memory()
    return memory.device if memory is not None else choose_device(cpu_only=bool(flag("cpu")))


def get_all_torch_devices(exclude_current: bool = False) -> list:
    """ComfyUI's: the devices models may run on. This runtime computes on one device (the
    server's memory manager's), so the list is that device; `exclude_current` leaves it out."""
    return [] if exclude_current else [get_torch_device()]


def get_gpu_device_options() -> list[str]:
    """ComfyUI's device choices of the multi-GPU nodes: "default", "cpu", and `gpu:i` only when
    there are several devices (nodes/multigpu_nodes.py)."""
    from nodes.multigpu_nodes import device_options

    return device_options(device_count=len(get_all_torch_devices()))


def get_gpu_device_options_no_cpu() -> list[str]:
    """`get_gpu_device_options()` without "cpu" (the VAE's choices)."""
    from nodes.multigpu_nodes import device_options_no_cpu

    return device_options_no_cpu(device_count=len(get_all_torch_devices()))


def resolve_gpu_device_option(option: Any) -> Any:
    """ComfyUI's: "default" / None -> None, "cpu" -> the CPU, `gpu:i` -> that GPU of this
    runtime's devices (None when there is no such GPU), anything else -> None."""
    from nodes.multigpu_nodes import resolve_device_option

    return resolve_device_option(option)


def get_torch_device_name(device: Any) -> str:
    """ComfyUI's log name of a device: `"cuda:0 NVIDIA H200 : native"` (device, card name,
    allocator backend), `"cpu"` / `"mps"` for others, `"CUDA 0: <name>"` for a bare index."""
    import torch

    if hasattr(device, "type"):
        if device.type == "cuda":
            try:
                allocator = torch.cuda.get_allocator_backend()
            except Exception:  # noqa: BLE001 -- older torch builds have no such call
                allocator = ""
            return f"{device} {torch.cuda.get_device_name(device)} : {allocator}"
        if device.type == "xpu" and hasattr(torch, "xpu"):
            return f"{device} {torch.xpu.get_device_name(device)}"
        return f"{device.type}"
    return f"CUDA {device}: {torch.cuda.get_device_name(device)}"


def intermediate_device() -> torch.device:
    """Where nodes hand tensors to each other: the CPU, the compute device with --gpu-only (ComfyUI's rule)."""
    import torch

    return get_torch_device() if flag("gpu_only") else torch.device("cpu")


def unet_offload_device() -> torch.device:
    import torch

    memory = server_memory()
    return memory.offload_device if memory is not None else torch.device("cpu")


text_encoder_offload_device = vae_offload_device = unet_offload_device
vae_device = get_torch_device


def text_encoder_device() -> torch.device:
    """Where text encoders compute: the CPU in lowvram and novram (ComfyUI's rule), else the
    compute device."""
    import torch

    if current_vram_state() in (VRAMState.LOW_VRAM, VRAMState.NO_VRAM):
        return torch.device("cpu")
    return get_torch_device()


def current_cpu_state() -> CPUState:
    """ComfyUI's `cpu_state` for our compute device."""
    kind = get_torch_device().type
    return CPUState.CPU if kind == "cpu" else CPUState.MPS if kind == "mps" else CPUState.GPU


def cpu_mode() -> bool:
    return current_cpu_state() == CPUState.CPU


def mps_mode() -> bool:
    return current_cpu_state() == CPUState.MPS


def is_device_type(device: Any, type: str) -> bool:  # noqa: A002 -- ComfyUI's parameter name
    """ComfyUI's test: objects without a `.type` (strings, indices) are never of a type."""
    return getattr(device, "type", None) == type


def is_device_cpu(device: Any) -> bool:
    return is_device_type(device, "cpu")


def is_device_mps(device: Any) -> bool:
    return is_device_type(device, "mps")


def is_device_xpu(device: Any) -> bool:
    return is_device_type(device, "xpu")


def is_device_cuda(device: Any) -> bool:
    return is_device_type(device, "cuda")


def is_intel_xpu() -> bool:
    return False  # this runtime never computes on an Intel XPU


def is_ascend_npu() -> bool:
    return False


def is_mlu() -> bool:
    return False


def is_ixuca() -> bool:
    return False


def is_directml_enabled() -> bool:
    return directml_enabled


def is_nvidia() -> bool:
    """Computing on a CUDA device with an NVIDIA (CUDA, not ROCm) build of torch."""
    import torch

    return current_cpu_state() == CPUState.GPU and bool(torch.version.cuda)


def is_amd() -> bool:
    """Computing on a ROCm (HIP) device."""
    import torch

    return current_cpu_state() == CPUState.GPU and bool(torch.version.hip)


def amd_min_version(device: Any = None, min_rdna_version: int = 0) -> bool:
    """True on an AMD RDNA card of at least `min_rdna_version` (from its `gfxNNNN` arch name:
    the hundreds digit plus 2, ComfyUI's reading)."""
    import torch

    if not is_amd() or is_device_cpu(device):
        return False
    arch = torch.cuda.get_device_properties(device).gcnArchName
    if not (arch.startswith("gfx") and len(arch) == 7):
        return False
    try:
        rdna = int(arch[4]) + 2
    except ValueError:
        rdna = 0
    return rdna >= min_rdna_version


def mac_version() -> tuple[int, ...] | None:
    """The macOS version as a tuple, None elsewhere."""
    try:
        return tuple(int(n) for n in platform.mac_ver()[0].split("."))
    except ValueError:
        return None


# -- VRAM state -----------------------------------------------------------------------------------
def vram_state_for(device_type: str, *, lowvram: bool = False, novram: bool = False, highvram: bool = False,
                   gpu_only: bool = False) -> VRAMState:
    """ComfyUI's `vram_state` for a compute device and the VRAM flags: the CPU is DISABLED, MPS
    SHARED; on a GPU `--lowvram` wins over `--novram`, both over `--highvram`/`--gpu-only`."""
    if device_type == "cpu":
        return VRAMState.DISABLED
    if device_type == "mps":
        return VRAMState.SHARED
    requested = requested_vram_state_for(lowvram=lowvram, novram=novram)
    if requested != VRAMState.NORMAL_VRAM:
        return requested
    return VRAMState.HIGH_VRAM if (highvram or gpu_only) else VRAMState.NORMAL_VRAM


def requested_vram_state_for(*, lowvram: bool = False, novram: bool = False) -> VRAMState:
    """ComfyUI's `set_vram_to`: what `--lowvram` / `--novram` asked for."""
    return VRAMState.LOW_VRAM if lowvram else VRAMState.NO_VRAM if novram else VRAMState.NORMAL_VRAM


def current_vram_state() -> VRAMState:
    """`vram_state` for this server: its memory manager's mode (after an out-of-memory fallback
    too), else from the device and the flags."""
    memory = server_memory()
    mode = getattr(memory, "mode", None) if memory is not None else None
    if mode is not None and hasattr(mode, "comfy_state_name"):
        return VRAMState[mode.comfy_state_name]
    return vram_state_for(get_torch_device().type, lowvram=bool(flag("lowvram")), novram=bool(flag("novram")),
                          highvram=bool(flag("highvram")), gpu_only=bool(flag("gpu_only")))


# -- memory totals --------------------------------------------------------------------------------
def get_total_memory(dev: Any = None, torch_total_too: bool = False) -> Any:
    """Bytes of the device's memory (host RAM for the CPU and MPS); with `torch_total_too`,
    `(total, reserved by torch's allocator)` (both the total off CUDA), as ComfyUI."""
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
    """Bytes free on the device, counting what torch's allocator holds unused as free; with
    `torch_free_too`, `(free, free inside torch's allocator)`, as ComfyUI."""
    import psutil
    import torch

    device = torch.device(dev) if dev is not None else get_torch_device()
    if device.type == "cuda":
        free, _ = torch.cuda.mem_get_info(device)
        torch_free = torch.cuda.memory_reserved(device) - torch.cuda.memory_allocated(device)
        return (free + torch_free, torch_free) if torch_free_too else free + torch_free
    free = psutil.virtual_memory().available
    return (free, free) if torch_free_too else free


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


# -- interrupts -----------------------------------------------------------------------------------
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


# -- the module attributes ComfyUI computes at import time --------------------------------------
def oom_exception() -> type:
    """`OOM_EXCEPTION`: torch's out-of-memory error class."""
    import torch

    return getattr(torch, "OutOfMemoryError", None) or torch.cuda.OutOfMemoryError


def is_oom(error: BaseException) -> bool:
    """ComfyUI's `is_oom(e)`: torch's out-of-memory error, or an accelerator error saying so."""
    import torch

    if isinstance(error, oom_exception()):
        return True
    accelerator_error = getattr(torch, "AcceleratorError", None)
    return (accelerator_error is not None and isinstance(error, accelerator_error)
            and (getattr(error, "error_code", None) == 2 or "out of memory" in str(error)))


def raise_non_oom(error: BaseException) -> None:
    """ComfyUI's `raise_non_oom(e)`: re-raise `error` unless it is an out-of-memory error (a pack's
    tiled fallback then retries with smaller tiles)."""
    if not is_oom(error):
        raise error


def intermediate_dtype() -> Any:
    """ComfyUI's `intermediate_dtype()`: the dtype of images and other intermediates between nodes,
    float16 with `--fp16-intermediates`, else float32 (this runtime's, always float32 on the CPU)."""
    import torch

    from compat.active import CompatNotInstalledError

    try:
        from compat.cli_args import args

        half = bool(getattr(args, "fp16_intermediates", False))
    except CompatNotInstalledError:
        half = False
    return torch.float16 if half else torch.float32


def torch_version() -> str:
    import torch

    return torch.version.__version__


def torch_version_numeric() -> tuple[int, int]:
    major, minor = torch_version().split(".")[:2]
    return int(major), int(minor)
