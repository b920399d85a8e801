"""Auxiliary (never sampled) models: where they run between and during node calls, and their weights.

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


def load_exact(network: nn.Module, tensors: dict[str, torch.Tensor], *, what: str, error: type[Exception],
               optional: set[str] = frozenset(), dtype: torch.dtype | None = None,
               assign: bool = False) -> nn.Module:
    """`network` with `tensors` as its weights, every one of its state's names and shapes matched
    (`optional` names may be absent: the network's own value stays), cast to `dtype` if given;
    in eval mode without gradients. A file that does not fit raises `error` naming up to five
    missing and unexpected keys, or the first tensor of the wrong shape (`what`: the file and
    model, for the message). `assign`: the tensors become the parameters as they are (a network
    built on the meta device; quantised tensors kept)."""
    expected = network.state_dict()
    missing = sorted(set(expected) - set(tensors) - set(optional))
    unused = sorted(set(tensors) - set(expected))
    if missing or unused:
        raise error(f"{what} weights do not fit: missing {missing[:5]}, unexpected {unused[:5]}")
    for key, value in expected.items():
        if key in tensors and tuple(tensors[key].shape) != tuple(value.shape):
            raise error(f"{what}: {key} has shape {list(tensors[key].shape)}, the model needs {list(value.shape)}")
    loaded = {k: tensors[k] if k in tensors else v for k, v in expected.items()}
    if dtype is not None:
        loaded = {k: v.to(dtype) for k, v in loaded.items()}
    network.load_state_dict(loaded, strict=True, assign=assign)
    if dtype is not None:
        network = network.to(dtype)
    return network.eval().requires_grad_(False)
