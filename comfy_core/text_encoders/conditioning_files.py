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
from typing import Any, Callable

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


# -- `.conditioning` files: SaveConditioning's format -----------------------------------------------
# Behaviour of today's ComfyUI `SaveConditioning` / `LoadConditioning` (comfy_extras/nodes_cond.py,
# 2026): a safetensors file whose metadata key `comfy_conditioning` holds a JSON description of the
# CONDITIONING (`{"version": 1, "entries": [{"cond": ..., "extra": ...}, ...]}`) and whose tensors
# are `t0`, `t1`, ... in the order the description meets them. A value is described as
# `{"t": "tensor", "k": "t3"}`, `{"t": "nested", "s": [...]}` (a nested tensor, by its parts),
# `{"t": "dict" | "list" | "tuple", "v": ...}` or `{"t": "lit", "v": value}`.

SCHEMA_KEY = "comfy_conditioning"
FORMAT_VERSION = 1


class ConditioningPackError(ValueError):
    """A CONDITIONING value that the file format cannot hold, or a description it cannot read."""


def _pack(value: Any, tensors: dict[str, Any], where: str) -> dict:
    if isinstance(value, torch.Tensor) and not value.is_nested:
        key = f"t{len(tensors)}"
        tensors[key] = value
        return {"t": "tensor", "k": key}
    if getattr(value, "is_nested", False) is True and callable(getattr(value, "unbind", None)):
        return {"t": "nested", "s": [_pack(part, tensors, f"{where}[{i}]") for i, part in enumerate(value.unbind())]}
    if isinstance(value, dict):
        return {"t": "dict", "v": {str(k): _pack(v, tensors, f"{where}.{k}") for k, v in value.items()}}
    if isinstance(value, (list, tuple)):
        kind = "list" if isinstance(value, list) else "tuple"
        return {"t": kind, "v": [_pack(v, tensors, f"{where}[{i}]") for i, v in enumerate(value)]}
    if value is None or isinstance(value, (bool, int, float, str)):
        return {"t": "lit", "v": value}
    raise ConditioningPackError(f"{where} is a {type(value).__name__}, which a conditioning file cannot hold "
                                f"(tensors, dicts, lists, tuples, numbers, strings, booleans and None only)")


def pack_conditioning(conditioning: list) -> tuple[dict[str, torch.Tensor], dict]:
    """`(tensors, description)` of a CONDITIONING in ComfyUI's `.conditioning` layout (see the
    module docstring); tensors are contiguous CPU copies, no two sharing memory (safetensors
    refuses shared storage)."""
    found: dict[str, Any] = {}
    entries = [{"cond": _pack(cond, found, f"conditioning[{i}] tensor"),
                "extra": _pack(extra, found, f"conditioning[{i}] option")}
               for i, (cond, extra) in enumerate(conditioning)]
    tensors: dict[str, torch.Tensor] = {}
    for key, tensor in found.items():
        tensors[key] = tensor.detach().to("cpu", copy=True).contiguous()
    if not tensors:
        tensors["t0"] = torch.empty(0)
    return tensors, {"version": FORMAT_VERSION, "entries": entries}


def _unpack(spec: Any, tensors: dict[str, Any], nested: Callable[[list], Any] | None) -> Any:
    if not isinstance(spec, dict) or "t" not in spec:
        raise ConditioningPackError(f"not a value description: {spec!r:.80}")
    kind = spec["t"]
    if kind == "tensor":
        if spec.get("k") not in tensors:
            raise ConditioningPackError(f"the description names a tensor {spec.get('k')!r} the file does not hold")
        return tensors[spec["k"]]
    if kind == "nested":
        if nested is None:
            raise ConditioningPackError("the file holds a nested tensor and no nested-tensor type was given to read it")
        return nested([_unpack(part, tensors, nested) for part in spec["s"]])
    if kind == "dict":
        return {k: _unpack(v, tensors, nested) for k, v in spec["v"].items()}
    if kind == "list":
        return [_unpack(v, tensors, nested) for v in spec["v"]]
    if kind == "tuple":
        return tuple(_unpack(v, tensors, nested) for v in spec["v"])
    if kind == "lit":
        return spec["v"]
    raise ConditioningPackError(f"unknown value kind {kind!r}")


def unpack_conditioning(tensors: dict[str, Any], description: dict, nested: Callable[[list], Any] | None = None) -> list:
    """The CONDITIONING that `pack_conditioning` described; `nested(parts)` builds a nested tensor
    (the LATENT's NestedTensor, comfy_core.latent.nested, a layer beside this one)."""
    if not isinstance(description, dict) or description.get("version") != FORMAT_VERSION:
        version = description.get("version") if isinstance(description, dict) else None
        raise ConditioningPackError(f"unsupported conditioning file version {version!r} (this reads {FORMAT_VERSION})")
    entries = description.get("entries")
    if not isinstance(entries, list):
        raise ConditioningPackError("the description has no list of entries")
    return [[_unpack(entry["cond"], tensors, nested), _unpack(entry["extra"], tensors, nested)] for entry in entries]


def read_conditioning_file(path: Path, nested: Callable[[list], Any] | None = None) -> list:
    """The CONDITIONING in a `.conditioning` file (raises ConditioningPackError)."""
    from safetensors import safe_open

    try:
        with safe_open(str(path), framework="pt", device="cpu") as handle:
            metadata = handle.metadata() or {}
            tensors = {key: handle.get_tensor(key) for key in handle.keys()}
    except Exception as exc:  # noqa: BLE001 -- safetensors raises its own types; name the file
        raise ConditioningPackError(f"{path.name} is not a readable safetensors file ({exc})") from exc
    if SCHEMA_KEY not in metadata:
        raise ConditioningPackError(f"{path.name} is not a ComfyUI conditioning file (no {SCHEMA_KEY!r} metadata)")
    try:
        description = json.loads(metadata[SCHEMA_KEY])
    except ValueError as exc:
        raise ConditioningPackError(f"{path.name}: its {SCHEMA_KEY!r} metadata is not JSON ({exc})") from None
    try:
        return unpack_conditioning(tensors, description, nested)
    except (KeyError, TypeError) as exc:
        raise ConditioningPackError(f"{path.name}: a malformed description ({exc!r})") from None


def write_conditioning_file(path: str | os.PathLike, conditioning: list, metadata: dict[str, str] | None = None) -> None:
    """Write `conditioning` to `path` in the `.conditioning` layout, `metadata` (strings: the prompt,
    the workflow) beside its description; raises ConditioningPackError, before writing anything,
    for a value the format cannot hold."""
    from safetensors.torch import save_file

    tensors, description = pack_conditioning(conditioning)
    save_file(tensors, str(path), metadata={**(metadata or {}), SCHEMA_KEY: json.dumps(description)})
