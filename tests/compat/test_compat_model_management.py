"""`comfy.model_management`: ComfyUI 0.3.64's public names, signatures and return conventions,
answered for this runtime (compat/devices.py, device_memory.py, device_dtypes.py,
device_attention.py)."""
from __future__ import annotations

import inspect
import json
import subprocess
import sys
import textwrap
from importlib.util import find_spec
from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parents[2]

# Every public name ComfyUI 0.3.64's comfy/model_management.py defines at module level, less
# its import-time scratch variables (arch, device_index, directml_device, mac_ver, rocm_version,
# temp) and the internals listed in NOT_PROVIDED.
COMFYUI_NAMES = """
CPUState DISABLE_SMART_MEMORY ENABLE_PYTORCH_ATTENTION EXTRA_RESERVED_VRAM FLOAT8_TYPES FORCE_FP32
InterruptProcessingException LoadedModel MIN_WEIGHT_MEMORY_RATIO NUM_STREAMS OOM_EXCEPTION PRIORITIZE_FP16
SUPPORT_FP8_OPS VRAMState WINDOWS XFORMERS_ENABLED_VAE XFORMERS_IS_AVAILABLE XFORMERS_VERSION amd_min_version
cast_to cast_to_device cleanup_models cleanup_models_gc cpu_mode cpu_state current_loaded_models
device_should_use_non_blocking device_supports_non_blocking directml_enabled dtype_size extended_fp16_support
extra_reserved_memory flash_attention_enabled force_channels_last force_upcast_attention_dtype free_memory
get_autocast_device get_free_memory get_offload_stream get_supported_float8_types get_torch_device
get_torch_device_name get_total_memory interrupt_current_processing interrupt_processing intermediate_device
is_amd is_ascend_npu is_device_cpu is_device_cuda is_device_mps is_device_type is_device_xpu
is_directml_enabled is_intel_xpu is_ixuca is_mlu is_nvidia ixuca_available load_model_gpu load_models_gpu
loaded_models lowvram_available mac_version maximum_vram_for_weights minimum_inference_memory mlu_available
module_size mps_mode npu_available offloaded_memory pick_weight_dtype processing_interrupted
pytorch_attention_enabled pytorch_attention_enabled_vae pytorch_attention_flash_attention
sage_attention_enabled set_vram_to should_use_bf16 should_use_fp16 soft_empty_cache supports_cast
supports_dtype supports_fp8_compute sync_stream text_encoder_device text_encoder_dtype
text_encoder_initial_device text_encoder_offload_device throw_exception_if_processing_interrupted
torch_version torch_version_numeric total_ram total_vram unet_dtype unet_inital_load_device
unet_manual_cast unet_offload_device unload_all_models vae_device vae_dtype vae_offload_device vram_state
xformers_enabled xformers_enabled_vae xpu_available
""".split()
NOT_PROVIDED = {"STREAMS", "stream_counters", "interrupt_processing_mutex", "use_more_memory"}


def test_every_public_name_of_comfyuis_module_is_there(session):
    import comfy.model_management as mm

    assert [name for name in COMFYUI_NAMES if not hasattr(mm, name)] == []
    for name in NOT_PROVIDED:
        with pytest.raises(AttributeError, match=name):
            getattr(mm, name)


def test_signatures_take_comfyuis_arguments(session):
    import comfy.model_management as mm

    expected = {
        "get_torch_device_name": ["device"], "cast_to": ["weight", "dtype", "device", "non_blocking", "copy", "stream"],
        "cast_to_device": ["tensor", "device", "dtype", "copy"], "unet_dtype": ["device", "model_params",
        "supported_dtypes", "weight_dtype"], "unet_manual_cast": ["weight_dtype", "inference_device", "supported_dtypes"],
        "text_encoder_dtype": ["device"], "vae_dtype": ["device", "allowed_dtypes"],
        "should_use_fp16": ["device", "model_params", "prioritize_performance", "manual_cast"],
        "free_memory": ["memory_required", "device", "keep_loaded"], "module_size": ["module"],
        "get_autocast_device": ["dev"], "supports_cast": ["device", "dtype"],
        "device_supports_non_blocking": ["device"], "unet_inital_load_device": ["parameters", "dtype"],
        "text_encoder_initial_device": ["load_device", "offload_device", "model_size"],
        "loaded_models": ["only_currently_used"], "pick_weight_dtype": ["dtype", "fallback_dtype", "device"],
    }
    for name, params in expected.items():
        assert list(inspect.signature(getattr(mm, name)).parameters) == params, name


