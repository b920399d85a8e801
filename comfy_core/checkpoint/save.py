"""Writing a `.safetensors` file, one tensor at a time.

The format (https://github.com/huggingface/safetensors, "Format"; read by `header.py`): 8 bytes
little-endian u64 `N`, `N` bytes of JSON (`{"__metadata__": {str: str}, name: {"dtype", "shape",
"data_offsets": [begin, end]}}`, padded with spaces to a multiple of 8), then the tensors' bytes.
As the safetensors library does, tensors are laid out by element size (largest first), then by
name, so every tensor starts at a multiple of its element size and readers can map it in place.

Unlike `safetensors.torch.save_file`, tensors are copied to the CPU and written one by one (peak
extra memory: one tensor, wherever the source tensors live), tensors sharing storage (views of
one memory map) are fine, and the file appears under its name only once complete (written to a
temporary name in the same folder, then renamed), so a failed save leaves no partial file.
"""
from __future__ import annotations

import json
import os
import struct
import uuid
from pathlib import Path
from typing import Mapping

import torch

from comfy_core.checkpoint.errors import CheckpointError
from comfy_core.checkpoint.reader import DTYPE_NAMES

_ALIGNMENT = 8


def safetensors_header(tensors: Mapping[str, torch.Tensor], metadata: Mapping[str, str] | None = None) -> tuple[bytes, list[str]]:
    """The padded header (without its length prefix) and the order the tensors' bytes follow it."""
    order = sorted(tensors, key=lambda name: (-tensors[name].element_size(), name))
    header: dict[str, object] = {}
    if metadata is not None:
        header["__metadata__"] = dict(metadata)
    offset = 0
    for name in order:
        tensor = tensors[name]
        size = tensor.numel() * tensor.element_size()
        header[name] = {"dtype": DTYPE_NAMES[tensor.dtype], "shape": list(tensor.shape),
                        "data_offsets": [offset, offset + size]}
        offset += size
    text = json.dumps(header, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
    return text + b" " * (-len(text) % _ALIGNMENT), order


def write_safetensors(path: str | Path, tensors: Mapping[str, torch.Tensor],
                      metadata: Mapping[str, str] | None = None) -> Path:
    """Write `tensors` (any device, any layout) and `metadata` to `path`; returns the path.

    Raises `CheckpointError` naming the file for a dtype safetensors has no name for, metadata
    that is not str -> str, or a tensor name that is not a str (nothing is written then).
    """
    path = Path(path)
    for name, tensor in tensors.items():
        if not isinstance(name, str) or name == "__metadata__":
            raise CheckpointError(path, f"tensor name {name!r}: names are strings other than '__metadata__'")
        if not isinstance(tensor, torch.Tensor):
            raise CheckpointError(path, f"{name!r} is a {type(tensor).__name__}, not a tensor")
        if tensor.dtype not in DTYPE_NAMES:
            raise CheckpointError(path, f"{name!r}: dtype {tensor.dtype} has no safetensors name")
    for key, value in (metadata or {}).items():
        if not isinstance(key, str) or not isinstance(value, str):
            raise CheckpointError(path, f"metadata must map str to str, got {key!r}: {type(value).__name__}")
    header, order = safetensors_header(tensors, metadata)
    # Opened by name ("x": created, never reused) so the file gets the usual permissions.
    temporary = path.with_name(f".{path.name}.{uuid.uuid4().hex}.part")
    try:
        with open(temporary, "xb") as out:
            out.write(struct.pack("<Q", len(header)))
            out.write(header)
            for name in order:
                out.write(_tensor_bytes(tensors[name]))
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
    return path


def _tensor_bytes(tensor: torch.Tensor) -> memoryview:
    """The tensor's elements in C order as little-endian bytes (a CPU copy only when needed)."""
    flat = tensor.detach().to("cpu").contiguous().reshape(-1)
    # A byte view works for every dtype (bf16 and fp8 have no numpy type of their own).
    return memoryview(flat.view(torch.uint8).numpy())
