"""comfy_core/patching/bypass.py: a LoRA record computed beside its layer at forward time equals the
same record merged into the weight (LoraLoader's weight patches); a slice of a fused weight adds to
its output rows only; records that are not additive are left out and named."""
from __future__ import annotations

import torch
from torch import nn

import pytest

from comfy_core.patching import ModelPatcher
from comfy_core.patching.errors import PatchConflictError
from comfy_core.patching.bypass import INJECTION_KEY, add_bypass
from comfy_core.weights.adapters import LoraAdapter


def patcher() -> ModelPatcher:
    torch.manual_seed(0)
    root = nn.Module()
    root.qkv = nn.Linear(4, 12)
    return ModelPatcher(root)


def lora(out: int, seed: int, dora: bool = False) -> LoraAdapter:
    g = torch.Generator().manual_seed(seed)
    return LoraAdapter(torch.randn(out, 2, generator=g), torch.randn(2, 4, generator=g), 1.0, None,
                       torch.rand(out, 1, generator=g) + 0.5 if dora else None, f"t{seed}")


def run(p: ModelPatcher, x: torch.Tensor) -> torch.Tensor:
    with torch.no_grad(), p.applied() as module:
        return module.qkv(x)


def test_a_slice_of_a_fused_weight_bypasses_its_rows_as_merging_it():
    base = patcher()
    record = lora(4, 1)
    target = ("qkv.weight", (0, 4, 4))  # the k third of a fused qkv
    merged = base.clone()
    merged.add_patches({target: record}, 0.8)
    bypass = base.clone()
    assert add_bypass(bypass, {target: record}, 0.8) == (1, [])
    x = torch.randn(3, 4, generator=torch.Generator().manual_seed(2))
    plain, want, got = run(base, x), run(merged, x), run(bypass, x)
    assert torch.allclose(got, want, atol=1e-6)
    assert torch.equal(got[:, :4], plain[:, :4]) and torch.equal(got[:, 8:], plain[:, 8:])
    # independent: x @ (0.8 * alpha / rank * up @ down).T on rows 4..8
    delta = 0.8 * 0.5 * record.up @ record.down
    assert torch.allclose(got[:, 4:8] - plain[:, 4:8], x @ delta.T, atol=1e-6)


def test_non_additive_records_are_left_out_and_named():
    p = patcher().clone()
    count, skipped = add_bypass(p, {"qkv.weight": lora(12, 3, dora=True), "qkv.bias": ("diff", (torch.ones(12),)),
                                    "qkv.missing.weight": lora(12, 4)}, 1.0)
    assert count == 0 and INJECTION_KEY not in p.injections
    assert [s.split(":")[0] for s in skipped] == ["qkv.weight", "qkv.bias", "qkv.missing.weight"]
    assert "DoRA" in skipped[0]


def test_a_clone_of_a_bypassed_model_keeps_it_and_its_parent_gains_nothing():
    base = patcher()
    first = base.clone()
    add_bypass(first, {"qkv.weight": lora(12, 5)}, 1.0)
    second = first.clone()
    add_bypass(second, {"qkv.weight": lora(12, 6)}, 1.0)
    assert len(first.injections[INJECTION_KEY]) == 1 and len(second.injections[INJECTION_KEY]) == 2
    merged = base.clone()
    merged.add_patches({"qkv.weight": lora(12, 5)}, 1.0)
    merged.add_patches({"qkv.weight": lora(12, 6)}, 1.0)
    x = torch.randn(2, 4, generator=torch.Generator().manual_seed(7))
    assert torch.allclose(run(second, x), run(merged, x), atol=1e-5)


def test_the_parent_cannot_run_inside_the_bypassed_clone():
    # the hooks live on the shared base module while the clone is applied: its configuration
    # differs from the parent's, so the parent is never applied (and hooked) at the same time
    base = patcher()
    bypass = base.clone()
    add_bypass(bypass, {"qkv.weight": lora(12, 8)}, 1.0)
    x = torch.randn(2, 4, generator=torch.Generator().manual_seed(9))
    with bypass.applied():
        with pytest.raises(PatchConflictError):
            with base.applied():
                pass
    assert not hasattr(base.model, "_lora_bypass")  # the marker is gone with the run
    assert torch.equal(run(base, x), torch.nn.functional.linear(x, base.model.qkv.weight, base.model.qkv.bias))
