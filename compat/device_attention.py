"""`comfy.model_management`'s attention answers: which attention implementation is enabled.

ComfyUI decides at import from the machine and the flags (`--use-pytorch-cross-attention`,
`--use-split-cross-attention`, `--use-quad-cross-attention`, `--disable-xformers`,
`--force-upcast-attention`); packs read `XFORMERS_IS_AVAILABLE`, `pytorch_attention_enabled()`,
`xformers_enabled()` to pick their own attention. Here the answers describe this runtime: the
default backend is PyTorch's `scaled_dot_product_attention` on every device unless a split or
sub-quadratic flag chose another (the environment's `attention_backend`, comfy_core/attention), and xformers counts where our xformers
backend runs. `XFORMERS_IS_AVAILABLE` (read by packs while they import) looks the package up
without importing it, so start-up stays torch-free.
"""
from __future__ import annotations

from importlib import metadata, util
from typing import TYPE_CHECKING

from compat.devices import CPUState, current_cpu_state, flag, get_torch_device, is_amd, is_nvidia, mac_version
from compat.session import active

if TYPE_CHECKING:
    import torch


def xformers_available() -> bool:
    """ComfyUI's `XFORMERS_IS_AVAILABLE`: xformers is installed and neither `--disable-xformers`
    nor `--use-pytorch-cross-attention` was given."""
    if flag("disable_xformers") or flag("use_pytorch_cross_attention"):
        return False
    return util.find_spec("xformers") is not None


def xformers_version() -> str:
    """ComfyUI's `XFORMERS_VERSION`: the installed version, "" without xformers."""
    try:
        return metadata.version("xformers")
    except metadata.PackageNotFoundError:
        return ""


def xformers_vae_usable() -> bool:
    """ComfyUI's `XFORMERS_ENABLED_VAE`: False for xformers 0.0.18 (black high-resolution images)."""
    return not xformers_version().startswith("0.0.18")


def xformers_enabled() -> bool:
    """xformers is available and runs on the compute device (a GPU; our xformers backend's probe)."""
    if current_cpu_state() != CPUState.GPU or not xformers_available():
        return False
    from comfy_core.attention.backends import unavailable_reason

    return unavailable_reason("xformers", get_torch_device()) is None


def xformers_enabled_vae() -> bool:
    return xformers_enabled() and xformers_vae_usable()


def pytorch_attention_enabled() -> bool:
    """True when the runtime's default attention is PyTorch's SDPA: the environment's
    `attention_backend` (what the attention flags chose; None is the default, SDPA), else
    unless `--use-split-cross-attention` or `--use-quad-cross-attention` was given."""
    backend = getattr(active().env, "attention_backend", None)
    if backend is not None:
        return backend == "sdpa"
    return not (flag("use_split_cross_attention") or flag("use_quad_cross_attention"))


def pytorch_attention_enabled_vae() -> bool:
    """As `pytorch_attention_enabled`, but never on AMD (ComfyUI: high resolutions crash there)."""
    return False if is_amd() else pytorch_attention_enabled()


def pytorch_attention_flash_attention() -> bool:
    """PyTorch attention with a flash / memory-efficient kernel: on NVIDIA and AMD GPUs."""
    return pytorch_attention_enabled() and (is_nvidia() or is_amd())


def sage_attention_enabled() -> bool:
    """False: this runtime has no SageAttention backend (`--use-sage-attention` has no effect)."""
    return False


def flash_attention_enabled() -> bool:
    """False: this runtime has no flash-attn package backend (`--use-flash-attention` has no effect)."""
    return False


def force_upcast_attention_dtype() -> dict[torch.dtype, torch.dtype] | None:
    """`{float16: float32}` with `--force-upcast-attention` or on macOS 14.5+ (black images
    there otherwise), else None (ComfyUI's rule)."""
    import torch

    version = mac_version()
    if flag("force_upcast_attention") or (version is not None and version >= (14, 5)):
        return {torch.float16: torch.float32}
    return None
