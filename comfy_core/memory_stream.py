"""Partial loading: some modules of a model on the compute device, the rest streamed per forward.

After ComfyUI's lowvram loading (comfy/model_patcher.py `load`, comfy/ops.py `cast_bias_weight`),
written here without replacing any torch function or layer class: while a patcher is applied,
each streamed leaf module carries a forward pre-hook that copies its own parameters and buffers
(whatever tensors the module holds then: the patched ones when LoRA patches are applied) to the
compute device and a forward hook (`always_call`, so it runs after an exception too) that puts
the host tensors back, dropping the device copies. The hooks are removed when the patcher's
application ends. Host tensors of streamed modules are pinned once where CUDA is available, so
copies are asynchronous (`non_blocking=True`) and overlap the previous layer's kernels.

`module_costs(model)` gives the pure planner (`comfy_core.memory_plan.plan_partial_load`) its
input; `place(model, plan, device, offload_device)` moves whole modules by the plan;
`WeightStreamer` installs and removes the hooks.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Iterable

import torch
from torch import nn

from comfy_core.memory_plan import LoadPlan, ModuleCost

# Layers whose tensors are read only inside their own forward (ComfyUI's `comfy.ops` classes):
# the ones that can be streamed. Other modules holding tensors stay resident. A module may opt in
# with a true `comfy_cast_weights` attribute (ComfyUI's marker), or out with `comfy_no_stream`.
STREAMABLE_TYPES: tuple[type, ...] = tuple(t for t in (
    nn.Linear, nn.Conv1d, nn.Conv2d, nn.Conv3d, nn.ConvTranspose1d, nn.ConvTranspose2d, nn.ConvTranspose3d,
    nn.GroupNorm, nn.LayerNorm, nn.Embedding, getattr(nn, "RMSNorm", None)) if t is not None)


def own_tensors(module: nn.Module) -> list[tuple[str, torch.Tensor]]:
    """The module's own parameters and buffers (not its children's), by attribute name."""
    found = [(n, t) for n, t in module._parameters.items() if t is not None]
    found += [(n, t) for n, t in module._buffers.items() if t is not None]
    return found


def is_streamable(module: nn.Module) -> bool:
    if getattr(module, "comfy_no_stream", False):
        return False
    return isinstance(module, STREAMABLE_TYPES) or bool(getattr(module, "comfy_cast_weights", False))


def module_costs(model: nn.Module) -> list[ModuleCost]:
    """One `ModuleCost` per module holding tensors of its own, in module order.

    The module holding the model's first parameter is never streamed: code outside the modules
    reads `next(model.parameters()).device` to decide where inputs go."""
    first = next(iter(model.parameters()), None)
    costs = []
    for name, module in model.named_modules():
        tensors = own_tensors(module)
        if not tensors:
            continue
        nbytes = sum(t.numel() * t.element_size() for _, t in tensors)
        holds_first = first is not None and any(t is first for _, t in tensors)
        costs.append(ModuleCost(name, nbytes, is_streamable(module) and not holds_first))
    return costs


def _move_own(module: nn.Module, device: torch.device, pin: bool = False) -> None:
    """Move the module's own tensors (not its children's) to `device`, in place (`.data`), so
    patchers and optimisers keep the same tensor objects, as `nn.Module.to` does."""
    for store in (module._parameters, module._buffers):
        for name, t in store.items():
            if t is None:
                continue
            if t.device != device:
                t.data = t.data.to(device)
            if pin and device.type == "cpu" and not t.is_pinned():
                t.data = t.data.pin_memory()


def place(model: nn.Module, plan: LoadPlan, device: torch.device, offload_device: torch.device, *,
          pin: bool = False) -> None:
    """Put the plan's resident modules on `device` and its streamed ones on `offload_device`
    (pinned there when `pin`: asynchronous host-to-device copies)."""
    modules = dict(model.named_modules())
    streamed = set(plan.streamed)
    for name in plan.resident:
        _move_own(modules[name], device)
    for name in streamed:
        _move_own(modules[name], offload_device, pin=pin)


@dataclass
class StreamStats:
    """Counters for tests and benchmarks: how much streaming happened."""

    forwards: int = 0  # streamed module calls
    tensors_copied: int = 0
    bytes_copied: int = 0


def _to_device(value: Any, device: torch.device) -> Any:
    if isinstance(value, torch.Tensor):
        return value if value.device == device else value.to(device)
    if isinstance(value, (list, tuple)) and any(isinstance(v, torch.Tensor) for v in value):
        return type(value)(_to_device(v, device) for v in value)
    return value


class WeightStreamer:
    """Forward hooks that stream the own tensors of `modules` to `device` for each call.

    `copy(tensor, device)` makes the device copy (default: `tensor.to(device, non_blocking=...)`);
    tests pass one that counts. Inputs on another device are moved to `device` too, so a streamed
    first layer of a text encoder (its token embedding) gets its ids where its weights are."""

    def __init__(self, modules: Iterable[nn.Module], device: torch.device | str, *, non_blocking: bool = False,
                 copy: Callable[[torch.Tensor, torch.device], torch.Tensor] | None = None) -> None:
        self.modules = list(modules)
        self.device = torch.device(device)
        self.non_blocking = non_blocking
        self._copy = copy or self._default_copy
        self.stats = StreamStats()
        self._handles: list[Any] = []
        self._saved: dict[int, list[list[tuple[dict, str, torch.Tensor]]]] = {}  # per module: a stack

    def _default_copy(self, tensor: torch.Tensor, device: torch.device) -> torch.Tensor:
        return tensor.to(device, non_blocking=self.non_blocking)

    @property
    def installed(self) -> bool:
        return bool(self._handles)

    def install(self) -> "WeightStreamer":
        if self._handles:
            return self
        for module in self.modules:
            self._handles.append(module.register_forward_pre_hook(self._before, with_kwargs=True))
            self._handles.append(module.register_forward_hook(self._after, always_call=True))
        return self

    def remove(self) -> None:
        """Remove the hooks; any call still holding device copies gets its host tensors back."""
        for handle in self._handles:
            handle.remove()
        self._handles.clear()
        for module in self.modules:
            while self._saved.get(id(module)):
                self._restore(module)
        self._saved.clear()

    def _before(self, module: nn.Module, args: tuple, kwargs: dict) -> tuple[tuple, dict]:
        swapped: list[tuple[dict, str, torch.Tensor]] = []
        self._saved.setdefault(id(module), []).append(swapped)
        try:
            for store in (module._parameters, module._buffers):
                for name, host in list(store.items()):
                    if host is None or host.device == self.device:
                        continue
                    on_device = self._copy(host.detach(), self.device)
                    if isinstance(host, nn.Parameter):
                        on_device = nn.Parameter(on_device, requires_grad=False)
                    swapped.append((store, name, host))
                    store[name] = on_device
                    self.stats.tensors_copied += 1
                    self.stats.bytes_copied += host.numel() * host.element_size()
        except BaseException:
            self._restore(module)
            raise
        self.stats.forwards += 1
        return tuple(_to_device(a, self.device) for a in args), {k: _to_device(v, self.device)
                                                                  for k, v in kwargs.items()}

    def _after(self, module: nn.Module, _args: tuple, _output: Any) -> None:
        self._restore(module)

    def _restore(self, module: nn.Module) -> None:
        stack = self._saved.get(id(module))
        if not stack:
            return
        for store, name, host in reversed(stack.pop()):
            store[name] = host
