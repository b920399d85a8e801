"""Today's ComfyUI's `comfy.memory_management`, for node packs: the tensor-geometry and gathered
buffer helpers, as ComfyUI has them on a machine without comfy-aimdo's dynamic VRAM.

ComfyUI (2026, comfy/memory_management.py: comfyanonymous/ComfyUI @6456be5c, and the later form
with `read_tensor_file_slice_into` / the RAM-cache release hook) keeps here what its weight
casting uses to pack several tensors into one byte buffer: `vram_aligned_size` (bytes rounded up
to 1 KiB, a list or a `QuantizedTensor`'s inner tensors summed), `interpret_gathered_like` (views
of a 1-D byte buffer shaped like the given tensors, each starting at an aligned offset),
`TensorGeometry` / `tensors_to_geometries` (shape and dtype without data), and
`read_tensor_file_slice_into` (a weight read straight from its file into a host buffer, when the
loader tagged its storage with the file slice it came from).

This runtime has no dynamic VRAM (`comfy.memory_management.aimdo_enabled` is False, as on a
ComfyUI where comfy-aimdo did not start) and its loaders tag no storage with a file slice, so
`read_tensor_file_slice_into` answers False for the weights it loads (the caller then copies, as
ComfyUI's does). `QuantizedTensor` is comfy.quant_ops' (compat/quant_ops_api.py): comfy-kitchen's
class when installed, else ComfyUI's placeholder that no tensor is. Written here after ComfyUI's
behaviour; the module imports torch (the surface module resolves these names on first read).
"""
from __future__ import annotations

import ctypes
import dataclasses
import math
from typing import Any, NamedTuple, Sequence

import torch

from compat.quant_ops_api import QuantizedTensor

ALIGNMENT = 1024  # bytes: ComfyUI's alignment of each tensor inside a gathered buffer


class TensorGeometry(NamedTuple):
    """A tensor's shape and dtype without its data (what a buffer must hold for it)."""

    shape: Any
    dtype: torch.dtype

    def element_size(self) -> int:
        bits = torch.finfo(self.dtype).bits if self.dtype.is_floating_point else torch.iinfo(self.dtype).bits
        return bits // 8

    def numel(self) -> int:
        return math.prod(self.shape)


class TensorFileSlice(NamedTuple):
    """Where a tensor's bytes lie in its file: the open file, the lock its reads take, the byte
    offset and size (ComfyUI's loader stores one on a storage as `_comfy_tensor_file_slice`)."""

    file_ref: Any
    lock: Any
    offset: int
    size: int


def tensors_to_geometries(tensors: Sequence[Any], dtype: torch.dtype | None = None) -> list[Any]:
    """A `TensorGeometry` per tensor (`dtype` overriding each tensor's, a tensor's `_model_dtype`
    standing for its own); None and `QuantizedTensor`s are passed through as they are."""
    geometries: list[Any] = []
    for t in tensors:
        if t is None or isinstance(t, QuantizedTensor):
            geometries.append(t)
            continue
        geometries.append(TensorGeometry(shape=t.shape, dtype=dtype or getattr(t, "_model_dtype", t.dtype)))
    return geometries


def _inner_tensors(tensor: Any) -> tuple[dict[str, Any], Any]:
    """A `QuantizedTensor`'s inner tensors by attribute (its `__tensor_flatten__`) and its context."""
    names, context = tensor.__tensor_flatten__()
    return {name: getattr(tensor, name) for name in names}, context


def vram_aligned_size(tensor: Any) -> int:
    """Bytes `tensor` takes in a gathered buffer: its data rounded up to `ALIGNMENT`; a list (or a
    `QuantizedTensor`'s inner tensors) summed, None 0. Geometries count as their tensors."""
    if isinstance(tensor, list):
        return sum(vram_aligned_size(t) for t in tensor)
    if isinstance(tensor, QuantizedTensor):
        return vram_aligned_size(list(_inner_tensors(tensor)[0].values()))
    if tensor is None:
        return 0
    size = tensor.numel() * tensor.element_size()
    return -(-size // ALIGNMENT) * ALIGNMENT


def interpret_gathered_like(tensors: Sequence[Any], gathered: torch.Tensor) -> list[Any]:
    """Views of the 1-D byte buffer `gathered` shaped and typed like each of `tensors` (None stays
    None; a `QuantizedTensor` gets a view per inner tensor, rebuilt as one), laid out one after the
    other at `vram_aligned_size` steps. Raises ValueError for a buffer that is not 1-D single-byte
    or too small."""
    if gathered.dim() != 1 or gathered.element_size() != 1:
        raise ValueError(f"Buffer must be 1D and single-byte (got {gathered.dim()}D {gathered.dtype})")
    offset = 0
    views: list[Any] = []
    for tensor in tensors:
        if tensor is None:
            views.append(None)
            continue
        quantized = isinstance(tensor, QuantizedTensor)
        templates, context = _inner_tensors(tensor) if quantized else ({"data": tensor}, None)
        actual = {}
        for name, template in templates.items():
            size = template.numel() * template.element_size()
            if offset + size > gathered.numel():
                raise ValueError(f"Buffer too small: needs {offset + size} bytes, but only has {gathered.numel()}.")
            actual[name] = gathered[offset:offset + size].view(dtype=template.dtype).view(template.shape)
            offset += vram_aligned_size(template)
        views.append(QuantizedTensor.__tensor_unflatten__(actual, context, 0, 0) if quantized else actual["data"])
    return views


def read_tensor_file_slice_into(tensor: Any, destination: Any, stream: Any = None, destination2: Any = None) -> bool:
    """Read `tensor`'s bytes from its file into the host tensor `destination`, when its storage
    carries the file slice it came from (`_comfy_tensor_file_slice`, a `TensorFileSlice`); True
    when done. False (the caller copies instead) for a tensor without one (every weight this
    runtime loads), a device destination (`destination2`, or a non-CPU `destination`: ComfyUI
    reads those through comfy-aimdo, which this runtime does not have), a destination too small,
    or a tensor that is not its whole contiguous storage. A `QuantizedTensor` reads its data and
    copies its parameters."""
    if isinstance(tensor, QuantizedTensor):
        if not isinstance(destination, QuantizedTensor) or destination2 is not None:
            return False
        if not read_tensor_file_slice_into(tensor._qdata, destination._qdata, stream=stream):
            return False
        keep = destination._params.orig_dtype
        destination._params.copy_from(tensor._params, non_blocking=False)
        destination._params = dataclasses.replace(destination._params, orig_dtype=keep)
        return True
    storage = tensor.untyped_storage() if isinstance(tensor, torch.Tensor) else None
    info = getattr(storage, "_comfy_tensor_file_slice", None)
    if info is None or destination is None or destination2 is not None:
        return False
    file_obj = info.file_ref
    if (file_obj is None or destination.device.type != "cpu"
            or destination.numel() * destination.element_size() < info.size
            or tensor.numel() * tensor.element_size() != info.size
            or tensor.storage_offset() != 0 or not tensor.is_contiguous()
            or not destination.is_contiguous()
            or not hasattr(file_obj, "seek") or not hasattr(file_obj, "readinto")):
        return False
    if info.size == 0:
        return True
    view = memoryview((ctypes.c_ubyte * info.size).from_address(destination.data_ptr()))
    try:
        with info.lock:
            file_obj.seek(info.offset)
            done = 0
            while done < info.size:
                try:
                    n = file_obj.readinto(view[done:])
                except OSError:
                    return False
                if not n:
                    return False
                done += n
        return True
    finally:
        view.release()
