"""The generic patcher: cheap clones, weight/object patches as data, bit-exact restoration,
no work on a repeated patch set, per-clone attention backends, concurrency rules."""
from __future__ import annotations

import hashlib
import threading

import pytest
import torch
from torch import nn

from comfy_core.attention import attention, current_backend
from comfy_core.patching import (
    ModelPatcher,
    ObjectPatchError,
    PatchConflictError,
    PatchDataError,
)
from graph.context import Interrupted


class Block(nn.Module):
    def __init__(self, dim: int = 8, heads: int = 2) -> None:
        super().__init__()
        self.heads = heads
        self.to_q = nn.Linear(dim, dim, bias=False)
        self.to_k = nn.Linear(dim, dim, bias=False)
        self.to_v = nn.Linear(dim, dim, bias=False)
        self.to_out = nn.Linear(dim, dim)
        self.register_buffer("gain", torch.ones(dim))
        self.seen_backends: list[str] = []

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # x: [B, N, dim]
        self.seen_backends.append(current_backend().name)
        h = attention(self.to_q(x), self.to_k(x), self.to_v(x), self.heads)
        return x + self.to_out(h) * self.gain


class TinyUNet(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.input_blocks = nn.ModuleList([Block(), Block()])
        self.out = nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.input_blocks:
            x = block(x)
        return self.out(x)


class TinyDiffusion(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.diffusion_model = TinyUNet()
        self.model_sampling = "eps"

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.diffusion_model(x)


def tensor_hashes(module: nn.Module) -> dict[str, tuple[int, str]]:
    """Identity and content hash of every parameter and buffer."""
    out = {}
    for name, t in list(module.named_parameters()) + list(module.named_buffers()):
        out[name] = (id(t), hashlib.sha256(t.detach().contiguous().numpy().tobytes()).hexdigest())
    return out


Q = "diffusion_model.input_blocks.0.to_q.weight"
OUT = "diffusion_model.out.weight"


@pytest.fixture
def patcher() -> ModelPatcher:
    return ModelPatcher(TinyDiffusion())


@pytest.fixture
def x() -> torch.Tensor:
    return torch.randn(2, 5, 8, generator=torch.Generator().manual_seed(1))


def test_clone_shares_module_and_copies_containers(patcher):
    patcher.add_patches({Q: torch.ones(8, 8)})
    patcher.model_options["transformer_options"]["x"] = [1]
    clone = patcher.clone()
    assert clone.model is patcher.model and clone.is_clone(patcher)
    clone.add_patches({Q: torch.ones(8, 8)})
    clone.add_object_patch("model_sampling", "v")
    clone.model_options["transformer_options"]["x"].append(2)
    assert len(patcher.patches[Q]) == 1 and len(clone.patches[Q]) == 2
    assert patcher.object_patches == {}
    assert patcher.model_options["transformer_options"]["x"] == [1]
    assert not clone.is_clone(ModelPatcher(TinyDiffusion()))


def test_add_patches_returns_only_known_keys(patcher):
    keys = patcher.add_patches({Q: torch.zeros(8, 8), "diffusion_model.nope.weight": torch.zeros(1),
                                (OUT, (0, 0, 2)): torch.zeros(2, 8)})
    assert keys == [Q, (OUT, (0, 0, 2))]
    assert "diffusion_model.nope.weight" not in patcher.patches


def test_applied_patches_and_restores_bit_exactly(patcher, x):
    before = tensor_hashes(patcher.model)
    original_q = patcher.model.diffusion_model.input_blocks[0].to_q.weight.detach().clone()
    delta = torch.randn(8, 8)
    clone = patcher.clone()
    clone.add_patches({Q: delta}, strength_patch=0.5)
    with clone.applied() as module:
        patched = module.diffusion_model.input_blocks[0].to_q.weight
        torch.testing.assert_close(patched, original_q + 0.5 * delta, atol=0, rtol=0)
        module(x)
    assert tensor_hashes(patcher.model) == before


@pytest.mark.parametrize("error", [RuntimeError("boom"), Interrupted("stop"), KeyboardInterrupt()])
def test_restores_after_exception_and_interrupt(patcher, x, error):
    before = tensor_hashes(patcher.model)
    clone = patcher.clone()
    clone.add_patches({Q: torch.randn(8, 8), OUT: torch.randn(8, 8)})
    clone.add_object_patch("model_sampling", "v")
    clone.set_attention_backend("naive")
    with pytest.raises(type(error)):
        with clone.applied() as module:
            module(x)
            raise error
    assert tensor_hashes(patcher.model) == before
    assert patcher.model.model_sampling == "eps"
    assert current_backend().name == "sdpa"
    assert not clone.in_use
    with clone.applied():  # usable again afterwards
        pass


def test_failure_while_applying_rolls_back(patcher):
    before = tensor_hashes(patcher.model)
    clone = patcher.clone()
    clone.add_patches({Q: torch.randn(8, 8)})
    clone.add_patches({OUT: torch.randn(3, 3)})  # wrong shape: fails after Q was swapped in
    with pytest.raises(PatchDataError, match="does not fit"):
        with clone.applied():
            pass
    assert tensor_hashes(patcher.model) == before


def test_same_patch_set_twice_does_no_work(patcher, x):
    clone = patcher.clone()
    clone.add_patches({Q: torch.randn(8, 8), OUT: torch.randn(8, 8)})
    with clone.applied() as m:
        first = m(x)
    computed = clone.patch_stats.weights_computed
    assert computed == 2
    with clone.applied() as m:
        second = m(x)
    assert clone.patch_stats.weights_computed == computed  # nothing recomputed
    assert clone.patch_stats.weights_from_cache == 2
    torch.testing.assert_close(first, second, atol=0, rtol=0)
    # A clone with the very same records shares the cache too.
    with clone.clone().applied():
        pass
    assert clone.patch_stats.weights_computed == computed


def test_alternating_clones_equal_each_alone(x):
    def run(p):
        with torch.no_grad(), p.applied() as m:
            return m(x)

    base = ModelPatcher(TinyDiffusion())
    a, b = base.clone(), base.clone()
    a.add_patches({Q: torch.randn(8, 8)})
    b.add_patches({OUT: torch.randn(8, 8)}, strength_patch=2.0)
    def alone(p):  # the same patches on a fresh, identical module that nothing else uses
        fresh = ModelPatcher(TinyDiffusion())
        fresh.patches = {k: list(v) for k, v in p.patches.items()}
        return run(fresh)

    alone_a, alone_b, plain = alone(a), alone(b), alone(base)
    for _ in range(3):
        torch.testing.assert_close(run(b), alone_b, atol=0, rtol=0)
        torch.testing.assert_close(run(a), alone_a, atol=0, rtol=0)
        torch.testing.assert_close(run(base), plain, atol=0, rtol=0)
    assert not torch.equal(alone_a, plain) and not torch.equal(alone_b, plain)


def test_object_patches_apply_and_restore(patcher):
    clone = patcher.clone()
    replacement = nn.Linear(8, 8)
    clone.add_object_patch("model_sampling", "v")
    clone.add_object_patch("diffusion_model.out", replacement)
    clone.add_object_patch("diffusion_model.extra_flag", True)  # absent before: removed after
    assert clone.get_model_object("model_sampling") == "v"
    assert patcher.get_model_object("model_sampling") == "eps"
    original_out = patcher.model.diffusion_model.out
    with clone.applied() as m:
        assert m.model_sampling == "v" and m.diffusion_model.out is replacement
        assert m.diffusion_model.extra_flag is True
    assert patcher.model.model_sampling == "eps"
    assert patcher.model.diffusion_model.out is original_out
    assert not hasattr(patcher.model.diffusion_model, "extra_flag")


def test_object_patch_on_missing_parent_is_typed_error(patcher):
    clone = patcher.clone()
    clone.add_object_patch("diffusion_model.nothing.here", 1)
    with pytest.raises(ObjectPatchError, match="nothing"):
        with clone.applied():
            pass
    with pytest.raises(ObjectPatchError):
        patcher.get_model_object("diffusion_model.missing")


def test_signature_is_hashable_and_tracks_the_patch_set(patcher):
    clone = patcher.clone()
    assert hash(clone.signature()) == hash(patcher.signature())
    clone.add_patches({Q: torch.randn(8, 8)})
    assert clone.signature() != patcher.signature()
    other = patcher.clone()
    other.set_attention_backend("naive")
    assert other.signature() != patcher.signature()
    objects = patcher.clone()
    objects.add_object_patch("model_sampling", "v")
    assert objects.signature() != patcher.signature()
    # Same records in two clones: same weight signature (so the cache is shared).
    twin = clone.clone()
    assert twin.weight_signature() == clone.weight_signature() and twin.clone_has_same_weights(clone)
    # Another module with identical patches is a different base.
    assert ModelPatcher(TinyDiffusion()).signature() != patcher.signature()


def test_attention_backend_is_per_clone(patcher, x):
    fast = patcher.clone()
    fast.set_attention_backend("sub_quadratic", query_chunk_size=2)
    block = patcher.model.diffusion_model.input_blocks[0]
    with fast.applied() as m:
        m(x)
    with patcher.applied() as m:
        m(x)
    assert block.seen_backends == ["sub_quadratic", "sdpa"]
    assert "attention_backend" not in patcher.model_options


def test_concurrent_clones_with_different_backends(patcher, x):
    """Same weights, different backends: both hold the module at once, each sees its own backend."""
    barrier = threading.Barrier(2, timeout=20)
    seen: dict[str, list[str]] = {}
    outputs: dict[str, torch.Tensor] = {}
    errors: list[BaseException] = []

    def run(name: str) -> None:
        p = patcher.clone()
        p.set_attention_backend(name)
        try:
            with torch.no_grad(), p.applied() as m:
                barrier.wait()  # both are inside applied() together: no interference, no blocking
                outputs[name] = m(x)
                seen[name] = [current_backend().name]
                barrier.wait()
        except BaseException as exc:  # surfaced below
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(n,)) for n in ("naive", "split")]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert seen == {"naive": ["naive"], "split": ["split"]}
    torch.testing.assert_close(outputs["naive"], outputs["split"], atol=1e-5, rtol=0)


