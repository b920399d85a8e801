"""The nested LATENT: several latents sampled together as one (LTX-2's `[video, audio]`).

After ComfyUI's `comfy/nested_tensor.py` (`NestedTensor`, `cat_nested`) and the packing helpers of
`comfy/utils.py` (`pack_latents`, `unpack_latents`); written here.

- `NestedTensor(tensors)`: an ordered list of tensors (`.tensors`) with `is_nested = True` (a
  plain `torch.Tensor` answers `is_nested` False, so code asks `latent.is_nested` either way).
  Arithmetic (`+ - * /`, indexing, `chunk`, `to`, `float`, `cpu`) applies part by part (the
  other operand's matching part when it is nested too); `shape`, `size()`, `dtype`, `device`,
  `layout` are the first part's, `ndim` the largest, as ComfyUI's class answers them.
- `pack_latents(parts)`: every part `[B, ...]` flattened to `[B, 1, n_i]` and concatenated to
  `[B, 1, sum n_i]`, with the parts' shapes; `unpack_latents(packed, shapes)` the inverse. The
  samplers run on the packed tensor; the model unpacks it with the shapes it is given
  (`latent_shapes`).
"""
from __future__ import annotations

import math
from typing import Any, Callable, Iterable, Sequence

import torch


class NestedLatentError(ValueError):
    """A nested latent that cannot be built, combined or unpacked as asked."""


class NestedTensor:
    """An ordered group of tensors handled as one latent (ComfyUI's `comfy.nested_tensor.NestedTensor`)."""

    is_nested = True

    def __init__(self, tensors: Iterable[torch.Tensor]) -> None:
        parts = list(tensors)
        if not parts:
            raise NestedLatentError("NestedTensor: needs at least one tensor")
        for index, part in enumerate(parts):
            if not isinstance(part, torch.Tensor):
                raise NestedLatentError(f"NestedTensor: part {index} is {type(part).__name__}, not a tensor")
        self.tensors: list[torch.Tensor] = parts

    def __repr__(self) -> str:
        return f"NestedTensor({[tuple(t.shape) for t in self.tensors]}, dtype={self.dtype})"

    def _copy(self) -> "NestedTensor":
        return NestedTensor(self.tensors)

    def apply_operation(self, other: Any, operation: Callable[[torch.Tensor, Any], Any]) -> "NestedTensor":
        """`operation(part, other)` per part, or `operation(part, other's part)` when `other` is nested."""
        if isinstance(other, NestedTensor):
            if len(other.tensors) != len(self.tensors):
                raise NestedLatentError(f"NestedTensor: {len(self.tensors)} parts combined with {len(other.tensors)}")
            return NestedTensor(operation(a, b) for a, b in zip(self.tensors, other.tensors))
        return NestedTensor(operation(a, other) for a in self.tensors)

    def __add__(self, other: Any) -> "NestedTensor":
        return self.apply_operation(other, lambda a, b: a + b)

    def __sub__(self, other: Any) -> "NestedTensor":
        return self.apply_operation(other, lambda a, b: a - b)

    def __mul__(self, other: Any) -> "NestedTensor":
        return self.apply_operation(other, lambda a, b: a * b)

    def __truediv__(self, other: Any) -> "NestedTensor":
        return self.apply_operation(other, lambda a, b: a / b)

    def __getitem__(self, index: Any) -> "NestedTensor":
        """The same index taken from every part (`latent[:1]`: the first batch row of each)."""
        return NestedTensor(t[index] for t in self.tensors)

    def unbind(self) -> list[torch.Tensor]:
        """The parts, in order (the tensors themselves, not copies)."""
        return list(self.tensors)

    def to(self, *args: Any, **kwargs: Any) -> "NestedTensor":
        return NestedTensor(t.to(*args, **kwargs) for t in self.tensors)

    def float(self) -> "NestedTensor":
        return self.to(dtype=torch.float)

    def cpu(self) -> "NestedTensor":
        return self.to("cpu")

    def new_ones(self, *args: Any, **kwargs: Any) -> torch.Tensor:
        return self.tensors[0].new_ones(*args, **kwargs)

    def chunk(self, chunks: int, dim: int = 0) -> tuple["NestedTensor", ...]:
        """Each part chunked alike; chunk i is a NestedTensor of every part's chunk i (ComfyUI's
        `output.chunk(n)[i]` on a nested model output)."""
        pieces = [t.chunk(chunks, dim) for t in self.tensors]
        count = len(pieces[0])
        if any(len(p) != count for p in pieces):
            raise NestedLatentError(f"NestedTensor.chunk({chunks}): the parts split into different counts")
        return tuple(NestedTensor(p[i] for p in pieces) for i in range(count))

    def size(self) -> torch.Size:
        return self.tensors[0].size()

    @property
    def shape(self) -> torch.Size:
        return self.tensors[0].shape

    @property
    def ndim(self) -> int:
        return max(t.ndim for t in self.tensors)

    @property
    def device(self) -> torch.device:
        return self.tensors[0].device

    @property
    def dtype(self) -> torch.dtype:
        return self.tensors[0].dtype

    @property
    def layout(self) -> torch.layout:
        return self.tensors[0].layout


