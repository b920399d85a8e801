"""ComfyUI's `comfy.model_management` for node packs (compat/devices.py and its siblings).

The module globals ComfyUI computes at import (`vram_state`, `cpu_state`, `total_vram`,
`OOM_EXCEPTION`, `XFORMERS_IS_AVAILABLE`, `current_loaded_models`, ...) are answered when read
(`compat.device_globals.lazy_attribute`), so importing this module stays torch-free.
"""
from typing import Any

import compat.device_globals
from compat.device_attention import (flash_attention_enabled, force_upcast_attention_dtype,
                                     pytorch_attention_enabled, pytorch_attention_enabled_vae,
                                     pytorch_attention_flash_attention, sage_attention_enabled, xformers_enabled,
                                     xformers_enabled_vae)
from compat.device_dtypes import (cast_to, cast_to_device, device_should_use_non_blocking,
                                  device_supports_non_blocking, dtype_size, extended_fp16_support,
                                  force_channels_last, get_autocast_device, get_supported_float8_types,
                                  pick_weight_dtype, should_use_bf16, should_use_fp16, supports_cast, supports_dtype,
                                  supports_fp8_compute, text_encoder_dtype, unet_dtype, unet_manual_cast, vae_dtype)
from compat.device_memory import (LoadedModel, cleanup_models, cleanup_models_gc, current_stream,
                                  extra_reserved_memory, free_memory,
                                  get_offload_stream, load_model_gpu, load_models_gpu, loaded_models,
                                  maximum_vram_for_weights, minimum_inference_memory, module_size, offloaded_memory,
                                  sync_stream, text_encoder_initial_device, unet_inital_load_device,
                                  unload_all_models, unload_model_and_clones)
from compat.devices import (NUM_STREAMS, WINDOWS, CPUState, InterruptProcessingException, VRAMState,
                            amd_min_version, cpu_mode, directml_enabled, get_all_torch_devices, get_free_memory,
                            get_gpu_device_options, get_gpu_device_options_no_cpu, get_torch_device,
                            resolve_gpu_device_option,
                            get_torch_device_name, get_total_memory, interrupt_current_processing, intermediate_device,
                            intermediate_dtype, is_oom, raise_non_oom,
                            is_amd, is_ascend_npu, is_device_cpu, is_device_cuda, is_device_mps, is_device_type,
                            is_device_xpu, is_directml_enabled, is_intel_xpu, is_ixuca, is_mlu, is_nvidia,
                            ixuca_available, lowvram_available, mac_version, mlu_available, mps_mode, npu_available,
                            processing_interrupted, soft_empty_cache, text_encoder_device, text_encoder_offload_device,
                            throw_exception_if_processing_interrupted, unet_offload_device, vae_device,
                            vae_offload_device, xpu_available)


def __getattr__(name: str) -> Any:
    return compat.device_globals.lazy_attribute(__name__, name)
