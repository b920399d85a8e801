"""The error a model patch raises when the model cannot take it."""
from __future__ import annotations


class ModelPatchError(ValueError):
    """A patch that does not fit the model (no middle self-attention, an unreadable file, ...)."""
