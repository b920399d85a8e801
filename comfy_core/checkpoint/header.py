"""Reading a safetensors header (names, dtypes, shapes, metadata) without touching tensor data.

Format (https://github.com/huggingface/safetensors, "Format"): 8 bytes little-endian u64 `N`,
then `N` bytes of UTF-8 JSON mapping each tensor name to `{"dtype", "shape", "data_offsets":
[begin, end]}` (offsets relative to the byte after the header) plus an optional
`"__metadata__": {str: str}`, then the data. Everything here reads only those `8 + N` bytes and
the file size, so detection costs milliseconds even for a 7 GB file and works on a file whose
data section is garbage.
"""
from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping

from comfy_core.checkpoint.errors import CheckpointNotFoundError, CorruptCheckpointError

# Bytes per element of each safetensors dtype name.
DTYPE_SIZES: Mapping[str, float] = {
    "BOOL": 1, "U8": 1, "I8": 1, "F8_E4M3": 1, "F8_E5M2": 1, "F8_E8M0": 1, "I16": 2, "U16": 2, "F16": 2,
    "BF16": 2, "I32": 4, "U32": 4, "F32": 4, "I64": 8, "U64": 8, "F64": 8,
}

# A header larger than this is not a checkpoint header (safetensors itself caps it at 100 MB).
MAX_HEADER_BYTES = 100_000_000


@dataclass(frozen=True)
class TensorInfo:
    """What the header says about one tensor. `dtype` is the safetensors name ("F16", "F32", ...)."""

    dtype: str
    shape: tuple[int, ...]
    begin: int = 0  # offset of the data from the start of the data section
    end: int = 0

    @property
    def numel(self) -> int:
        return math.prod(self.shape)

    @property
    def nbytes(self) -> int:
        return self.end - self.begin


@dataclass(frozen=True)
class SafetensorsHeader:
    tensors: Mapping[str, TensorInfo]
    metadata: Mapping[str, str]
    data_start: int  # absolute file offset of the data section
    file_size: int

    @property
    def data_bytes(self) -> int:
        return sum(info.nbytes for info in self.tensors.values())


def read_safetensors_header(path: str | Path) -> SafetensorsHeader:
    """Parse and validate the header of `path`. Raises `CorruptCheckpointError` naming the file for
    a truncated file, a malformed header, an unknown dtype, a shape that disagrees with its byte
    extent, or extents outside the file."""
    path = Path(path)
    try:
        size = os.path.getsize(path)
        with open(path, "rb") as f:
            prefix = f.read(8)
            if len(prefix) < 8:
                raise CorruptCheckpointError(path, f"file is {size} bytes, too short for a safetensors header")
            n = int.from_bytes(prefix, "little")
            if n > MAX_HEADER_BYTES or 8 + n > size:
                raise CorruptCheckpointError(
                    path, f"header length {n} does not fit in a {size}-byte file (truncated or not safetensors)")
            raw = f.read(n)
    except FileNotFoundError:
        raise CheckpointNotFoundError(path, "no such file") from None
    try:
        parsed = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise CorruptCheckpointError(path, f"header is not valid JSON ({exc})") from None
    if not isinstance(parsed, dict):
        raise CorruptCheckpointError(path, f"header must be a JSON object, got {type(parsed).__name__}")
    metadata = parsed.pop("__metadata__", None) or {}
    if not isinstance(metadata, dict):
        raise CorruptCheckpointError(path, "__metadata__ must be an object of strings")
    data_start = 8 + n
    data_size = size - data_start
    tensors: dict[str, TensorInfo] = {}
    for name, entry in parsed.items():
        tensors[name] = _tensor_info(path, name, entry, data_size)
    return SafetensorsHeader(tensors, {str(k): str(v) for k, v in metadata.items()}, data_start, size)


def _tensor_info(path: Path, name: str, entry: object, data_size: int) -> TensorInfo:
    try:
        dtype = entry["dtype"]  # type: ignore[index]
        shape = tuple(int(d) for d in entry["shape"])  # type: ignore[index]
        begin, end = (int(o) for o in entry["data_offsets"])  # type: ignore[index]
    except (KeyError, TypeError, ValueError):
        raise CorruptCheckpointError(path, f"tensor {name!r}: malformed header entry {entry!r}") from None
    if dtype not in DTYPE_SIZES:
        raise CorruptCheckpointError(path, f"tensor {name!r}: unknown dtype {dtype!r}")
    if any(d < 0 for d in shape):
        raise CorruptCheckpointError(path, f"tensor {name!r}: negative dimension in shape {list(shape)}")
    expected = math.prod(shape) * DTYPE_SIZES[dtype]
    if not 0 <= begin <= end or end - begin != expected:
        raise CorruptCheckpointError(
            path, f"tensor {name!r}: data offsets [{begin}, {end}] do not match {dtype} shape {list(shape)} "
                  f"({expected:g} bytes)")
    if end > data_size:
        raise CorruptCheckpointError(
            path, f"tensor {name!r} ends at byte {end} of the data section, but the file holds only "
                  f"{data_size} data bytes (truncated file)")
    return TensorInfo(dtype, shape, begin, end)
