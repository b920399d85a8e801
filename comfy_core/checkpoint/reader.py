"""Opening a checkpoint file: its tensor table (names, dtypes, shapes) and reading tensors on demand.

`.safetensors`: the header is parsed without touching tensor data (detection reads only that);
tensor data is reached through one private (copy-on-write) memory map of the file, opened on the
first data access: `stored_view` is a zero-copy tensor over the file's bytes, `read`/`read_into`
copy (and cast) out of it, `release_pages` unmaps pages a copy no longer needs so they stop
counting towards this process's memory. Loading many tensors at once (in parallel, zero-copy
where the dtype allows) is `comfy_core.checkpoint.bulk.load_tensors`. `.ckpt`/`.pt`/`.pth`/`.bin`:
only through `torch.load(weights_only=True)` (memory-mapped when the zip format allows it);
anything that is not tensors in plain containers is refused with `UnsafeCheckpointError`.
"""
from __future__ import annotations

import mmap
import os
import pickle
from pathlib import Path
from typing import Iterable, Iterator, Mapping, Protocol

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
    "F8_E8M0": torch.float8_e8m0fnu,  # MXFP8 block scales (comfy_core/weights/quant_fp8.py)
    "U16": torch.uint16, "U32": torch.uint32, "U64": torch.uint64,
}
DTYPE_NAMES: Mapping[torch.dtype, str] = {v: k for k, v in TORCH_DTYPES.items()}


