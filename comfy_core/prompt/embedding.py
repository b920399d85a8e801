"""Textual-inversion embeddings: one loaded embedding, and reading it from the file formats in use.

Formats, recognised in AUTOMATIC1111's order (webui 1.10
`modules/textual_inversion/textual_inversion.py::create_embedding_from_data`, written here from
`shared/reference/a1111-prompt.md` section 4.1):

1. webui / original textual-inversion `.pt`: `{"string_to_param": {"*": tensor [V, C]}, ...}`
   with exactly one entry (`step`, `sd_checkpoint`, `sd_checkpoint_name` kept as metadata);
2. SDXL: `{"clip_l": [V, 768], "clip_g": [V, 1280]}`;
3. a dict with exactly one tensor: diffusers' `learned_embeds.bin` (`{"<token>": [C]}`) or
   kohya's `.safetensors` (`{"emb_params": [V, C]}`).

Textual inversion: Gal et al. 2022, "An Image is Worth One Word: Personalizing Text-to-Image
Generation using Textual Inversion".
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

import torch

from comfy_core.prompt.embedding_names import EMBEDDING_EXTENSIONS  # torch-free, for the node layer
from comfy_core.prompt.errors import EmbeddingError, EmbeddingWidthError

SDXL_KEYS = ("clip_l", "clip_g")


@dataclass(frozen=True, eq=False)
class Embedding:
    """A named set of V token vectors: a `[V, C]` float32 tensor, or per-encoder tensors for SDXL.

    Compared by identity (two loads of one file are two embeddings); `key` identifies the content
    for cache signatures.
    """

    name: str
    vectors: torch.Tensor | Mapping[str, torch.Tensor]
    source: str = ""  # the file it came from, for messages
    step: int | None = None
    checkpoint: str | None = None
    extra: Mapping[str, Any] = field(default_factory=dict)

    @property
    def vector_count(self) -> int:
        if isinstance(self.vectors, torch.Tensor):
            return int(self.vectors.shape[0])
        return int(self.vectors["clip_g"].shape[0])

    @property
    def widths(self) -> dict[str, int]:
        """Width per encoder key (`{"": C}` for a single-tensor embedding)."""
        if isinstance(self.vectors, torch.Tensor):
            return {"": int(self.vectors.shape[1])}
        return {k: int(v.shape[1]) for k, v in self.vectors.items()}

    def vectors_for(self, encoder_key: str, width: int) -> torch.Tensor:
        """The `[V, width]` vectors for one text encoder (`encoder_key` is "clip_l", "clip_g", ...).

        A single-tensor embedding serves any encoder of its width; an SDXL embedding serves
        the encoder named by its key. Anything else is an `EmbeddingWidthError` naming both widths.
        """
        if isinstance(self.vectors, torch.Tensor):
            found = self.vectors
        elif encoder_key in self.vectors:
            found = self.vectors[encoder_key]
        else:
            raise EmbeddingWidthError(
                f"embedding {self.name!r} ({self.source or 'in memory'}) has vectors for "
                f"{sorted(self.vectors)}, not for text encoder {encoder_key!r} (width {width})")
        if found.shape[1] != width:
            raise EmbeddingWidthError(
                f"embedding {self.name!r} ({self.source or 'in memory'}) has width {found.shape[1]}, "
                f"but text encoder {encoder_key or 'clip'!r} expects width {width}")
        return found

    def signature(self) -> tuple:
        """Hashable identity of the content (for patch signatures and cache keys)."""
        if isinstance(self.vectors, torch.Tensor):
            parts = (("", tuple(self.vectors.shape), _digest(self.vectors)),)
        else:
            parts = tuple((k, tuple(v.shape), _digest(v)) for k, v in sorted(self.vectors.items()))
        return (self.name, parts)


def _digest(tensor: torch.Tensor) -> int:
    # Content hash over the raw bytes; embeddings are a few KB, so this is cheap.
    return hash(tensor.detach().contiguous().cpu().numpy().tobytes())


def embedding_from_data(data: Any, name: str, source: str = "") -> Embedding:
    """Recognise one of the formats above in a loaded object (see the module docstring)."""
    where = source or name
    if not isinstance(data, Mapping):
        raise EmbeddingError(f"embedding file {where!r}: expected a dict of tensors, got {type(data).__name__}")
    if "string_to_param" in data:
        params = data["string_to_param"]
        if hasattr(params, "_parameters"):  # very old files pickled a ParameterDict
            params = params._parameters
        if not isinstance(params, Mapping) or len(params) != 1:
            count = len(params) if isinstance(params, Mapping) else type(params).__name__
            raise EmbeddingError(f"embedding file {where!r}: string_to_param must hold exactly one "
                                 f"tensor, it holds {count}")
        vectors = _as_matrix(next(iter(params.values())), where)
        step = data.get("step")
        return Embedding(name, vectors, source, step=int(step) if step is not None else None,
                         checkpoint=data.get("sd_checkpoint_name") or data.get("sd_checkpoint"))
    if all(key in data for key in SDXL_KEYS):
        vectors = {key: _as_matrix(data[key], where) for key in SDXL_KEYS}
        if vectors["clip_l"].shape[0] != vectors["clip_g"].shape[0]:
            raise EmbeddingError(f"embedding file {where!r}: clip_l has {vectors['clip_l'].shape[0]} "
                                 f"vectors but clip_g has {vectors['clip_g'].shape[0]}")
        return Embedding(name, vectors, source)
    if data and isinstance(next(iter(data.values())), torch.Tensor):
        if len(data) != 1:
            raise EmbeddingError(f"embedding file {where!r}: a tensor dict must hold exactly one tensor, "
                                 f"it holds {sorted(map(str, data))}")
        return Embedding(name, _as_matrix(next(iter(data.values())), where), source)
    raise EmbeddingError(f"embedding file {where!r} is neither a textual inversion embedding nor a "
                         f"diffusers concept (keys: {sorted(map(str, data))[:8]})")


def _as_matrix(value: Any, where: str) -> torch.Tensor:
    if not isinstance(value, torch.Tensor):
        raise EmbeddingError(f"embedding file {where!r}: expected a tensor, got {type(value).__name__}")
    value = value.detach().to(torch.float32)
    if value.ndim == 1:  # diffusers stores one vector as [C]
        value = value.unsqueeze(0)
    if value.ndim != 2 or value.shape[0] == 0:
        raise EmbeddingError(f"embedding file {where!r}: expected a [vectors, width] tensor, "
                             f"got shape {tuple(value.shape)}")
    return value


def load_embedding(path: str | os.PathLike, name: str | None = None) -> Embedding:
    """Read an embedding file; its name is the file stem unless `name` is given.

    `.pt` and `.bin` are read with `torch.load(weights_only=True)`: a file that needs arbitrary
    unpickling is refused rather than executed. Image embeddings (`.png`/`.webp`) are not read.
    """
    path = Path(path)
    suffix = path.suffix.lower()
    label = str(path)
    if suffix not in EMBEDDING_EXTENSIONS:
        raise EmbeddingError(f"embedding file {label!r}: unsupported extension {suffix!r}; "
                             f"expected one of {', '.join(EMBEDDING_EXTENSIONS)}")
    if not path.is_file():
        raise EmbeddingError(f"embedding file {label!r} does not exist")
    try:
        if suffix == ".safetensors":
            # not safetensors' load_file: it leaks a little per tensor on every call (load_tensor_file)
            from comfy_core.checkpoint.reader import load_tensor_file
            data = load_tensor_file(path)[0]
        else:
            data = torch.load(str(path), map_location="cpu", weights_only=True)
    except EmbeddingError:
        raise
    except Exception as exc:  # corrupt file, unsafe pickle, wrong format: all one message
        raise EmbeddingError(f"embedding file {label!r} could not be read: {exc}") from exc
    return embedding_from_data(data, name or path.stem, label)
