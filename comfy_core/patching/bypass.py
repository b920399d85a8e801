"""LoRA in bypass mode: the adapter is computed at forward time beside the layer, its weights untouched.

Behaviour of today's ComfyUI's LoraLoaderBypass (comfy/sd.py `load_bypass_lora_for_models`, the
nodes in comfy_extras/nodes_lora_debug.py): a patched layer computes `base_forward(x) +
strength * adapter_path(x)` instead of running with `W + strength * delta`. Written here over our
patching system: the bypass is data on the clone (`BypassInjection`, one of the patcher's
`injections`, copied by `clone()`), put on the shared base module only while the clone is applied
(`ModelPatcher.applied()` runs `inject_model()` / `eject_model()`), as forward hooks that are
removed again on eject; an object patch (`OBJECT_KEY`) keeps the clone's configuration distinct,
so the base module is never held for it and another clone at once. The base module's weights are
never written.

The adapter path, per record (`comfy_core.lora.loader.parse_lora`'s adapters):

- LoRA / LoCon without DoRA: `up(mid(down(x))) * alpha / rank`, each factor run as the layer's own
  op (linear, or convolution with the layer's stride / padding / dilation for `down` or `mid`);
- any other additive record (LoHa, LoKr, GLoRA, a full `diff`): its delta `ΔW` built at forward
  time and run as the layer's op, `op(x, ΔW)` (no bias);
- a record that is not additive (DoRA, OFT, BOFT, `set`, a weight reshape) cannot bypass: it is
  left out and named in the report, as its keys are logged.

A target that is a slice of a fused weight (`(param, (0, start, size))`, q/k/v of a fused qkv) adds
to those output features only. Numerically the bypass equals merging the same record into the
weight (up to float rounding), which the tests check.

A LoRA whose `down` is stored flat for a convolution (`[rank, in·kh·kw]`, as ComfyUI's trained
LoRAs save it) runs as that kernel. With `norms_and_biases=True` (the LoRA trainer's forward-time
adapters, comfy_core/training; LoraLoaderBypass keeps the default) full `("diff", (t,))` records
of two more kinds bypass: a bias (`out + t` on the output features) and the 1-D weight of a
GroupNorm / LayerNorm / RMSNorm (`out + norm(x; weight=t)`, the normalised input times `t`,
which is what `W + t` adds). The records' tensors may be trainable parameters: the hooks build
every term from them differentiably, so gradients reach them and never the layer's own weights.
"""
from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field
from typing import Any, Hashable, Mapping

import torch
import torch.nn.functional as F
from torch import nn

from comfy_core.patching.signature import fingerprint
from comfy_core.wrappers import PatcherInjection

log = logging.getLogger(__name__)

INJECTION_KEY = "lora_bypass"
# The clone's bypasses are also an object patch (an attribute set on the base module while applied,
# read by nothing): it makes the clone's configuration differ from its parent's, so the base
# module is never held for both at once (a thread applying one inside the other gets
# PatchConflictError; other threads wait), and the forward hooks can never run for another clone.
OBJECT_KEY = "_lora_bypass"
_CONV = {3: F.conv1d, 4: F.conv2d, 5: F.conv3d}


@dataclass(frozen=True, eq=False)
class BypassEntry:
    """One record bypassing one layer: `module` (dotted path of the layer), the record, its
    strength, and the output features it adds to (`rows`: (start, size) of a fused weight, or None)."""

    module: str
    record: Any
    strength: float
    rows: tuple[int, int] | None = None


def _is_additive(record: Any) -> str | None:
    """None when `record` can bypass, else why not."""
    if isinstance(record, tuple) and len(record) == 2 and record[0] in ("diff", "set"):
        return None if record[0] == "diff" else "a 'set' record replaces the weight"
    if getattr(record, "dora_scale", None) is not None:
        return "a DoRA record renormalises the weight"
    if getattr(record, "reshape", None) is not None:
        return "a record that reshapes the weight"
    if not callable(getattr(record, "delta", None)) or type(record).__name__ in ("OftAdapter", "BoftAdapter"):
        return f"a {type(record).__name__} record is not additive"
    return None


def _target(target: Any) -> tuple[str, tuple[int, int] | None] | None:
    """(parameter name, rows) of a key-map target that bypass supports, else None."""
    if isinstance(target, str):
        return target, None
    if isinstance(target, tuple) and len(target) in (2, 3) and (len(target) == 2 or target[2] is None):
        name, offset = target[0], target[1]
        if offset is None:
            return name, None
        dim, start, size = offset
        if dim == 0:
            return name, (int(start), int(size))
    return None


# torch's normalisation layers (the family test reads `isinstance` targets by name: torch's own
# classes, held in this table, are not a family's of the same name)
_NORMS = tuple((kind, cls) for kind, cls in (("group", nn.GroupNorm), ("layer", nn.LayerNorm),
                                             ("rms", getattr(nn, "RMSNorm", None))) if cls is not None)


