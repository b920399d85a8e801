"""Opening a checkpoint file: its tensor table (names, dtypes, shapes) and reading tensors on demand.

`.safetensors`: the header is parsed without touching tensor data; tensors are read straight
from the file into their destination buffer (`readinto`), in file order, so a load reads each
byte once, never holds a second copy of a tensor of the same dtype, and leaves no mapped pages
behind in the process (page-cache pages of a memory map would count towards RSS for as long as
the map lives). `.ckpt`/`.pt`/`.pth`/`.bin`: only through `torch.load(weights_only=True)`
(memory-mapped when the zip format allows it); anything that is not tensors in plain containers
is refused with `UnsafeCheckpointError`.
"""
from __future__ import annotations

import io
import pickle
from pathlib import Path
from typing import Iterable, Iterator, Mapping

import torch

from comfy_core.checkpoint.errors import (
    CheckpointNotFoundError,
    CorruptCheckpointError,
    UnsafeCheckpointError,
    UnsupportedFormatError,
)
from comfy_core.checkpoint.header import TensorInfo, read_safetensors_header

SAFETENSORS_SUFFIXES = (".safetensors", ".sft")
PICKLE_SUFFIXES = (".ckpt", ".pt", ".pth", ".bin")

TORCH_DTYPES: Mapping[str, torch.dtype] = {
    "BOOL": torch.bool, "U8": torch.uint8, "I8": torch.int8, "I16": torch.int16, "I32": torch.int32,
    "I64": torch.int64, "F16": torch.float16, "BF16": torch.bfloat16, "F32": torch.float32,
    "F64": torch.float64, "F8_E4M3": torch.float8_e4m3fn, "F8_E5M2": torch.float8_e5m2,
    "U16": torch.uint16, "U32": torch.uint32, "U64": torch.uint64,
}
DTYPE_NAMES: Mapping[torch.dtype, str] = {v: k for k, v in TORCH_DTYPES.items()}


class CheckpointFile:
    """An open checkpoint: `tensors` (name -> TensorInfo), `metadata`, `read`/`read_into`.

    Use as a context manager or call `close()`; reading after closing reopens the file.
    """

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        if not self.path.exists():
            raise CheckpointNotFoundError(self.path, "no such file")
        suffix = self.path.suffix.lower()
        self._file: io.BufferedReader | None = None
        self._pickled: dict[str, torch.Tensor] | None = None
        if suffix in SAFETENSORS_SUFFIXES:
            self.format = "safetensors"
            header = read_safetensors_header(self.path)
            self.tensors: Mapping[str, TensorInfo] = header.tensors
            self.metadata: Mapping[str, str] = header.metadata
            self._data_start = header.data_start
        elif suffix in PICKLE_SUFFIXES:
            self.format = "pickle"
            self._pickled = _torch_load(self.path)
            self.tensors = {k: TensorInfo(DTYPE_NAMES.get(v.dtype, str(v.dtype)), tuple(v.shape))
                            for k, v in self._pickled.items()}
            self.metadata = {}
            self._data_start = 0
        else:
            raise UnsupportedFormatError(
                self.path, f"unsupported checkpoint format {suffix or '(no suffix)'!r}; expected one of "
                           f"{', '.join(SAFETENSORS_SUFFIXES + PICKLE_SUFFIXES)}")

    # --- lifecycle ---

    def __enter__(self) -> "CheckpointFile":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None

    # --- reading ---

    def __contains__(self, name: str) -> bool:
        return name in self.tensors

    def keys(self) -> Iterable[str]:
        return self.tensors.keys()

    def read(self, name: str, dtype: torch.dtype | None = None) -> torch.Tensor:
        """A new CPU tensor holding `name`, optionally cast to `dtype`."""
        info = self._info(name)
        if self._pickled is not None:
            value = self._pickled[name]
            return value.to(dtype) if dtype is not None and value.dtype != dtype else value
        out = torch.empty(info.shape, dtype=dtype or TORCH_DTYPES[info.dtype])
        self.read_into(name, out)
        return out

    def read_into(self, name: str, out: torch.Tensor) -> None:
        """Fill the contiguous CPU tensor `out` (same shape; any dtype) with tensor `name`."""
        info = self._info(name)
        if tuple(out.shape) != info.shape:
            raise CorruptCheckpointError(self.path, f"tensor {name!r}: stored shape {list(info.shape)} "
                                                    f"does not fit destination {list(out.shape)}")
        if self._pickled is not None:
            with torch.no_grad():
                out.copy_(self._pickled[name])
            return
        source_dtype = TORCH_DTYPES[info.dtype]
        if out.dtype == source_dtype and out.is_contiguous() and out.device.type == "cpu":
            self._readinto_bytes(name, info, out)
            return
        staging = torch.empty(info.shape, dtype=source_dtype)
        self._readinto_bytes(name, info, staging)
        with torch.no_grad():
            out.copy_(staging)

    def in_file_order(self, names: Iterable[str]) -> list[str]:
        """`names` sorted by position in the file, for sequential reads."""
        return sorted(names, key=lambda n: self._info(n).begin)

    def _info(self, name: str) -> TensorInfo:
        try:
            return self.tensors[name]
        except KeyError:
            raise CorruptCheckpointError(self.path, f"tensor {name!r} is not in the file") from None

    def _readinto_bytes(self, name: str, info: TensorInfo, out: torch.Tensor) -> None:
        if info.nbytes == 0:
            return
        if self._file is None:
            self._file = open(self.path, "rb", buffering=0)  # noqa: SIM115 (closed by close())
        self._file.seek(self._data_start + info.begin)
        view = memoryview(out.reshape(-1).view(torch.uint8).numpy())  # bytes of `out`, no copy
        done = 0
        while done < info.nbytes:  # raw reads may return short counts for large buffers
            n = self._file.readinto(view[done:])
            if not n:
                raise CorruptCheckpointError(
                    self.path, f"tensor {name!r}: file ended after {done} of {info.nbytes} bytes (truncated?)")
            done += n