class CheckpointFile:
    """An open checkpoint: `tensors` (name -> TensorInfo), `metadata`, `read`/`read_into`/`stored_view`.

    `path` is a file, or a name -> tensor mapping already in memory (a state dict; `name` labels
    it in errors, `metadata` stands for the file's). `pickle_entry`: in a pickled file, the
    top-level key whose dict holds the weights when it has one (PhotoMaker's `id_encoder`).

    Use as a context manager or call `close()`. Closing drops this object's hold on the memory map;
    tensors handed out by `stored_view` keep the mapping alive for as long as they live (the map
    is a copy-on-write one, so writing to them never changes the file). Reading after closing
    maps the file again.
    """

    def __init__(self, path: str | Path | Mapping[str, torch.Tensor], *, metadata: Mapping[str, str] | None = None,
                 name: str = "<state dict>", pickle_entry: str | None = None) -> None:
        self._pickled: dict[str, torch.Tensor] | None = None
        self._map: mmap.mmap | None = None
        self._bytes: torch.Tensor | None = None  # uint8 [file_size] over self._map
        self._file_size = 0
        if isinstance(path, Mapping):
            self._open_state_dict(path, metadata, name)
            return
        self.path = Path(path)
        if not self.path.exists():
            raise CheckpointNotFoundError(self.path, "no such file")
        suffix = self.path.suffix.lower()
        if suffix in SAFETENSORS_SUFFIXES:
            self.format = "safetensors"
            header = read_safetensors_header(self.path)
            self.tensors: Mapping[str, TensorInfo] = header.tensors
            self.metadata: Mapping[str, str] = header.metadata
            self.data_start = header.data_start
            self._file_size = header.file_size
        elif suffix in PICKLE_SUFFIXES:
            self.format = "pickle"
            self._pickled = _torch_load(self.path, pickle_entry)
            self.tensors = {k: TensorInfo(DTYPE_NAMES.get(v.dtype, str(v.dtype)), tuple(v.shape))
                            for k, v in self._pickled.items()}
            self.metadata = {}
            self.data_start = 0
        else:
            raise UnsupportedFormatError(
                self.path, f"unsupported checkpoint format {suffix or '(no suffix)'!r}; expected one of "
                           f"{', '.join(SAFETENSORS_SUFFIXES + PICKLE_SUFFIXES)}")

    def _open_state_dict(self, tensors: Mapping[str, torch.Tensor], metadata: Mapping[str, str] | None,
                         name: str) -> None:
        """An in-memory state dict (what ComfyUI's loaders take: `VAE(sd=...)`,
        `load_diffusion_model_state_dict(sd)`) seen as a checkpoint: reads serve its tensors as
        they are (like a pickled file's), `path` is the label `name` for error messages."""
        self.path = Path(name)
        bad = [k for k, v in tensors.items() if not isinstance(k, str) or not isinstance(v, torch.Tensor)]
        if bad:
            raise CorruptCheckpointError(self.path, f"expected a dict of tensors; entries {bad[:5]} are not tensors")
        self.format = "state_dict"
        self._pickled = dict(tensors)
        self.tensors = {k: TensorInfo(DTYPE_NAMES.get(v.dtype, str(v.dtype)), tuple(v.shape))
                        for k, v in self._pickled.items()}
        self.metadata = dict(metadata or {})
        self.data_start = 0

    # --- lifecycle ---

    def __enter__(self) -> "CheckpointFile":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        # Not mmap.close(): views handed out may still use the mapping (it would refuse while
        # buffers are exported). Dropping our references unmaps it once the last view is gone.
        self._map = None
        self._bytes = None

    # --- reading ---

    def __contains__(self, name: str) -> bool:
        return name in self.tensors

    def keys(self) -> Iterable[str]:
        return self.tensors.keys()

    def read(self, name: str, dtype: torch.dtype | None = None) -> torch.Tensor:
        """A new CPU tensor (its own memory) holding `name`, optionally cast to `dtype`."""
        source = self.read_stored(name)
        return source.to(dtype or source.dtype, copy=True)

    def read_into(self, name: str, out: torch.Tensor) -> None:
        """Fill the tensor `out` (same shape; any dtype) with tensor `name`."""
        info = self._info(name)
        if tuple(out.shape) != info.shape:
            raise CorruptCheckpointError(self.path, f"tensor {name!r}: stored shape {list(info.shape)} "
                                                    f"does not fit destination {list(out.shape)}")
        with torch.no_grad():
            out.copy_(self.read_stored(name))

    def read_stored(self, name: str) -> torch.Tensor:
        """Tensor `name` as stored, without a copy where possible (treat it as read-only)."""
        self._info(name)
        if self._pickled is not None:
            return self._pickled[name]
        view = self.stored_view(name)
        if view is not None:
            return view
        # Misaligned for its dtype (legal in the format, never written by safetensors): copy the
        # bytes to fresh, aligned memory first.
        info = self.tensors[name]
        start = self.data_start + info.begin
        raw = self.file_bytes()[start:start + info.nbytes].clone()  # [nbytes] uint8
        return raw.view(TORCH_DTYPES[info.dtype]).view(info.shape)

    def stored_view(self, name: str) -> torch.Tensor | None:
        """A zero-copy tensor over the bytes of `name` in the (copy-on-write) file mapping, or None
        when the tensor's offset is not a multiple of its element size (a view cannot express it),
        or for a pickled checkpoint."""
        info = self._info(name)
        if self._pickled is not None:
            return None
        dtype = TORCH_DTYPES[info.dtype]
        start = self.data_start + info.begin
        if start % dtype.itemsize:
            return None
        raw = self.file_bytes()[start:start + info.nbytes]  # [nbytes] uint8
        return raw.view(dtype).view(info.shape)

    def file_bytes(self) -> torch.Tensor:
        """The whole file as a uint8 CPU tensor `[file_size]` over a private, copy-on-write memory map."""
        if self._pickled is not None:
            raise UnsupportedFormatError(self.path, "file_bytes: only safetensors files are memory-mapped here")
        if self._bytes is None:
            with open(self.path, "rb") as f:
                size = os.fstat(f.fileno()).st_size
                if size != self._file_size:
                    raise CorruptCheckpointError(
                        self.path, f"file size changed from {self._file_size} to {size} bytes since its header "
                                   "was read (being rewritten?)")
                self._map = mmap.mmap(f.fileno(), size, access=mmap.ACCESS_COPY)
            self._bytes = torch.frombuffer(self._map, dtype=torch.uint8)  # keeps the map alive
        return self._bytes

    def release_pages(self, file_start: int, file_stop: int) -> None:
        """Unmap the whole pages inside file bytes `[file_start, file_stop)` from this process.

        Only for bytes no view handed out relies on being resident: the data stays in the page
        cache and a later access maps it again from the file (the map is private and unwritten
        there), so this changes memory use, never contents.
        """
        if self._map is None or not hasattr(mmap, "MADV_DONTNEED"):
            return
        page = mmap.PAGESIZE
        first = -(-file_start // page) * page  # round inwards: never a page shared with a neighbour
        last = file_stop // page * page
        if last > first:
            self._map.madvise(mmap.MADV_DONTNEED, first, last - first)

    def in_file_order(self, names: Iterable[str]) -> list[str]:
        """`names` sorted by position in the file, for sequential reads."""
        return sorted(names, key=lambda n: self._info(n).begin)

    def _info(self, name: str) -> TensorInfo:
        try:
            return self.tensors[name]
        except KeyError:
            raise CorruptCheckpointError(self.path, f"tensor {name!r} is not in the file") from None


class PendingRead(Protocol):
    """Tensors being read in the background (`comfy_core.checkpoint.bulk.BulkRead` is one): the
    names and dtypes asked for, and the result, waited for. A protocol, so that this module (the
    file) does not depend on the module that reads many of its tensors at once (bulk builds on it)."""

    requests: Mapping[str, torch.dtype]

    def result(self) -> dict[str, torch.Tensor]: ...

    def tensor(self, name: str) -> torch.Tensor: ...


class LazyStateDict(Mapping[str, torch.Tensor]):
    """A read-only name -> tensor mapping over a `CheckpointFile`; floating tensors in `dtype`.

    Tensors requested from `pending` (a `PendingRead`, e.g. a `bulk.BulkRead` in the right dtypes) are served from it,
    each access waiting for that tensor's part of the read; any other access reads its tensor then. Iteration and `len` come from the header,
    so consumers that only look at keys read nothing.
    """

    def __init__(self, checkpoint: CheckpointFile, dtype: torch.dtype | None = None,
                 pending: PendingRead | None = None) -> None:
        self._checkpoint = checkpoint
        self._dtype = dtype
        self._pending = pending

    def __getitem__(self, name: str) -> torch.Tensor:
        if self._pending is not None and name in self._pending.requests:
            return self._pending.tensor(name)
        if name not in self._checkpoint.tensors:
            raise KeyError(name)
        return self._checkpoint.read(name, self.dtype_for(name))

    def dtype_for(self, name: str) -> torch.dtype | None:
        """The dtype `name` is served in: `dtype` for floating tensors, else as stored (None)."""
        info = self._checkpoint.tensors[name]
        floating = TORCH_DTYPES.get(info.dtype, torch.float32).is_floating_point
        return self._dtype if floating else None

    def __iter__(self) -> Iterator[str]:
        return iter(self._checkpoint.tensors)

    def __len__(self) -> int:
        return len(self._checkpoint.tensors)

    def __contains__(self, name: object) -> bool:
        return name in self._checkpoint.tensors


def _torch_load(path: Path, entry: str | None = None) -> dict[str, torch.Tensor]:
    """A pickled checkpoint's tensors, via `torch.load(weights_only=True)` only; `entry`: the
    top-level key whose dict holds the weights when the file has it (PhotoMaker's `id_encoder`)."""
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
    if entry is not None and isinstance(loaded, dict) and isinstance(loaded.get(entry), dict):
        loaded = loaded[entry]
    if not isinstance(loaded, dict):
        raise CorruptCheckpointError(path, f"expected a dict of tensors, found {type(loaded).__name__}")
    bad = [k for k, v in loaded.items() if not isinstance(k, str) or not isinstance(v, torch.Tensor)]
    if bad:
        raise CorruptCheckpointError(
            path, f"expected a dict of tensors; entries {bad[:5]} are not tensors")
    return loaded


def load_tensor_file(path: str | Path) -> tuple[dict[str, torch.Tensor], dict[str, str]]:
    """Every tensor of a weight file, each a new CPU tensor with its own memory, and the file's
    metadata (`.safetensors`/`.sft`; a pickled `.ckpt`/`.pt`/`.pth`/`.bin` through
    `torch.load(weights_only=True)`, no metadata). Typed `CheckpointError`s as `CheckpointFile`.

    What LoRA, embedding and pack loaders read whole. Not `safetensors.torch.load_file` /
    `safe_open(...).get_tensor`: safetensors 0.8.0's memory-mapped reader keeps two Python ints
    per tensor read alive for ever (about 56 bytes a tensor), so a server that loads a LoRA of
    1 280 tensors on every prompt grew by about 70 KiB a prompt (bench/memory_curve.py). Copies,
    not views: no tensor keeps the file's mapping alive, which is closed on return.
    """
    with CheckpointFile(path) as checkpoint:
        tensors = {name: checkpoint.read(name) for name in checkpoint.in_file_order(checkpoint.keys())}
        return tensors, dict(checkpoint.metadata)
