"""Reading an upscale model's weight file into a state dict, unwrapped as ComfyUI's
`comfy/utils.py: load_torch_file` unwraps it (0.3.64), written here:

- `.safetensors` / `.sft`: the flat tensor table.
- anything else: `torch.load(weights_only=True)` (a pickle that holds more than tensors and
  plain containers is refused); a dict holding `state_dict` gives that entry; a dict with one
  entry whose value is a dict gives that value (e.g. `{"params_ema": {...}}`); any other dict
  is returned as it is (spandrel unwraps `params_ema`, `params`, `model`, ... itself).
"""
from __future__ import annotations

import pickle
from pathlib import Path
from typing import Any

import torch

SAFETENSORS_SUFFIXES = (".safetensors", ".sft")


class UpscaleModelError(ValueError):
    """An upscale model file that cannot be read or is not a single-image model spandrel knows."""


def read_state_dict(path: str | Path) -> dict[str, Any]:
    """The state dict in `path` (on the CPU), unwrapped as the module docstring says."""
    path = Path(path)
    if path.suffix.lower() in SAFETENSORS_SUFFIXES:
        from comfy_core.checkpoint.errors import CheckpointError
        from comfy_core.checkpoint.reader import load_tensor_file

        try:
            return load_tensor_file(path)[0]
        except CheckpointError as exc:
            raise UpscaleModelError(f"{path.name}: not a readable safetensors file ({exc})") from exc
    loaded = _torch_load(path)
    if not isinstance(loaded, dict):
        raise UpscaleModelError(f"{path.name}: expected a dict of weights, found {type(loaded).__name__}")
    if "state_dict" in loaded:
        loaded = loaded["state_dict"]
    elif len(loaded) == 1 and isinstance(next(iter(loaded.values())), dict):
        loaded = next(iter(loaded.values()))
    if not isinstance(loaded, dict):
        raise UpscaleModelError(f"{path.name}: expected a dict of weights, found {type(loaded).__name__}")
    return loaded


def _torch_load(path: Path) -> Any:
    try:
        try:
            return torch.load(path, map_location="cpu", weights_only=True, mmap=True)
        except RuntimeError as exc:
            if "mmap" not in str(exc) and "zip" not in str(exc):
                raise
            return torch.load(path, map_location="cpu", weights_only=True)  # the legacy (non-zip) format
    except pickle.UnpicklingError as exc:
        raise UpscaleModelError(f"{path.name}: refused, the pickle holds more than weights (torch.load with "
                                f"weights_only=True said: {str(exc).splitlines()[0]})") from None
    except (EOFError, RuntimeError, ValueError, OSError) as exc:
        raise UpscaleModelError(f"{path.name}: not a readable torch file ({exc})") from exc
