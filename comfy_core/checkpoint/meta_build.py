"""Building modules with no data: on the meta device, with default initialisation skipped.

A loader builds each network on the meta device and then assigns the checkpoint's tensors
(`materialize`), so the constructor's weight initialisation is thrown away. `torch.device("meta")`
alone still runs it: every `nn.Linear` / `nn.Conv2d` / `nn.LayerNorm` calls `reset_parameters()`,
whose `kaiming_uniform_` / `uniform_` / `normal_` on a meta tensor go through torch's Python
decompositions. For an SD1.5 checkpoint that was ~0.5 s of a 2 s load. ComfyUI avoids it with
layer classes whose `reset_parameters` does nothing (`comfy.ops.disable_weight_init`); here the
layers stay torch's own, and one torch-function mode, active only around the constructor, makes
both choices at once: tensors are created on the meta device, and in-place fills of meta tensors
(the whole of `torch.nn.init`) return their input untouched. Nothing global is patched: the mode
lives on this thread's mode stack for the `with` block only.
"""
from __future__ import annotations

from contextlib import contextmanager
from typing import Callable, Iterator, TypeVar

import torch
from torch import nn
from torch.overrides import TorchFunctionMode
from torch.utils._device import _device_constructors

M = TypeVar("M", bound=nn.Module)

# In-place fills that torch.nn.init (and transformers' `_init_weights`) use. On a meta tensor each
# is a shape-preserving no-op, so skipping it changes nothing but the time spent.
_INIT_FILLS = frozenset(getattr(torch.Tensor, name) for name in (
    "uniform_", "normal_", "zero_", "fill_", "copy_", "exponential_", "erfinv_", "mul_", "add_",
    "sub_", "div_", "clamp_", "bernoulli_", "random_", "cauchy_", "log_normal_", "geometric_"))
_FILL_FUNCTIONS = frozenset(getattr(torch, name) for name in ("fill_", "zero_", "clamp_") if hasattr(torch, name))
# torch.nn.init's public functions dispatch to the mode themselves (tensor given by keyword).
_NN_INIT = frozenset(getattr(nn.init, name) for name in dir(nn.init)
                     if name.endswith("_") and not name.startswith("_") and callable(getattr(nn.init, name)))
_SKIPPED = _INIT_FILLS | _FILL_FUNCTIONS | _NN_INIT
# Factories whose point is their values (position ids, frequency tables, windows, literals): no
# checkpoint replaces them, they are small, and on the meta device torch computes their shapes
# with its symbolic-shape machinery, whose first use imports sympy (~1 s, paid by the first load
# of every process). They stay on the device asked for (the CPU by default).
_VALUE_FACTORIES = frozenset(getattr(torch, name) for name in (
    "arange", "range", "linspace", "logspace", "eye", "tensor", "as_tensor", "asarray", "scalar_tensor",
    "tril_indices", "triu_indices", "bartlett_window", "blackman_window", "hamming_window", "hann_window",
    "kaiser_window") if hasattr(torch, name))


class _MetaBuildMode(TorchFunctionMode):
    """Factory calls without a device go to meta; init fills of meta tensors are skipped."""

    def __init__(self) -> None:
        super().__init__()
        self._constructors = _device_constructors() - _VALUE_FACTORIES

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func in _SKIPPED:
            target = args[0] if args else kwargs.get("tensor")
            if isinstance(target, torch.Tensor) and target.is_meta:
                return target
        if func in self._constructors and kwargs.get("device") is None:
            kwargs["device"] = "meta"
        return func(*args, **kwargs)


@contextmanager
def meta_build() -> Iterator[None]:
    """Inside: new tensors default to the meta device and their default initialisation is skipped."""
    with _MetaBuildMode():
        yield


def build_on_meta(factory: Callable[[], M]) -> M:
    """`factory()` built on the meta device: no default initialisation, no memory, until
    `materialize` assigns the checkpoint's tensors."""
    with meta_build():
        return factory()
