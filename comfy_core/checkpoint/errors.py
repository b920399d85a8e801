"""Typed errors of checkpoint reading and loading. Each names the file it is about."""
from __future__ import annotations

from pathlib import Path


class CheckpointError(Exception):
    """A checkpoint file could not be read or turned into models. `path` names the file."""

    def __init__(self, path: str | Path, message: str) -> None:
        self.path = Path(path)
        self.detail = message
        super().__init__(f"{self.path}: {message}")


class CheckpointNotFoundError(CheckpointError, FileNotFoundError):
    """The file does not exist."""


class CorruptCheckpointError(CheckpointError):
    """Truncated file, malformed header, tensor extents outside the file, unreadable pickle."""


class UnsupportedFormatError(CheckpointError):
    """Not a .safetensors/.ckpt/.pt/.pth/.bin file."""


class UnsafeCheckpointError(CheckpointError):
    """A pickled checkpoint holds something other than tensors and plain containers
    (refused by `torch.load(weights_only=True)`)."""


class MissingComponentError(CheckpointError):
    """The file lacks a component the caller asked for (UNet, VAE, text encoder)."""


class ShapeMismatchError(CheckpointError):
    """A tensor's shape differs from what the detected architecture needs, or keys are missing
    or unexpected for a component."""