def test_device_answers_on_this_cpu_machine(session):
    import comfy.model_management as mm
    from comfy.model_management import VRAMState, vram_state

    cpu = torch.device("cpu")
    assert mm.get_torch_device() == cpu  # no GPU here
    assert mm.get_torch_device_name(cpu) == "cpu" and mm.get_torch_device_name(torch.device("mps")) == "mps"
    assert vram_state is VRAMState.DISABLED and mm.cpu_state is mm.CPUState.CPU
    assert mm.set_vram_to is VRAMState.NORMAL_VRAM
    assert mm.cpu_mode() and not mm.mps_mode() and not mm.is_nvidia() and not mm.is_amd()
    assert not any(f() for f in (mm.is_intel_xpu, mm.is_ascend_npu, mm.is_mlu, mm.is_ixuca, mm.is_directml_enabled))
    assert mm.total_vram == mm.get_total_memory(cpu) / 2**20 and mm.total_ram > 0
    assert mm.is_device_cpu(cpu) and not mm.is_device_cpu("cpu")  # ComfyUI tests `.type` only
    assert mm.get_autocast_device(cpu) == "cpu" and mm.get_autocast_device(None) == "cuda"
    assert mm.torch_version == torch.version.__version__
    assert mm.torch_version_numeric == tuple(int(x) for x in torch.__version__.split(".")[:2])
    assert mm.FLOAT8_TYPES == mm.get_supported_float8_types() and torch.float8_e4m3fn in mm.FLOAT8_TYPES
    assert mm.EXTRA_RESERVED_VRAM == mm.extra_reserved_memory() == 400 * 2**20
    assert mm.minimum_inference_memory() == 0.8 * 2**30 + 400 * 2**20
    assert mm.get_offload_stream(cpu) is None and mm.NUM_STREAMS == 1
    assert mm.unet_inital_load_device(10, torch.float16) == cpu  # CPU machines load on the CPU


@pytest.mark.parametrize(("device_type", "flags", "state"), [
    ("cpu", {"lowvram": True}, "DISABLED"),
    ("mps", {"highvram": True}, "SHARED"),
    ("cuda", {}, "NORMAL_VRAM"),
    ("cuda", {"lowvram": True, "highvram": True}, "LOW_VRAM"),
    ("cuda", {"novram": True}, "NO_VRAM"),
    ("cuda", {"highvram": True}, "HIGH_VRAM"),
    ("cuda", {"gpu_only": True}, "HIGH_VRAM"),
])
def test_vram_state_follows_comfyuis_precedence(device_type, flags, state):
    from compat.devices import VRAMState, vram_state_for

    assert vram_state_for(device_type, **flags) is VRAMState[state]


def test_dtype_rules_on_the_cpu(session):
    import comfy.model_management as mm

    cpu = torch.device("cpu")
    assert mm.unet_dtype() == torch.float32 and mm.unet_dtype(cpu, 10**9) == torch.float32
    assert mm.unet_manual_cast(torch.float32, cpu) is None
    assert mm.unet_manual_cast(torch.float16, cpu) == torch.float32  # the CPU computes fp16 weights in fp32
    assert mm.text_encoder_dtype() == torch.float16  # ComfyUI (and our loader) store text encoders in fp16
    assert mm.vae_dtype(cpu, [torch.bfloat16, torch.float32]) == torch.float32
    assert not mm.should_use_fp16(cpu) and not mm.should_use_bf16(cpu) and not mm.supports_fp8_compute(cpu)
    assert mm.supports_dtype(cpu, torch.float32) and not mm.supports_dtype(cpu, torch.float16)
    assert mm.supports_cast(cpu, torch.bfloat16) and mm.supports_cast(cpu, torch.float8_e4m3fn)
    assert mm.supports_cast(torch.device("mps"), torch.bfloat16) and not mm.supports_cast(torch.device("mps"),
                                                                                          torch.float8_e4m3fn)
    assert not mm.supports_cast(cpu, torch.int8)
    assert mm.pick_weight_dtype(None, torch.float16) == torch.float16
    assert mm.pick_weight_dtype(torch.float32, torch.float16) == torch.float16  # larger than the fallback
    assert mm.dtype_size(torch.bfloat16) == 2 and mm.dtype_size(torch.float8_e5m2) == 1
    assert mm.device_supports_non_blocking(cpu) and not mm.device_supports_non_blocking(torch.device("mps"))
    assert mm.device_should_use_non_blocking(cpu) is False and mm.force_channels_last() is False


def test_the_servers_precision_wins(session):
    import comfy.model_management as mm

    session.env.dtype_policy = {"unet": "bf16", "vae": "fp16", "text": "fp32"}  # as web/bootstrap.py sets it
    assert mm.unet_dtype() == torch.bfloat16 and mm.vae_dtype() == torch.float16
    assert mm.text_encoder_dtype() == torch.float32


