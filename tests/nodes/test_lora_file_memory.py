"""LoRA files are read without a per-call leak (safetensors 0.8.0's reader kept two Python ints
per tensor on every load; the server loads a LoRA per prompt: bench/memory_curve.py)."""
from __future__ import annotations

import torch
from safetensors.torch import save_file

from nodes.patching import load_lora_file
from tests.comfy_core.test_checkpoint_tensor_file import blocks_left_per_call, many_tensors


def test_loading_a_lora_repeatedly_leaves_nothing_behind_per_tensor(tmp_path):
    path = tmp_path / "style.safetensors"
    tensors = many_tensors()
    save_file(tensors, str(path))
    loaded = load_lora_file(path)
    assert sorted(loaded) == sorted(tensors) and all(torch.equal(loaded[k], v) for k, v in tensors.items())
    assert blocks_left_per_call(lambda: load_lora_file(path)) < len(tensors) / 4
