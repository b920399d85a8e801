"""The module globals ComfyUI's `comfy.model_management` computes at import time (`vram_state`,
`cpu_state`, `total_vram`, `OOM_EXCEPTION`, `XFORMERS_IS_AVAILABLE`, `current_loaded_models`, ...),
answered when a pack reads them (PEP 562 `__getattr__` of the surface module), so each read
answers for the server and flags of that moment and importing the surface stays torch-free.

A module above the four `device_*` faces: it reads all of them, none of them reads it.
"""
from __future__ import annotations

from typing import Any, Callable

from compat import device_attention as attention
from compat import device_dtypes as dtypes
from compat import device_memory as memory
from compat import devices


def _lazy_table() -> dict[str, Callable[[], Any]]:
    return {
        "OOM_EXCEPTION": devices.oom_exception,
        "vram_state": devices.current_vram_state,
        "set_vram_to": lambda: devices.requested_vram_state_for(lowvram=bool(devices.flag("lowvram")),
                                                                novram=bool(devices.flag("novram"))),
        "cpu_state": devices.current_cpu_state,
        "total_vram": lambda: devices.get_total_memory(devices.get_torch_device()) / devices.MiB,
        "total_ram": lambda: devices.get_total_memory("cpu") / devices.MiB,
        "torch_version": devices.torch_version,
        "torch_version_numeric": devices.torch_version_numeric,
        "FLOAT8_TYPES": dtypes.get_supported_float8_types,
        "SUPPORT_FP8_OPS": lambda: bool(devices.flag("supports_fp8_compute")),
        "FORCE_FP32": lambda: bool(devices.flag("force_fp32")),
        "PRIORITIZE_FP16": lambda: False,  # no fp16 accumulation here (ComfyUI: --fast fp16_accumulation)
        "MIN_WEIGHT_MEMORY_RATIO": lambda: 0.0 if devices.is_nvidia() else 0.4,
        "DISABLE_SMART_MEMORY": lambda: bool(devices.flag("disable_smart_memory")),
        "EXTRA_RESERVED_VRAM": memory.extra_reserved_memory,
        "current_loaded_models": memory.current_loaded_models,
        "XFORMERS_IS_AVAILABLE": attention.xformers_available,
        "XFORMERS_VERSION": attention.xformers_version,
        "XFORMERS_ENABLED_VAE": attention.xformers_vae_usable,
        "ENABLE_PYTORCH_ATTENTION": attention.pytorch_attention_enabled,
        "interrupt_processing": devices.processing_interrupted,
    }


def lazy_attribute(module_name: str, name: str) -> Any:
    """The value of a ComfyUI module global of `comfy.model_management`, computed now (each
    read answers for the server and flags of this moment); AttributeError for other names."""
    compute = _lazy_table().get(name)
    if compute is not None:
        return compute()
    raise AttributeError(f"module {module_name!r} has no attribute {name!r}")
