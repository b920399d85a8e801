"""`ModelWeight`: another patcher's weight as lazy patch data (model merging), and the originals a
patcher reports while some clone of its module is applied."""
from __future__ import annotations

import threading

import torch
from torch import nn

from comfy_core.weights.adapters import LoraAdapter
from comfy_core.patching import ModelPatcher, ModelWeight, PatchEntry

KEY = "lin.weight"


class Net(nn.Module):
    def __init__(self, seed: int) -> None:
        super().__init__()
        gen = torch.Generator().manual_seed(seed)
        self.lin = nn.Linear(4, 3)
        with torch.no_grad():
            self.lin.weight.copy_(torch.randn(3, 4, generator=gen))
            self.lin.bias.copy_(torch.randn(3, generator=gen))
        self.other = nn.Linear(2, 2)


def _weight(patcher: ModelPatcher, key: str = KEY) -> torch.Tensor:
    with patcher.applied() as module:
        return module.get_parameter(key).detach().clone()


def test_a_model_weight_is_the_source_weight_with_its_patches_added_like_a_diff():
    a, b = ModelPatcher(Net(0)), ModelPatcher(Net(1))
    lora = LoraAdapter(torch.randn(3, 1), torch.randn(1, 4), alpha=None)
    b.add_patches({KEY: lora}, 0.5)
    merged = a.clone()
    merged.add_patches({KEY: b.weight_references()[KEY]}, 0.25, 0.75)
    w1, w2 = a.model.lin.weight.detach(), b.model.lin.weight.detach()
    w2_patched = w2 + 0.5 * (lora.up @ lora.down)
    torch.testing.assert_close(_weight(merged), 0.75 * w1 + 0.25 * w2_patched)
    # Nothing was copied or changed: the sources still hold their own tensors, unpatched.
    assert a.patches == {} and list(b.patches) == [KEY]
    assert torch.equal(b.model.lin.weight.detach(), w2)


def test_it_holds_no_tensor_and_reads_the_module_where_it_is_now():
    b = ModelPatcher(Net(1))
    ref = b.weight_references()[KEY]
    assert not any(isinstance(getattr(ref, slot), torch.Tensor) for slot in ("module", "key", "entries", "shape"))
    with torch.no_grad():
        replacement = nn.Parameter(torch.full((3, 4), 2.0))
    b.model.lin.weight = replacement  # e.g. the module moved to another device
    torch.testing.assert_close(ref.value(), torch.full((3, 4), 2.0))


def test_the_source_patches_are_a_snapshot_taken_at_merge_time():
    b = ModelPatcher(Net(1))
    ref = b.weight_references()[KEY]
    b.add_patches({KEY: torch.ones(3, 4)})
    torch.testing.assert_close(ref.value(), b.model.lin.weight.detach())


def test_a_merge_with_a_clone_of_the_same_module_reads_the_originals():
    base = ModelPatcher(Net(0))
    with_lora = base.clone()
    delta = torch.randn(3, 4)
    with_lora.add_patches({KEY: delta})
    merged = base.clone()
    merged.add_patches({KEY: with_lora.weight_references()[KEY]}, 0.5, 0.5)
    w = base.model.lin.weight.detach().clone()
    torch.testing.assert_close(_weight(merged), 0.5 * w + 0.5 * (w + delta))
    assert torch.equal(base.model.lin.weight.detach(), w)  # restored


def test_originals_are_reported_while_a_clone_is_applied_in_another_thread():
    base = ModelPatcher(Net(0))
    original = base.model.lin.weight.detach().clone()
    patched = base.clone()
    patched.add_patches({KEY: torch.ones(3, 4)})
    ref = base.weight_references()[KEY]
    inside, release = threading.Event(), threading.Event()

    def hold() -> None:
        with patched.applied():
            inside.set()
            release.wait(10)

    worker = threading.Thread(target=hold)
    worker.start()
    try:
        assert inside.wait(10)
        assert not torch.equal(base.model.lin.weight.detach(), original)  # the module is patched now
        assert torch.equal(base.model_state_dict()[KEY], original)
        assert torch.equal(base.get_key_patches()[KEY][0][0], original)
        assert torch.equal(ref.original(), original)
    finally:
        release.set()
        worker.join()


def test_a_weight_of_another_shape_is_left_unmerged_but_scaled_as_comfyui_does():
    a = ModelPatcher(Net(0))
    ref = ModelWeight(Net(1).other, "weight")  # [2, 2] against [3, 4]
    merged = a.clone()
    merged.add_patches({KEY: ref}, 0.4, 0.6)
    torch.testing.assert_close(_weight(merged), 0.6 * a.model.lin.weight.detach())


def test_zero_strength_does_not_read_the_source():
    class Exploding(nn.Module):
        def get_parameter(self, target: str) -> torch.Tensor:
            raise AssertionError("read")

    ref = ModelWeight(Exploding(), "w", shape=(3, 4))
    weight = torch.ones(3, 4)
    assert ref.apply_to(weight, 0.0, lambda t: t) is weight and torch.equal(weight, torch.ones(3, 4))


def test_cache_signature_is_a_value_identity():
    a, b = ModelPatcher(Net(0)), ModelPatcher(Net(1))
    first = a.clone()
    first.add_patches({KEY: b.weight_references()[KEY]}, 0.5, 0.5)
    again = a.clone()
    again.add_patches({KEY: b.weight_references()[KEY]}, 0.5, 0.5)
    assert first.cache_signature() is not None and first.cache_signature() == again.cache_signature()
    b_lora = b.clone()
    b_lora.add_patches({KEY: torch.ones(3, 4)})
    other = a.clone()
    other.add_patches({KEY: b_lora.weight_references()[KEY]}, 0.5, 0.5)
    assert other.cache_signature() != first.cache_signature()
    assert ModelWeight(b.model, KEY).cache_signature() != ModelWeight(Net(1), KEY).cache_signature()


def test_nested_merges_evaluate_the_whole_chain():
    a, b, c = (ModelPatcher(Net(s)) for s in (0, 1, 2))
    bc = b.clone()
    bc.add_patches({KEY: c.weight_references()[KEY]}, 1.0, 1.0)  # b + c
    abc = a.clone()
    abc.add_patches({KEY: bc.weight_references()[KEY]}, -1.0, 1.0)  # a - (b + c)
    w = [m.model.lin.weight.detach() for m in (a, b, c)]
    torch.testing.assert_close(_weight(abc), w[0] - (w[1] + w[2]))
    assert bc.weight_references()[KEY].entries[0] == PatchEntry(1.0, bc.patches[KEY][0].data, 1.0)
