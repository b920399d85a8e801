"""MemoryManager: device choice, LRU offload under a budget, free_all, retry on out-of-memory."""
from __future__ import annotations

import pytest
import torch
from torch import nn

from comfy_core.memory import MemoryConfigError, MemoryManager, choose_device, is_out_of_memory
from comfy_core.patching import Patcher


def test_device_choice_honours_cpu_flag():
    assert choose_device(cpu_only=True) == torch.device("cpu")
    expected = "cuda" if torch.cuda.is_available() else "cpu"
    assert choose_device().type in (expected, "mps")
    assert MemoryManager(cpu_only=True).device == torch.device("cpu")


def test_bad_configuration_is_a_typed_error():
    with pytest.raises(MemoryConfigError, match="budget"):
        MemoryManager(device="cpu", budget_bytes=-1)
    with pytest.raises(MemoryConfigError, match="cpu_only"):
        MemoryManager(device="meta", cpu_only=True)


def _patcher(memory: MemoryManager, numel: int) -> Patcher:
    module = nn.Linear(numel, 1, bias=False)  # numel * 4 bytes
    patcher = memory.track(Patcher(module))
    patcher.add_patches({"weight": torch.ones(1, numel)})
    return patcher


def make_manager(budget: int) -> MemoryManager:
    # "cpu:0" as the compute device and "cpu" as the offload device are the same memory, so the
    # policy (what is offloaded, when, in which order) runs for real on a CPU-only machine.
    return MemoryManager(device="cpu:0", offload_device="cpu", budget_bytes=budget)


def test_least_recently_used_models_are_offloaded_over_budget():
    # Each model is 400 bytes plus a 400-byte cached patched weight: room for two of them.
    memory = make_manager(budget=2 * 800)
    a, b, c = (_patcher(memory, 100) for _ in range(3))
    for p in (a, b):
        with p.applied():
            pass
    assert memory.loaded_models() == [a, b]
    with a.applied():  # a becomes most recently used
        pass
    assert memory.loaded_models() == [b, a]
    assert b.weight_cache_bytes() > 0
    with c.applied():
        pass
    assert memory.loaded_models() == [a, c]  # b, least recently used, went
    assert b.weight_cache_bytes() == 0  # and its cached patched weights were dropped


def test_models_in_use_are_never_offloaded():
    memory = make_manager(budget=800)
    a, b = _patcher(memory, 100), _patcher(memory, 100)
    with a.applied():
        with b.applied():
            assert set(memory.loaded_models()) == {a, b}  # over budget, but a is in use
        assert memory.free_all() >= 0 and a in memory.loaded_models()
    memory.free_all()
    assert memory.loaded_models() == []


def test_free_all_drops_weight_caches_on_the_compute_device_too():
    memory = MemoryManager(device="cpu", offload_device="cpu")
    p = _patcher(memory, 50)
    with p.applied():
        pass
    assert p.weight_cache_bytes() == 200
    assert memory.free_all() >= 200
    assert p.weight_cache_bytes() == 0


def test_retry_on_oom_unloads_and_retries_once():
    memory = make_manager(budget=10_000)
    p = _patcher(memory, 10)
    with p.applied():
        pass
    calls = []

    def flaky(x):
        calls.append(memory.loaded_models())
        if len(calls) == 1:
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
        return x * 2

    assert memory.retry_on_oom(flaky, 21) == 42
    assert calls[0] == [p] and calls[1] == []  # models were unloaded before the retry


def test_retry_on_oom_gives_up_after_one_retry_and_ignores_other_errors():
    memory = make_manager(budget=10_000)
    attempts = []

    def always_oom():
        attempts.append(1)
        raise RuntimeError("MPS backend out of memory")

    with pytest.raises(RuntimeError, match="out of memory"):
        memory.retry_on_oom(always_oom)
    assert len(attempts) == 2

    def bad():
        attempts.append(1)
        raise ValueError("not memory")

    attempts.clear()
    with pytest.raises(ValueError):
        memory.retry_on_oom(bad)
    assert len(attempts) == 1


def test_is_out_of_memory():
    assert is_out_of_memory(torch.OutOfMemoryError("x"))
    assert is_out_of_memory(RuntimeError("CUDA error: out of memory"))
    assert not is_out_of_memory(RuntimeError("shape mismatch"))
