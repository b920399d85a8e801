"""Network classes of model families this engine does not implement, for packs that import them.

A pack such as RES4LYF imports (and subclasses) the classes of every family ComfyUI ships, at
import time, for the few nodes that use each. Where the family is not built here, those names
are still importable and subclassable, so the pack loads and its other nodes work; building one
raises `UnsupportedNetworkError` naming the family, which is what such a node then reports (no
file of that family is ever loaded here, so no such network is ever handed to a pack).
"""
from __future__ import annotations

from typing import Any

from torch import nn


class UnsupportedNetworkError(NotImplementedError):
    """A network class of a model family this engine does not implement was built."""


class UnsupportedNetwork(nn.Module):
    """Base of the stand-ins (see the module docstring); `family` names the missing family."""

    family = "?"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        raise UnsupportedNetworkError(f"{type(self).__name__}: the {self.family} model family is not implemented "
                                      "by this engine (its models cannot be loaded here)")

