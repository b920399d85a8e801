"""The function a weight patch passes its delta through (ComfyUI's fifth patch-entry field,
comfy/lora.py `calculate_weight`'s `function`), and the default that leaves it unchanged.

A module of its own so that the weight arithmetic (`comfy_core.weights.entries`) and the LoRA
adapters it applies (`comfy_core.weights.adapters`) share it without importing each other: the
adapters test `function is identity` to take their fast path.
"""
from __future__ import annotations

from typing import Callable

import torch

Function = Callable[[torch.Tensor], torch.Tensor]


def identity(x: torch.Tensor) -> torch.Tensor:
    """The default patch function: the delta as it is."""
    return x
