"""Precomputed conditioning files: a text encoder's output saved once, loaded instead of encoding.

Behaviour of today's ComfyUI `ConditioningLoader` (comfy_extras/nodes_cond.py, 2026, the version
that reads what its `SaveConditioning` writes), written here. The file is read as ComfyUI's
`comfy.utils.load_torch_file(..., safe_load=True, return_metadata=True)` reads a weight file:
`.safetensors` / `.sft` as a flat tensor table plus its string metadata; anything else with
`torch.load(weights_only=True)` (a pickle holding code is refused; no metadata), a dict holding
`state_dict` giving that entry and a one-entry dict whose value is a dict giving that value.

From that table: the `"conditioning"` tensor `[batch, tokens, width]` is the CONDITIONING's
tensor. Its options start from the JSON object in the metadata's `"conditioning_options"` (plain
values: numbers, strings, booleans); then every other entry is an option under its own name,
except names ending in `.<digits>` (`reference_latents.0`, `reference_latents.1`, ...), which are
gathered into one list option per prefix, ordered by the number: `[[conditioning, options]]`.
"""
from __future__ import annotations

import json
import os
import pickle
from pathlib import Path
from typing import Any

import torch

SAFETENSORS_SUFFIXES = (".safetensors", ".sft")
CONDITIONING_KEY = "conditioning"
OPTIONS_METADATA_KEY = "conditioning_options"


class ConditioningFileError(ValueError):
    """A conditioning file that cannot be read, or holds no `[batch, tokens, width]` conditioning."""


def read_tensor_file(path: str | os.PathLike) -> tuple[dict[str, Any], dict[str, str] | None]:
    """`(state dict on the CPU, safetensors metadata or None)` of `path` (see the module docstring)."""
    path = Path(path)
    if path.suffix.lower() in SAFETENSORS_SUFFIXES:
        from safetensors import safe_open

        try:
            with safe_open(str(path), framework="pt", device="cpu") as handle:
                return {key: handle.get_tensor(key) for key in handle.keys()}, handle.metadata()
        except Exception as exc:  # noqa: BLE001 -- safetensors raises its own types; name the file
            raise ConditioningFileError(f"{path.name}: not a readable safetensors file ({exc})") from exc
    try:
        loaded = torch.load(str(path), map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as exc:
        raise ConditioningFileError(f"{path.name}: refused, the pickle holds more than tensors (torch.load with "
                                    f"weights_only=True said: {str(exc).splitlines()[0]})") from None
    except (EOFError, RuntimeError, ValueError, OSError) as exc:
        raise ConditioningFileError(f"{path.name}: not a readable torch file ({exc})") from exc
    if not isinstance(loaded, dict):
        raise ConditioningFileError(f"{path.name}: expected a dict of tensors, found {type(loaded).__name__}")
    if "state_dict" in loaded:
        return loaded["state_dict"], None
    if len(loaded) == 1 and isinstance(next(iter(loaded.values())), dict):
        return next(iter(loaded.values())), None
    return loaded, None


def _metadata_options(metadata: dict[str, str] | None, name: str) -> dict[str, Any]:
    text = (metadata or {}).get(OPTIONS_METADATA_KEY, "{}")
    try:
        options = json.loads(text)
    except (TypeError, ValueError) as exc:
        raise ConditioningFileError(f"{name}: metadata {OPTIONS_METADATA_KEY!r} is not JSON ({exc})") from None
    if not isinstance(options, dict):
        raise ConditioningFileError(f"{name}: metadata {OPTIONS_METADATA_KEY!r} must be a JSON object, "
                                    f"got {type(options).__name__}")
    return options


def conditioning_from_state_dict(state: dict[str, Any], metadata: dict[str, str] | None = None,
                                 name: str = "the file") -> list[list[Any]]:
    """`[[state["conditioning"], options]]` (see the module docstring); `state` is not changed."""
    if not isinstance(state, dict):
        raise ConditioningFileError(f"{name}: expected a dict of tensors, found {type(state).__name__}")
    rest = dict(state)
    if CONDITIONING_KEY not in rest:
        raise ConditioningFileError(f"{name}: no {CONDITIONING_KEY!r} tensor in it (it holds {sorted(rest)[:8]})")
    cond = rest.pop(CONDITIONING_KEY)
    if not isinstance(cond, torch.Tensor) or cond.ndim != 3:
        shape = tuple(cond.shape) if isinstance(cond, torch.Tensor) else type(cond).__name__
        raise ConditioningFileError(f"{name}: {CONDITIONING_KEY!r} must be a [batch, tokens, width] tensor, "
                                    f"got {shape}")
    options = _metadata_options(metadata, name)
    lists: dict[str, dict[int, Any]] = {}
    for key, value in rest.items():
        prefix, _, index = key.rpartition(".")
        if index.isdigit():
            lists.setdefault(prefix, {})[int(index)] = value
        else:
            options[key] = value
    options.update({prefix: [items[i] for i in sorted(items)] for prefix, items in lists.items()})
    return [[cond, options]]


def load_conditioning_file(path: str | os.PathLike) -> list[list[Any]]:
    """The CONDITIONING stored in `path` (see the module docstring)."""
    state, metadata = read_tensor_file(path)
    return conditioning_from_state_dict(state, metadata, Path(path).name)