def norm_kind(module: nn.Module) -> str | None:
    """"group", "layer" or "rms" for a normalisation layer with a 1-D weight, else None."""
    for kind, cls in _NORMS:
        if isinstance(module, cls):
            return kind
    return None


def _is_diff(record: Any) -> bool:
    return isinstance(record, tuple) and len(record) == 2 and record[0] == "diff"


def bypass_entries(patches: Mapping[Any, Any], strength: float, root: nn.Module, *,
                   norms_and_biases: bool = False) -> tuple[list[BypassEntry], list[str]]:
    """The entries for `patches` (target -> record, as `parse_lora` gives), and "target: why" for
    each record left out (not additive, not a `.weight` of a linear or convolution layer; with
    `norms_and_biases`, a full diff of a bias or of a norm layer's weight bypasses too)."""
    entries: list[BypassEntry] = []
    skipped: list[str] = []
    modules = dict(root.named_modules())
    for target, record in patches.items():
        resolved = _target(target)
        if resolved is None:
            skipped.append(f"{target!r}: a transformed target cannot bypass")
            continue
        name, rows = resolved
        why = _is_additive(record)
        if why is None and norms_and_biases and rows is None and _is_diff(record):
            extra = _norm_or_bias_entry(name, record, strength, modules)
            if extra is not None:
                entries.append(extra)
                continue
        if why is None and not name.endswith(".weight"):
            why = "not a layer weight (a bias or other tensor)"
        module = modules.get(name[: -len(".weight")]) if why is None else None
        if why is None and (module is None or getattr(module, "weight", None) is None
                            or module.weight.dim() not in (2, 3, 4, 5)):
            why = "not the weight of a linear or convolution layer"
        if why is not None:
            skipped.append(f"{name}: {why}")
            continue
        entries.append(BypassEntry(name[: -len(".weight")], record, float(strength), rows))
    return entries, skipped


def _norm_or_bias_entry(name: str, record: Any, strength: float,
                        modules: Mapping[str, nn.Module]) -> BypassEntry | None:
    """The entry of a full diff on a layer's bias, or on a norm layer's 1-D weight; None otherwise
    (the caller then judges it as any other record)."""
    owner, _, attr = name.rpartition(".")
    module = modules.get(owner)
    if module is None:
        return None
    if attr == "bias" and getattr(module, "bias", None) is not None and (
            norm_kind(module) is not None or getattr(module, "weight", None) is not None
            and module.weight.dim() in (2, 3, 4, 5)):
        return BypassEntry(owner, ("diff_b", record[1]), float(strength))
    if attr == "weight" and norm_kind(module) is not None and getattr(module, "weight", None) is not None:
        return BypassEntry(owner, ("diff_norm", record[1]), float(strength))
    return None


def _op(module: nn.Module, weight_dim: int):
    """The layer's op `(x, w, geometry) -> y` without bias: linear, or its convolution."""
    if weight_dim == 2:
        return lambda x, w, full: F.linear(x, w)
    conv = _CONV[weight_dim]
    stride, padding, dilation = (getattr(module, a, 1) for a in ("stride", "padding", "dilation"))
    groups = getattr(module, "groups", 1)

    def run(x, w, full):
        # `full`: the kernel carries the layer's geometry; a 1x1 factor runs plainly (stride 1)
        if full:
            return conv(x, w, None, stride, padding, dilation, groups)
        return conv(x, w)
    return run


