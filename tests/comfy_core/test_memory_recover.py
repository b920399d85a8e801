"""MemoryManager.recover: the executor's out-of-memory hook (unload, then "retry")."""
from __future__ import annotations

import torch
from torch import nn

from comfy_core.memory import MemoryManager
from comfy_core.patching import Patcher


def _loaded_manager() -> tuple[MemoryManager, Patcher]:
    # "cpu:0" computes and "cpu" rests: the same memory, so offloading runs for real on CPU.
    memory = MemoryManager(device="cpu:0", offload_device="cpu", budget_bytes=10_000)
    patcher = memory.track(Patcher(nn.Linear(10, 1, bias=False)))
    patcher.add_patches({"weight": torch.ones(1, 10)})
    with patcher.applied():
        pass
    return memory, patcher


def test_recover_unloads_every_model_on_out_of_memory_and_asks_for_a_retry():
    memory, patcher = _loaded_manager()
    assert memory.loaded_models() == [patcher]
    assert memory.recover(torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")) is True
    assert memory.loaded_models() == []
    assert patcher.weight_cache_bytes() == 0


def test_recover_leaves_models_alone_for_other_errors():
    memory, patcher = _loaded_manager()
    assert memory.recover(ValueError("shape mismatch")) is False
    assert memory.recover(RuntimeError("expected a 4-D tensor")) is False
    assert memory.loaded_models() == [patcher]
