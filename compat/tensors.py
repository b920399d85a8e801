"""`comfy.utils` helpers for tensors and weight files (ComfyUI's comfy/utils.py behaviour).

torch is imported inside the functions: packs import `comfy.utils` at start-up, before the
server answers /object_info, and start-up stays torch-free (torch loads in the background once
the server listens, web/warmup.py).
"""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch


class WeightFileError(ValueError):
    """A weight file that cannot be read as safetensors or a torch pickle."""


def load_torch_file(ckpt: str | Path, safe_load: bool = False, device: Any = None, return_metadata: bool = False
                    ) -> Any:
    """A state dict from `.safetensors` / `.sft` (with its metadata when `return_metadata`) or a
    torch file (always `weights_only=True`: pickles can run code; `safe_load` is accepted for
    ComfyUI's signature). A checkpoint holding `state_dict` returns that dict."""
    import torch

    path = Path(ckpt)
    device = torch.device("cpu") if device is None else torch.device(device)
    metadata = None
    if path.suffix.lower() in (".safetensors", ".sft"):
        # Our reader, not safetensors' safe_open: its get_tensor leaks a little per tensor on every
        # call (comfy_core.checkpoint.reader.load_tensor_file), and packs load files per prompt.
        from comfy_core.checkpoint.reader import load_tensor_file

        try:
            sd, stored = load_tensor_file(path)
        except Exception as exc:  # noqa: BLE001 -- report which file, whatever the reader raised
            raise WeightFileError(f"load_torch_file: cannot read safetensors file {path}: {exc}") from exc
        metadata = stored or None  # safe_open's metadata(): None for a file without any
        if device.type != "cpu":
            sd = {key: value.to(device) for key, value in sd.items()}
    else:
        try:
            loaded = torch.load(str(path), map_location=device, weights_only=True)
        except Exception as exc:  # noqa: BLE001
            raise WeightFileError(f"load_torch_file: cannot read torch file {path}: {exc}") from exc
        sd = loaded.get("state_dict", loaded) if isinstance(loaded, dict) else loaded
    return (sd, metadata) if return_metadata else sd


UPSCALE_METHODS = ("nearest-exact", "bilinear", "area", "bicubic", "lanczos", "bislerp")


def common_upscale(samples: torch.Tensor, width: int, height: int, upscale_method: str, crop: str) -> torch.Tensor:
    """Resize `[B, C, H, W]` to `[B, C, height, width]`; crop "center" or "disabled"."""
    if upscale_method not in UPSCALE_METHODS:
        raise ValueError(f"common_upscale: upscale_method must be one of {UPSCALE_METHODS}, got {upscale_method!r}")
    if crop not in ("center", "disabled"):
        raise ValueError(f"common_upscale: crop must be 'center' or 'disabled', got {crop!r}")
    if upscale_method == "bislerp":
        from comfy_core.models.latent_resize import bislerp
        from comfy_core.image.resize import center_crop

        return bislerp(center_crop(samples, width, height) if crop == "center" else samples, width, height)
    from comfy_core.image.resize import upscale_samples

    return upscale_samples(samples, width, height, upscale_method, crop)


def repeat_to_batch_size(tensor: torch.Tensor, batch_size: int, dim: int = 0) -> torch.Tensor:
    """ComfyUI's helper: cut or tile `tensor` along `dim` to `batch_size`."""
    if tensor.shape[dim] > batch_size:
        return tensor.narrow(dim, 0, batch_size)
    if tensor.shape[dim] < batch_size:
        reps = [1] * tensor.ndim
        reps[dim] = -(-batch_size // tensor.shape[dim])
        return tensor.repeat(reps).narrow(dim, 0, batch_size)
    return tensor