class LazyStateDict(Mapping[str, torch.Tensor]):
    """A read-only name -> tensor mapping over a `CheckpointFile`; each access reads the tensor.

    Iteration and `len` come from the header, so consumers that only look at keys read nothing.
    """

    def __init__(self, checkpoint: CheckpointFile, dtype: torch.dtype | None = None) -> None:
        self._checkpoint = checkpoint
        self._dtype = dtype

    def __getitem__(self, name: str) -> torch.Tensor:
        if name not in self._checkpoint.tensors:
            raise KeyError(name)
        info = self._checkpoint.tensors[name]
        floating = TORCH_DTYPES.get(info.dtype, torch.float32).is_floating_point
        return self._checkpoint.read(name, self._dtype if floating else None)

    def __iter__(self) -> Iterator[str]:
        return iter(self._checkpoint.tensors)

    def __len__(self) -> int:
        return len(self._checkpoint.tensors)

    def __contains__(self, name: object) -> bool:
        return name in self._checkpoint.tensors


def _torch_load(path: Path) -> dict[str, torch.Tensor]:
    """A pickled checkpoint's tensors, via `torch.load(weights_only=True)` only."""
    try:
        try:
            loaded = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
        except RuntimeError as exc:
            if "mmap" not in str(exc) and "zip" not in str(exc):
                raise
            loaded = torch.load(path, map_location="cpu", weights_only=True)  # legacy (non-zip) format
    except pickle.UnpicklingError as exc:
        raise UnsafeCheckpointError(
            path, f"refused: the pickle holds more than tensors (torch.load weights_only=True said: "
                  f"{str(exc).splitlines()[0]})") from None
    except (EOFError, RuntimeError, ValueError, OSError) as exc:
        raise CorruptCheckpointError(path, f"cannot read pickled checkpoint: {exc}") from None
    if isinstance(loaded, dict) and isinstance(loaded.get("state_dict"), dict):
        loaded = loaded["state_dict"]  # Lightning-style wrapper around the weights
    if not isinstance(loaded, dict):
        raise CorruptCheckpointError(path, f"expected a dict of tensors, found {type(loaded).__name__}")
    bad = [k for k, v in loaded.items() if not isinstance(k, str) or not isinstance(v, torch.Tensor)]
    if bad:
        raise CorruptCheckpointError(
            path, f"expected a dict of tensors; entries {bad[:5]} are not tensors")
    return loaded