def is_nested(value: Any) -> bool:
    """Whether `value` is a nested latent (ComfyUI's test: `latent.is_nested`, false for tensors)."""
    return getattr(value, "is_nested", False) is True and callable(getattr(value, "unbind", None))


def cat_nested(nested: Sequence[NestedTensor], *args: Any, **kwargs: Any) -> NestedTensor:
    """`torch.cat` part by part: part i of the result joins part i of every input."""
    if not nested:
        raise NestedLatentError("cat_nested: nothing to concatenate")
    count = len(nested[0].tensors)
    if any(len(n.tensors) != count for n in nested):
        raise NestedLatentError("cat_nested: the nested tensors have different part counts")
    return NestedTensor(torch.cat([n.tensors[i] for n in nested], *args, **kwargs) for i in range(count))


def pack_latents(parts: Sequence[torch.Tensor]) -> tuple[torch.Tensor, list[list[int]]]:
    """`[B, ...]` parts -> `[B, 1, sum of their per-row sizes]` and their shapes (ComfyUI's
    `comfy.utils.pack_latents`)."""
    if not parts:
        raise NestedLatentError("pack_latents: nothing to pack")
    batch = parts[0].shape[0]
    if any(p.shape[0] != batch for p in parts):
        raise NestedLatentError(f"pack_latents: parts of different batch sizes {[tuple(p.shape) for p in parts]}")
    shapes = [list(p.shape) for p in parts]
    return torch.cat([p.reshape(batch, 1, -1) for p in parts], dim=-1), shapes


def unpack_latents(packed: torch.Tensor, shapes: Sequence[Sequence[int]]) -> list[torch.Tensor]:
    """The inverse of `pack_latents`: `[B, 1, N]` -> one tensor per shape, each `[B, *shape[1:]]`
    (the batch is the packed tensor's, so a CFG batch of two unpacks with the run's shapes)."""
    if len(shapes) == 1 and list(packed.shape[1:]) == list(shapes[0][1:]):
        return [packed]  # one latent that was never packed (ComfyUI returns a single part as it is)
    sizes = [int(math.prod(shape[1:])) for shape in shapes]
    if packed.ndim != 3 or packed.shape[1] != 1 or packed.shape[-1] != sum(sizes):
        raise NestedLatentError(f"unpack_latents: a packed latent {tuple(packed.shape)} does not hold the shapes "
                                f"{[list(s) for s in shapes]}")
    return [chunk.reshape(packed.shape[0], *shape[1:]) for chunk, shape in zip(packed.split(sizes, dim=-1), shapes)]