def test_different_weight_patch_sets_wait_for_each_other(patcher, x):
    a, b = patcher.clone(), patcher.clone()
    a.add_patches({Q: torch.randn(8, 8)})
    b.add_patches({Q: torch.randn(8, 8)})
    with torch.no_grad():
        with b.applied() as m:
            expected_b = m(x)
    inside_a, release_a = threading.Event(), threading.Event()
    result: dict[str, torch.Tensor] = {}

    def hold_a() -> None:
        with a.applied():
            inside_a.set()
            release_a.wait(20)

    def use_b() -> None:
        with torch.no_grad(), b.applied() as m:
            result["b"] = m(x)

    ta = threading.Thread(target=hold_a)
    ta.start()
    inside_a.wait(20)
    tb = threading.Thread(target=use_b)
    tb.start()
    tb.join(0.3)
    assert "b" not in result  # b waits while a's patches are on the shared module
    release_a.set()
    ta.join()
    tb.join(20)
    torch.testing.assert_close(result["b"], expected_b, atol=0, rtol=0)


def test_nested_conflicting_patch_sets_in_one_thread_raise(patcher):
    a, b = patcher.clone(), patcher.clone()
    a.add_patches({Q: torch.randn(8, 8)})
    b.add_patches({OUT: torch.randn(8, 8)})
    before = tensor_hashes(patcher.model)
    with a.applied():
        with pytest.raises(PatchConflictError):
            with b.applied():
                pass
        with a.clone().applied():  # the same patch set nests fine
            pass
    assert tensor_hashes(patcher.model) == before


