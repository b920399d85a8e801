"""Where an auxiliary (never sampled) model runs between and during its node calls.

MoGe, Depth Anything 3 and the like are not handed to the memory manager: a node moves the
network to its load device for the length of a block of calls (`loaded()`, nestable: one move for
several `infer` calls) and back to the offload device after it, error or not.
"""
from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator, TypeVar

import torch
from torch import nn

Self = TypeVar("Self", bound="ResidentModel")


class ResidentModel:
    """A network (`model`) with a `load_device` it runs on and an `offload_device` it waits on."""

    def __init__(self, network: nn.Module, *, load_device: torch.device | str = "cpu",
                 offload_device: torch.device | str = "cpu") -> None:
        self.model = network
        self.load_device = torch.device(load_device)
        self.offload_device = torch.device(offload_device)
        self._depth = 0  # nesting of `loaded()`

    @contextmanager
    def loaded(self: Self) -> Iterator[Self]:
        """The network on the load device for the block, back on the offload device after it."""
        if self._depth == 0:
            self.model.to(self.load_device)
        self._depth += 1
        try:
            yield self
        finally:
            self._depth -= 1
            if self._depth == 0 and self.offload_device != self.load_device:
                self.model.to(self.offload_device)
