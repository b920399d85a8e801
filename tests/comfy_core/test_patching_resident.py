"""`Patcher.keep_loaded` (ComfyUI's `load_models_gpu` leaving a module patched): the patches stay
on after the call, so code running the module without `applied()` sees them; a patcher with
other patches applying the module (in this thread or another) puts them back first; the same
patch set joins; the memory manager's offload gives the hold up; `release_loaded` ends it."""
from __future__ import annotations

import threading

import torch
from torch import nn

from comfy_core.patching import ModelPatcher

KEY = "lin.weight"


def patcher() -> ModelPatcher:
    root = nn.Module()
    root.lin = nn.Linear(3, 3, bias=False)
    return ModelPatcher(root)


def test_kept_patches_stay_on_until_another_patch_set_applies_the_module():
    base = patcher()
    original = base.model.lin.weight
    lora = base.clone()
    lora.add_patches({KEY: torch.ones(3, 3)})
    lora.keep_loaded("cpu")
    assert torch.equal(base.model.lin.weight, original + 1)  # on, outside any applied()
    assert not lora.in_use  # nobody computes with it: the memory manager may move it
    with lora.applied("cpu") as module:  # the same patch set joins, nothing applied again
        assert torch.equal(module.lin.weight, original + 1)
    assert torch.equal(base.model.lin.weight, original + 1)
    with base.applied("cpu") as module:  # another patch set: the kept one is put back first
        assert module.lin.weight is original
    assert base.model.lin.weight is original  # and not put on again afterwards
    lora.keep_loaded("cpu")
    base.keep_loaded("cpu")  # loading the plain clone takes the LoRA off, as ComfyUI's unpatch
    assert torch.equal(base.model.lin.weight, original)
    base.release_loaded()
    assert base.model.lin.weight is original


def test_a_kept_patch_set_is_given_up_for_another_thread_and_by_release():
    base = patcher()
    original = base.model.lin.weight
    lora = base.clone()
    lora.add_patches({KEY: torch.full((3, 3), 2.0)})
    lora.keep_loaded("cpu")
    seen = []

    def other():
        with base.applied("cpu") as module:
            seen.append(module.lin.weight is original)

    thread = threading.Thread(target=other)
    thread.start()
    thread.join(timeout=30)
    assert not thread.is_alive() and seen == [True]
    lora.keep_loaded("cpu")
    lora.release_loaded()
    assert base.model.lin.weight is original and not base.in_use
    lora.keep_loaded("cpu")
    base.unpatch_model("cpu")  # ComfyUI's unpatch of any clone puts the shared weights back
    assert base.model.lin.weight is original


def test_the_memory_managers_offload_puts_a_kept_patch_set_back():
    from comfy_core.memory import MemoryManager

    memory = MemoryManager.from_flags(cpu_only=True)
    lora = memory.track(patcher())
    original = lora.model.lin.weight
    lora.add_patches({KEY: torch.ones(3, 3)})
    lora.keep_loaded("cpu")
    assert not torch.equal(lora.model.lin.weight, original)
    memory.offload(lora)
    assert lora.model.lin.weight is original
