"""A checkpoint seen under other tensor names, without copying anything.

Split files name their tensors differently from the single-file checkpoints our modules are
laid out for: a bare diffusion model has no `model.diffusion_model.` prefix, a diffusers folder
uses diffusers' module names. `RenamedCheckpoint` presents such a file under our names (a
mapping `our name -> stored name`), so detection, the bulk reader and `materialize` run on it
unchanged: the tensor table, reads and zero-copy views are the stored file's, looked up by the
stored name. Names left out of the mapping are invisible.
"""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Iterable, Mapping

import torch

from comfy_core.checkpoint.errors import CorruptCheckpointError
from comfy_core.checkpoint.header import TensorInfo

if TYPE_CHECKING:
    from comfy_core.checkpoint.reader import CheckpointFile


class RenamedCheckpoint:
    """`checkpoint` under the names `names` (`{our name: stored name}`); the `CheckpointFile`
    interface the loaders use (`tensors`, `metadata`, `read`, `stored_view`, ...)."""

    def __init__(self, checkpoint: "CheckpointFile", names: Mapping[str, str]) -> None:
        missing = [stored for stored in names.values() if stored not in checkpoint.tensors]
        if missing:
            raise CorruptCheckpointError(checkpoint.path, f"renamed view: tensors {missing[:5]} are not in the file")
        self.base = checkpoint
        self.names = dict(names)
        self.tensors: Mapping[str, TensorInfo] = {ours: checkpoint.tensors[stored] for ours, stored in self.names.items()}

    # --- what a CheckpointFile offers, by our names ---

    @property
    def path(self) -> Path:
        return self.base.path

    @property
    def format(self) -> str:
        return self.base.format

    @property
    def metadata(self) -> Mapping[str, str]:
        return self.base.metadata

    @property
    def data_start(self) -> int:
        return self.base.data_start

    def stored_name(self, name: str) -> str:
        try:
            return self.names[name]
        except KeyError:
            raise CorruptCheckpointError(self.base.path, f"tensor {name!r} is not in the file") from None

    def __contains__(self, name: str) -> bool:
        return name in self.names

    def keys(self) -> Iterable[str]:
        return self.names.keys()

    def read(self, name: str, dtype: torch.dtype | None = None) -> torch.Tensor:
        return self.base.read(self.stored_name(name), dtype)

    def read_into(self, name: str, out: torch.Tensor) -> None:
        self.base.read_into(self.stored_name(name), out)

    def read_stored(self, name: str) -> torch.Tensor:
        return self.base.read_stored(self.stored_name(name))

    def stored_view(self, name: str) -> torch.Tensor | None:
        return self.base.stored_view(self.stored_name(name))

    def file_bytes(self) -> torch.Tensor:
        return self.base.file_bytes()

    def release_pages(self, file_start: int, file_stop: int) -> None:
        self.base.release_pages(file_start, file_stop)

    def in_file_order(self, names: Iterable[str]) -> list[str]:
        return sorted(names, key=lambda n: self.tensors[n].begin)

    def close(self) -> None:
        self.base.close()

    def __enter__(self) -> "RenamedCheckpoint":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
