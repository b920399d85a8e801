"""ComfyUI's `comfy.model_management` for node packs (compat/devices.py)."""
from typing import Any

import compat.devices
from compat.devices import (InterruptProcessingException, VRAMState, cpu_mode, free_memory,
                            get_free_memory, get_torch_device, get_total_memory, interrupt_current_processing,
                            intermediate_device, is_device_cpu, is_device_cuda, is_device_mps, load_model_gpu,
                            load_models_gpu, processing_interrupted, should_use_bf16, should_use_fp16,
                            soft_empty_cache, text_encoder_device, text_encoder_offload_device,
                            throw_exception_if_processing_interrupted, unet_dtype, unet_offload_device,
                            unload_all_models, vae_device, vae_dtype, vae_offload_device, vram_state,
                            xformers_enabled)


def __getattr__(name: str) -> Any:
    # OOM_EXCEPTION is torch's class, looked up on first access (compat/devices.py), so that
    # importing this module when a pack loads at start-up stays torch-free.
    if name == "OOM_EXCEPTION":
        return compat.devices.OOM_EXCEPTION
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