def test_cast_to_keeps_comfyuis_copy_semantics(session):
    import comfy.model_management as mm

    weight = torch.arange(6, dtype=torch.float32).reshape(2, 3)
    cpu = torch.device("cpu")
    assert mm.cast_to(weight) is weight and mm.cast_to(weight, torch.float32, cpu) is weight
    copied = mm.cast_to(weight, device=cpu, copy=True)
    assert copied is not weight and torch.equal(copied, weight)
    half = mm.cast_to_device(weight, cpu, torch.float16)
    assert half.dtype == torch.float16 and torch.equal(half.float(), weight)
    moved = mm.cast_to(weight, torch.float16, "cpu")  # a string device is not the tensor's device: a new tensor
    assert moved is not weight and moved.dtype == torch.float16


def test_attention_answers(session):
    import comfy.model_management as mm

    assert mm.XFORMERS_IS_AVAILABLE is (find_spec("xformers") is not None)
    assert mm.xformers_enabled() is False  # no GPU here
    assert mm.pytorch_attention_enabled() is True and mm.ENABLE_PYTORCH_ATTENTION is True  # SDPA is our default
    assert mm.pytorch_attention_flash_attention() is False  # no NVIDIA / AMD GPU
    assert mm.sage_attention_enabled() is False and mm.flash_attention_enabled() is False
    assert mm.force_upcast_attention_dtype() is None
    session.env.attention_backend = "sub_quadratic"  # what --use-quad-cross-attention makes the default
    assert mm.pytorch_attention_enabled() is False and mm.ENABLE_PYTORCH_ATTENTION is False


def test_loaded_models_over_the_memory_manager(session):
    import comfy.model_management as mm
    from comfy_core.memory import MemoryManager
    from comfy_core.patching import Patcher

    assert mm.current_loaded_models == [] and mm.loaded_models() == []  # no memory manager yet
    memory = MemoryManager(device="cpu")
    session.env.memory = memory
    first, second = Patcher(torch.nn.Linear(4, 3)), Patcher(torch.nn.Linear(2, 2))
    mm.load_models_gpu([first])
    mm.load_model_gpu(second)
    records = mm.current_loaded_models
    assert [r.model for r in records] == [second, first]  # most recently used first, as ComfyUI
    assert isinstance(records[0], mm.LoadedModel) and records[0] == mm.LoadedModel(second)
    assert records[1].model_memory() == mm.module_size(first.model) == (4 * 3 + 3) * 4
    assert records[1].device == torch.device("cpu") and records[1].currently_used
    assert mm.loaded_models() == [second, first]
    assert mm.free_memory(0, torch.device("cpu")) == []  # already enough free memory: nothing moves
    freed = mm.free_memory(1e30, torch.device("cpu"), keep_loaded=[records[0]])
    assert [r.model for r in freed] == [first] and not freed[0].currently_used  # least recently used first
    assert mm.loaded_models() == [second]
    mm.unload_all_models()
    assert mm.current_loaded_models == []


def test_start_up_reads_stay_torch_free(tmp_path):
    """What packs read while they import (smZNodes: XFORMERS_IS_AVAILABLE) loads no torch."""
    code = textwrap.dedent(f"""
        import json, sys
        from pathlib import Path
        import compat
        from graph.registry import Registry
        from nodes.environment import Environment

        env = Environment.rooted_at(Path({str(tmp_path)!r}))
        compat.install(env, Registry())
        import comfy.model_management as mm
        from comfy.model_management import XFORMERS_IS_AVAILABLE, VRAMState, CPUState
        values = [XFORMERS_IS_AVAILABLE, mm.ENABLE_PYTORCH_ATTENTION, mm.pytorch_attention_enabled(),
                  mm.directml_enabled, mm.is_intel_xpu(), mm.WINDOWS, mm.XFORMERS_VERSION, mm.DISABLE_SMART_MEMORY]
        print(json.dumps({{"values": values, "torch": "torch" in sys.modules}}))
    """)
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["torch"] is False and result["values"][1:3] == [True, True]


def test_vram_state_and_loaded_memory_follow_the_memory_manager(session):
    import comfy.model_management as mm
    from comfy_core.memory import MemoryManager
    from comfy_core.patching import ModelPatcher

    memory = MemoryManager(device="cpu:0", offload_device="cpu", mode="novram", partial_floor=0)
    session.env.memory = memory
    assert mm.vram_state is mm.VRAMState.NO_VRAM
    assert mm.text_encoder_device() == torch.device("cpu")
    patcher = memory.track(ModelPatcher(torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Linear(4, 4))))
    with patcher.applied() as module:
        module(torch.zeros(1, 4))
    record = mm.LoadedModel(patcher)
    plan = memory.plan_for(patcher)
    assert record.model_loaded_memory() == plan.resident_bytes < record.model_memory()
    memory.recover(torch.OutOfMemoryError("out of memory"))
    memory.mode = memory.configured_mode = type(memory.mode).HIGH
    assert mm.vram_state is mm.VRAMState.HIGH_VRAM
