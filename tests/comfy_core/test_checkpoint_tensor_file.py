"""`load_tensor_file`: a whole weight file read into owned tensors, without leaking per call.

safetensors 0.8.0's memory-mapped reader (`load_file`, `safe_open(...).get_tensor`) keeps two
Python ints per tensor read alive for ever; a server loading a LoRA per prompt grew by them
(bench/memory_curve.py). The leak test counts live Python allocations (tracemalloc blocks), not
RSS: repeated loads must not leave something behind per tensor.
"""
from __future__ import annotations

import gc
import tracemalloc
from typing import Callable

import pytest
import torch
from safetensors.torch import load_file, save_file

from comfy_core.checkpoint.errors import CheckpointNotFoundError, CorruptCheckpointError
from comfy_core.checkpoint.reader import load_tensor_file


def many_tensors(n: int = 200) -> dict[str, torch.Tensor]:
    return {f"lora_unet_block_{i}.lora_up.weight": torch.full((2, 3), float(i)) for i in range(n)}


def blocks_left_per_call(load: Callable[[], object], calls: int = 6) -> float:
    """Python allocations (tracemalloc blocks) still alive per call of `load`, after a warm-up."""
    for _ in range(2):
        load()
    gc.collect()
    tracemalloc.start()
    try:
        load()
        gc.collect()
        before = tracemalloc.take_snapshot()
        for _ in range(calls):
            load()
        gc.collect()
        after = tracemalloc.take_snapshot()
    finally:
        tracemalloc.stop()
    skip = [tracemalloc.Filter(False, tracemalloc.__file__)]
    grown = after.filter_traces(skip).compare_to(before.filter_traces(skip), "filename")
    return sum(stat.count_diff for stat in grown) / calls


def test_reads_every_tensor_and_the_metadata_as_safetensors_does(tmp_path):
    tensors = {"a": torch.randn(3, 4), "b": torch.arange(6, dtype=torch.int64).view(2, 3),
               "c": torch.randn(5).to(torch.bfloat16), "d": torch.randn(2, 2).to(torch.float16)}
    path = tmp_path / "w.safetensors"
    save_file(tensors, str(path), metadata={"ss_network_dim": "4"})
    loaded, metadata = load_tensor_file(path)
    reference = load_file(str(path))
    assert sorted(loaded) == sorted(reference)
    for name, value in reference.items():
        assert loaded[name].dtype == value.dtype and torch.equal(loaded[name], value)
    assert metadata == {"ss_network_dim": "4"}


def test_tensors_own_their_memory(tmp_path):
    """Copies, not views over the file mapping: writing to one changes neither the file nor the others."""
    path = tmp_path / "w.safetensors"
    save_file({"a": torch.zeros(4), "b": torch.ones(4)}, str(path))
    loaded, _ = load_tensor_file(path)
    for value in loaded.values():
        assert value.untyped_storage().nbytes() == value.nbytes
    loaded["a"] += 5
    assert torch.equal(load_tensor_file(path)[0]["a"], torch.zeros(4))
    assert torch.equal(loaded["b"], torch.ones(4))


def test_pickled_files_and_typed_errors(tmp_path):
    path = tmp_path / "w.pt"
    torch.save({"state_dict": {"x": torch.ones(2)}}, str(path))
    loaded, metadata = load_tensor_file(path)
    assert list(loaded) == ["x"] and torch.equal(loaded["x"], torch.ones(2)) and metadata == {}
    with pytest.raises(CheckpointNotFoundError):
        load_tensor_file(tmp_path / "missing.safetensors")
    (tmp_path / "short.safetensors").write_bytes(b"\x01\x00")
    with pytest.raises(CorruptCheckpointError):
        load_tensor_file(tmp_path / "short.safetensors")


def test_repeated_loads_leave_nothing_behind_per_tensor(tmp_path):
    path = tmp_path / "lora.safetensors"
    tensors = many_tensors()
    save_file(tensors, str(path))
    # safetensors' own reader left 2 blocks per tensor per call (400 here); ours none
    assert blocks_left_per_call(lambda: load_tensor_file(path)) < len(tensors) / 4