def _norm_path(module: nn.Module, x: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """`norm(x)` with weight `scale` and no bias: what adding `scale` to the norm's weight adds."""
    kind = norm_kind(module)
    if kind == "group":
        return F.group_norm(x, module.num_groups, scale, None, module.eps)
    shape = tuple(module.normalized_shape)
    if kind == "layer":
        return F.layer_norm(x, shape, scale, None, module.eps)
    return F.rms_norm(x, shape, scale, module.eps)


def _bias_path(module: nn.Module, out: torch.Tensor, diff: torch.Tensor) -> torch.Tensor:
    """A bias diff broadcast over the output: the channel axis of a convolution or GroupNorm
    (axis 1), the last axis of a linear or LayerNorm-like layer."""
    if norm_kind(module) == "group" or (getattr(module, "weight", None) is not None and module.weight.dim() > 2
                                         and norm_kind(module) is None):
        return diff.reshape(1, -1, *([1] * (out.dim() - 2)))
    return diff


def _path(entry: BypassEntry, module: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """`strength * adapter_path(x)` for one entry, in x's dtype and device."""
    record = entry.record
    if isinstance(record, tuple) and record[0] == "diff_norm":
        return _norm_path(module, x, record[1][0].to(device=x.device, dtype=x.dtype)) * entry.strength
    weight = module.weight
    dim = weight.dim()
    op = _op(module, dim)
    cast = lambda t: t.to(device=x.device, dtype=x.dtype)  # noqa: E731
    up, down = getattr(record, "up", None), getattr(record, "down", None)
    if up is not None and down is not None:  # LoRA / LoCon: the low-rank path itself
        rank = down.shape[0]
        scale = (record.alpha / rank) if record.alpha is not None else 1.0
        mid = getattr(record, "mid", None)
        if dim == 2:
            h = F.linear(F.linear(x, cast(down.flatten(start_dim=1))), cast(up.flatten(start_dim=1)))
        else:
            if mid is None and down.dim() == 2 and dim > 2 and down.shape[1] == math.prod(weight.shape[1:]):
                # ComfyUI's trained LoRAs keep a convolution's `down` flat: [rank, in·kh·kw]
                down = down.reshape(down.shape[0], *weight.shape[1:])
            down_w = cast(down if down.dim() == dim else down.reshape(down.shape[0], -1, *([1] * (dim - 2))))
            if mid is None:
                h = op(x, down_w, True)  # down holds the layer's kernel (LoCon)
            else:
                h = op(op(x, down_w, False), cast(mid), True)
            up_w = cast(up if up.dim() == dim else up.reshape(up.shape[0], -1, *([1] * (dim - 2))))
            h = op(h, up_w, False)
        return h * (scale * entry.strength)
    template = torch.zeros(weight.shape if entry.rows is None else (entry.rows[1], *weight.shape[1:]),
                           device=x.device, dtype=x.dtype)
    if isinstance(record, tuple):  # ("diff", (tensor,))
        delta = cast(record[1][0]).reshape(template.shape)
    else:
        delta = record.delta(template)
    return op(x, delta, True) * entry.strength


def _hook(entries: list[BypassEntry]):
    def hook(module: nn.Module, args: tuple, output: torch.Tensor) -> torch.Tensor:
        x = args[0]
        out = output
        for entry in entries:
            if isinstance(entry.record, tuple) and entry.record[0] == "diff_b":
                diff = entry.record[1][0].to(device=out.device, dtype=out.dtype)
                out = out + _bias_path(module, out, diff) * entry.strength
                continue
            extra = _path(entry, module, x)
            if entry.rows is None:
                out = out + extra
            else:
                start, size = entry.rows
                out = out.clone() if out is output else out
                out.narrow(1 if module.weight.dim() > 2 else -1, start, size).add_(extra)
        return out
    return hook


@dataclass(eq=False)
class BypassInjection(PatcherInjection):
    """The bypass entries of one clone, put on its base module while it runs (forward hooks).

    `cache_signature()` names the records (their files), strengths and layers, so a clone with the
    same bypass LoRA keys cached outputs alike, and one with another or none differently."""

    entries: list[BypassEntry] = field(default_factory=list)
    _handles: dict[int, list[Any]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        PatcherInjection.__init__(self, self._inject, self._eject)

    def _inject(self, patcher: Any) -> None:
        by_module: dict[str, list[BypassEntry]] = {}
        for entry in self.entries:
            by_module.setdefault(entry.module, []).append(entry)
        root = patcher.model
        handles = [root.get_submodule(name).register_forward_hook(_hook(group)) for name, group in by_module.items()]
        self._handles.setdefault(id(patcher), []).extend(handles)

    def _eject(self, patcher: Any) -> None:
        for handle in self._handles.pop(id(patcher), []):
            handle.remove()

    def cache_signature(self) -> Hashable | None:
        key, stable = fingerprint([(e.module, e.record, e.strength, e.rows) for e in self.entries])
        return ("lora-bypass", key) if stable else None


def add_bypass(patcher: Any, patches: Mapping[Any, Any], strength: float, *,
               norms_and_biases: bool = False) -> tuple[int, list[str]]:
    """Add `patches` (target -> record) to the clone `patcher` as a bypass at `strength`: one more
    `BypassInjection` under `INJECTION_KEY` (earlier bypasses kept, so bypass LoRAs chain).
    Returns (layers bypassed, records left out as "target: why"). `norms_and_biases`: see
    `bypass_entries`."""
    entries, skipped = bypass_entries(patches, strength, patcher.model, norms_and_biases=norms_and_biases)
    if entries:
        existing = list(patcher.injections.get(INJECTION_KEY, ()))
        patcher.injections[INJECTION_KEY] = existing + [BypassInjection(entries)]
        patcher.add_object_patch(OBJECT_KEY, tuple(patcher.injections[INJECTION_KEY]))
    for line in skipped:
        log.warning("LoRA bypass: %s; not applied", line)
    return len(entries), skipped
