"""Typed errors of family detection. They name the file, so they are `CheckpointError`s."""
from __future__ import annotations

from comfy_core.checkpoint.errors import CheckpointError


class UnknownFamilyError(CheckpointError):
    """No registered model family matches the file's tensor names and shapes."""


class AmbiguousFamilyError(CheckpointError):
    """More than one registered family matches the file."""
