"""`comfy.model_management`'s dtype and cast rules: which precision a component should use on a
device, what a device can store and cast, and `cast_to` / `cast_to_device`.

The rules are ComfyUI 0.3.64's (comfy/model_management.py: `should_use_fp16`, `should_use_bf16`,
`unet_dtype`, `unet_manual_cast`, `vae_dtype`, `text_encoder_dtype`, `supports_cast`, ...), on
this runtime's device; the precision the server was started with (`--fp16-unet`, `--fp32-vae`,
`--force-fp16`, ... as the host put them in the environment's `dtype_policy`) wins, as ComfyUI's
flags do. Signatures are ComfyUI's; where its defaults are lists of torch dtypes, ours are None
meaning that same list, so importing this module stays torch-free.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Iterable

from compat.devices import (WINDOWS, cpu_mode, dtype_size, flag, get_torch_device, is_amd, is_device_cpu,
                            is_device_mps, is_nvidia, mac_version, mps_mode, torch_version_numeric)
from compat.session import active

if TYPE_CHECKING:
    import torch

# Consumer Pascal cards where ComfyUI finds fp16 slower than fp32 on Linux (its list).
_PASCAL_FP16_SLOW = ("1080", "1070", "titan x", "p3000", "p3200", "p4000", "p4200", "p5000", "p5200", "p6000",
                     "1060", "1050", "p40", "p100", "p6", "p4")
# Turing cards whose fp16 is broken (ComfyUI's list, matched case-sensitively as there).
_FP16_BROKEN = ("1660", "1650", "1630", "T500", "T550", "T600", "MX550", "MX450", "CMP 30HX", "T2000", "T1000",
                "T1200")
_DTYPE_NAMES = {"fp32": "float32", "fp16": "float16", "bf16": "bfloat16"}
# AMD architectures without bf16 (RDNA2 and older), ComfyUI's list.
_AMD_NO_BF16 = ("gfx1030", "gfx1031", "gfx1010", "gfx1011", "gfx1012", "gfx906", "gfx900", "gfx803")


def _default_supported() -> list:
    import torch

    return [torch.float16, torch.bfloat16, torch.float32]


def forced_dtype(component: str) -> torch.dtype | None:
    """The dtype the server was told to use for `component` ("unet", "vae", "text"), or None.

    Reads the environment's `dtype_policy`: a `{component: "fp16"|"bf16"|"fp32"}` dict (what
    web/bootstrap.py puts there) or a comfy_core `DtypePolicy`."""
    import torch

    policy = getattr(active().env, "dtype_policy", None)
    if policy is None:
        return None
    value = policy.get(component) if isinstance(policy, dict) else getattr(policy, component, None)
    if isinstance(value, str):
        return getattr(torch, _DTYPE_NAMES.get(value, value), None)
    return value


def get_supported_float8_types() -> list:
    """The float8 dtypes this torch build has (ComfyUI's `FLOAT8_TYPES`)."""
    import torch

    names = ("float8_e4m3fn", "float8_e4m3fnuz", "float8_e5m2", "float8_e5m2fnuz", "float8_e8m0fnu")
    return [getattr(torch, n) for n in names if hasattr(torch, n)]


def _device(device: Any) -> torch.device:
    import torch

    return torch.device(device) if device is not None else get_torch_device()


def _maximum_vram_for_weights(device: Any) -> float:
    from compat.device_memory import maximum_vram_for_weights

    return maximum_vram_for_weights(device)


def should_use_fp16(device: Any = None, model_params: int = 0, prioritize_performance: bool = True,
                    manual_cast: bool = False) -> bool:
    """Whether fp16 is the right compute precision on `device` (ComfyUI's rule): never on the
    CPU; `--force-fp16` / `--force-fp32`; always on MPS and ROCm; on CUDA from compute
    capability 8 (and 7 except the cards with broken fp16); Pascal only on Windows or when
    casting manually; with `manual_cast`, also when fp32 weights would not fit."""
    import torch

    if device is not None and is_device_cpu(device):
        return False
    if flag("force_fp16"):
        return True
    if flag("force_fp32"):
        return False
    if (device is not None and is_device_mps(device)) or mps_mode():
        return True
    if cpu_mode():
        return False
    if torch.version.hip:
        return True
    props = torch.cuda.get_device_properties(_device(device))
    if props.major >= 8:
        return True
    if props.major < 6:
        return False
    if any(name in props.name.lower() for name in _PASCAL_FP16_SLOW):
        return WINDOWS or manual_cast
    if manual_cast and (not prioritize_performance or model_params * 4 > _maximum_vram_for_weights(device)):
        return True
    if props.major < 7:
        return False
    return not any(name in props.name for name in _FP16_BROKEN)


def should_use_bf16(device: Any = None, model_params: int = 0, prioritize_performance: bool = True,
                    manual_cast: bool = False) -> bool:
    """Whether bf16 is the right compute precision on `device` (ComfyUI's rule): never on the
    CPU or with `--force-fp32`; on MPS from macOS 14; on CUDA from compute capability 8, or
    where bf16 works and fp32 weights would not fit when casting manually."""
    import torch

    if device is not None and is_device_cpu(device):
        return False
    if flag("force_fp32"):
        return False
    if (device is not None and is_device_mps(device)) or mps_mode():
        version = mac_version()
        return version is not None and version >= (14,)
    if cpu_mode():
        return False
    target = _device(device)
    if is_amd() and any(a in torch.cuda.get_device_properties(target).gcnArchName for a in _AMD_NO_BF16):
        return manual_cast
    if torch.cuda.get_device_properties(target).major >= 8:
        return True
    return bool(torch.cuda.is_bf16_supported() and manual_cast
                and (not prioritize_performance or model_params * 4 > _maximum_vram_for_weights(device)))


def supports_fp8_compute(device: Any = None) -> bool:
    """fp8 matrix maths: `--supports-fp8-compute`, or an NVIDIA card of compute capability 8.9+
    with torch 2.3+ (2.4+ on Windows)."""
    import torch

    if flag("supports_fp8_compute"):
        return True
    if not is_nvidia():
        return False
    props = torch.cuda.get_device_properties(_device(device))
    if props.major >= 9:
        return True
    if props.major < 8 or props.minor < 9:
        return False
    return torch_version_numeric() >= ((2, 4) if WINDOWS else (2, 3))


def extended_fp16_support() -> bool:
    return torch_version_numeric() >= (2, 7)


def unet_dtype(device: Any = None, model_params: int = 0, supported_dtypes: Iterable[Any] | None = None,
               weight_dtype: Any = None) -> torch.dtype:
    """The dtype to store a diffusion model in: the server's UNet precision if it was given;
    fp8 weights stay fp8 where fp8 runs or where bf16 would not fit; else the first of
    `supported_dtypes` (fp16, bf16, fp32) the device runs well, then the first it can cast to,
    then fp32 (ComfyUI's `unet_dtype`)."""
    import torch

    supported = list(supported_dtypes) if supported_dtypes is not None else _default_supported()
    if model_params < 0:
        model_params = 10 ** 21
    forced = forced_dtype("unet")
    if forced is not None:
        return forced
    if weight_dtype is not None and weight_dtype in get_supported_float8_types():
        if supports_fp8_compute(device) or model_params * 2 > _maximum_vram_for_weights(device):
            return weight_dtype
    if weight_dtype == torch.float16 and torch.float16 in supported and should_use_fp16(device, model_params):
        return torch.float16
    for manual_cast in (False, True):
        for dt in supported:
            if dt == torch.float16 and should_use_fp16(device, model_params, manual_cast=manual_cast):
                return torch.float16
            if dt == torch.bfloat16 and should_use_bf16(device, model_params, manual_cast=manual_cast):
                return torch.bfloat16
    return torch.float32


def unet_manual_cast(weight_dtype: Any, inference_device: Any,
                     supported_dtypes: Iterable[Any] | None = None) -> torch.dtype | None:
    """The dtype to compute in when weights stored as `weight_dtype` cannot be used directly on
    `inference_device`; None when no cast is needed (fp32/fp64 weights, or fp16/bf16 weights
    the device runs). ComfyUI's rule."""
    import torch

    supported = list(supported_dtypes) if supported_dtypes is not None else _default_supported()
    if weight_dtype in (torch.float32, torch.float64):
        return None
    if weight_dtype == torch.float16 and should_use_fp16(inference_device, prioritize_performance=False):
        return None
    bf16 = should_use_bf16(inference_device)
    if weight_dtype == torch.bfloat16 and bf16:
        return None
    fp16 = should_use_fp16(inference_device, prioritize_performance=True)
    for dt in supported:
        if dt == torch.float16 and fp16:
            return torch.float16
        if dt == torch.bfloat16 and bf16:
            return torch.bfloat16
    return torch.float32


def text_encoder_dtype(device: Any = None) -> torch.dtype:
    """The server's text-encoder precision if given, else fp16 (ComfyUI stores text encoders in
    fp16 on every device, as our loader does)."""
    import torch

    forced = forced_dtype("text")
    return forced if forced is not None else torch.float16


def vae_dtype(device: Any = None, allowed_dtypes: Iterable[Any] = ()) -> torch.dtype:
    """The server's VAE precision if given, else the first of `allowed_dtypes` the device runs
    well (fp16 / bf16), else fp32 (ComfyUI's rule)."""
    import torch

    forced = forced_dtype("vae")
    if forced is not None:
        return forced
    for dt in allowed_dtypes:
        if dt == torch.float16 and should_use_fp16(device):
            return dt
        if dt == torch.bfloat16 and should_use_bf16(device):
            return dt
    return torch.float32


def supports_dtype(device: Any, dtype: Any) -> bool:
    """Compute in `dtype` on `device`: fp32 anywhere; fp16 and bf16 off the CPU."""
    import torch

    if dtype == torch.float32:
        return True
    if is_device_cpu(device):
        return False
    return dtype in (torch.float16, torch.bfloat16)


def supports_cast(device: Any, dtype: Any) -> bool:
    """Store weights in `dtype` on `device` and cast them for compute: fp32, fp16, bf16, and
    the two float8 formats except on MPS."""
    import torch

    if dtype in (torch.float32, torch.float16, torch.bfloat16):
        return True
    if is_device_mps(device):
        return False
    return dtype in (getattr(torch, "float8_e4m3fn", None), getattr(torch, "float8_e5m2", None))


def pick_weight_dtype(dtype: Any, fallback_dtype: Any, device: Any = None) -> Any:
    """`dtype`, unless it is None, larger than `fallback_dtype` or not castable on `device`."""
    if dtype is None or dtype_size(dtype) > dtype_size(fallback_dtype):
        dtype = fallback_dtype
    if not supports_cast(device, dtype):
        dtype = fallback_dtype
    return dtype


def device_supports_non_blocking(device: Any) -> bool:
    """Non-blocking copies: yes, except on MPS and with `--deterministic` (ComfyUI's rule;
    `--force-non-blocking` forces them)."""
    if flag("force_non_blocking"):
        return True
    if is_device_mps(device):
        return False
    return not flag("deterministic")


def device_should_use_non_blocking(device: Any) -> bool:
    """ComfyUI 0.3.64 answers False everywhere (non-blocking copies caused memory issues)."""
    return False


def force_channels_last() -> bool:
    return bool(flag("force_channels_last"))


def get_autocast_device(dev: Any) -> str:
    """The device-type string for `torch.autocast`: `dev.type`, or "cuda" for objects without one."""
    return dev.type if hasattr(dev, "type") else "cuda"


def cast_to(weight: torch.Tensor, dtype: Any = None, device: Any = None, non_blocking: bool = False,
            copy: bool = False, stream: Any = None) -> torch.Tensor:
    """`weight` in `dtype` on `device` (None: unchanged). On the same device and dtype without
    `copy` the tensor itself is returned; across devices a new tensor is allocated there and
    filled (non-blocking when asked), inside `stream` when one is given. ComfyUI's semantics."""
    import contextlib

    import torch

    within = stream if stream is not None else contextlib.nullcontext()
    if device is None or weight.device == device:
        if not copy and (dtype is None or weight.dtype == dtype):
            return weight
        with within:
            return weight.to(dtype=dtype, copy=copy)
    with within:
        out = torch.empty_like(weight, dtype=dtype, device=device)
        out.copy_(weight, non_blocking=non_blocking)
    return out


def cast_to_device(tensor: torch.Tensor, device: Any, dtype: Any, copy: bool = False) -> torch.Tensor:
    """`cast_to` with non-blocking copies where the device supports them."""
    return cast_to(tensor, dtype=dtype, device=device, non_blocking=device_supports_non_blocking(device), copy=copy)
