"""`ModelWeight`: patch data that stands for another model's weight, read when the patch is applied.

Model merging (ComfyUI's comfy_extras/nodes_model_merging.py) adds, for every weight `k` of
model1's clone, the patch `(strength_patch, model2's k, strength_model)`:

    w = strength_model · w1 + strength_patch · w2'          (w2' = model2's k with model2's patches)

ComfyUI hands over model2's weight as a list `[(tensor, convert), *model2's patches]`
(`ModelPatcher.get_key_patches`), which `calculate_weight` evaluates in fp32 and adds like a diff.
`ModelWeight` is the same value as data of its own: it names model2's base module and key instead
of holding a tensor, so a merge copies nothing and keeps no stale tensor alive (a module moved
to another device is read where it is now), and it has a value identity (`cache_signature`):
model2's base module and its patch chain for `k`, so two merges of the same models compare equal.
"""
from __future__ import annotations

from typing import Hashable, Sequence

import torch
from torch import nn

from comfy_core.patching.signature import fingerprint
from comfy_core.patching.state import BaseModuleState
from comfy_core.patching.weight_access import true_weight
from comfy_core.weights.function import Function
from comfy_core.weights.entries import PatchEntry, apply_entries


class ModelWeight:
    """Weight `key` of `module` (a patcher's base module) with that patcher's entries for it applied.

    Used as the data of a weight patch entry: `apply_to(weight, strength, function)` adds
    `function(strength · w2')` to the fp32 working weight, as ComfyUI adds its nested form. A
    weight of another shape is left as it is (ComfyUI logs "WEIGHT NOT MERGED" and goes on; the
    merge functions in `comfy_core.merging` report such keys once, when the merge is made).
    """

    __slots__ = ("module", "key", "entries", "shape", "__weakref__")

    def __init__(self, module: nn.Module, key: str, entries: Sequence[PatchEntry | tuple] = (),
                 shape: tuple[int, ...] | None = None) -> None:
        self.module = module
        self.key = key
        # A snapshot: later add_patches on the source patcher do not change a merge already made.
        self.entries = tuple(PatchEntry(*e) for e in entries)
        self.shape = tuple(shape) if shape is not None else tuple(self.original().shape)

    def original(self) -> torch.Tensor:
        """The source module's own tensor (never a patched one, even while the source is applied)."""
        return BaseModuleState.of(self.module).original_tensor(self.module, self.key)

    def value(self, device: torch.device | str | None = None, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        """w2': the source weight with the source patcher's entries applied, as a new `dtype` tensor."""
        owner_name, _, attr = self.key.rpartition(".")
        owner = self.module.get_submodule(owner_name) if owner_name else self.module
        out = true_weight(owner, attr, self.original(), device, dtype)  # a scaled-fp8 layer's scale applied
        return apply_entries(out, self.entries, self.key)

    def apply_to(self, weight: torch.Tensor, strength: float, function: Function) -> torch.Tensor:
        if strength == 0.0 or tuple(weight.shape) != self.shape:
            # Zero strength: ComfyUI skips the diff (and model2 need not be read); another shape:
            # ComfyUI leaves the weight unmerged (e.g. a 9-channel inpainting input conv).
            return weight
        weight += function(strength * self.value(weight.device, weight.dtype))
        return weight

    def cache_signature(self) -> Hashable | None:
        """The source module's identity, the key and the source's patch chain for it (None when
        that chain holds something without a lasting identity)."""
        entries, stable = fingerprint(self.entries)
        if not stable:
            return None
        return (BaseModuleState.of(self.module).token, self.key, entries)

    def __repr__(self) -> str:
        return f"ModelWeight({type(self.module).__name__}, {self.key!r}, {len(self.entries)} patches)"