def test_explicit_patch_and_unpatch(patcher):
    before = tensor_hashes(patcher.model)
    clone = patcher.clone()
    clone.add_patches({Q: torch.randn(8, 8)})
    module = clone.patch_model()
    assert clone.in_use and tensor_hashes(module) != before
    clone.unpatch_model()
    assert not clone.in_use and tensor_hashes(patcher.model) == before


def test_get_key_patches_and_model_merging_form(patcher):
    other = ModelPatcher(TinyDiffusion())
    with torch.no_grad():
        for p in other.model.parameters():
            p.add_(1.0)
    other.add_patches({Q: torch.ones(8, 8)})
    kp = other.get_key_patches("diffusion_model.")
    assert torch.equal(kp[Q][0][0], other.model.diffusion_model.input_blocks[0].to_q.weight)
    assert len(kp[Q]) == 2  # (original,) then the recorded patch
    merged = patcher.clone()
    ratio = 0.25
    merged.add_patches({k: kp[k] for k in kp}, 1.0 - ratio, ratio)  # ComfyUI's ModelMergeSimple
    w1 = patcher.model.diffusion_model.input_blocks[0].to_q.weight.detach().clone()
    w2 = other.model.diffusion_model.input_blocks[0].to_q.weight.detach() + 1.0
    with merged.applied() as m:
        torch.testing.assert_close(m.diffusion_model.input_blocks[0].to_q.weight, ratio * w1 + (1 - ratio) * w2)


def test_model_patcher_option_setters_use_comfyui_keys(patcher):
    def fn(*a):
        return a

    p = patcher.clone()
    p.set_option("sampler_cfg_function", fn)
    p.set_option("disable_cfg1_optimization", True)
    p.set_option("model_function_wrapper", fn)
    p.add_block_patch("attn1_patch", fn)
    p.add_block_patch("attn2_patch", fn)
    p.set_block_replace("attn2", ("input", 4), fn)
    p.add_option_function("sampler_post_cfg_function", fn)
    o = p.model_options
    assert o["sampler_cfg_function"] is fn and o["disable_cfg1_optimization"] is True
    assert o["model_function_wrapper"] is fn and o["sampler_post_cfg_function"] == [fn]
    assert o["transformer_options"]["patches"] == {"attn1_patch": [fn], "attn2_patch": [fn]}
    assert o["transformer_options"]["patches_replace"] == {"attn2": {("input", 4): fn}}
    assert patcher.model_options == {"transformer_options": {}}
    assert p.model_sampling == "eps"
