"""`comfy.utils.load_torch_file` on safetensors: same tensors and metadata as safetensors'
`safe_open`, read without its per-call leak (two Python ints per tensor in safetensors 0.8.0;
packs load weight files per prompt)."""
from __future__ import annotations

import torch
from safetensors.torch import save_file

from compat.tensors import load_torch_file
from tests.comfy_core.test_checkpoint_tensor_file import blocks_left_per_call, many_tensors


def test_tensors_and_metadata(tmp_path):
    with_meta, without = tmp_path / "a.safetensors", tmp_path / "b.sft"
    save_file({"x": torch.ones(2, dtype=torch.float16)}, str(with_meta), metadata={"k": "v"})
    save_file({"y": torch.zeros(3)}, str(without))
    sd, metadata = load_torch_file(with_meta, return_metadata=True)
    assert metadata == {"k": "v"} and sd["x"].dtype == torch.float16 and torch.equal(sd["x"], torch.ones(2).half())
    sd, metadata = load_torch_file(without, return_metadata=True)
    assert metadata is None and torch.equal(sd["y"], torch.zeros(3))
    assert torch.equal(load_torch_file(str(without), device="cpu")["y"], torch.zeros(3))


def test_repeated_loads_leave_nothing_behind_per_tensor(tmp_path):
    path = tmp_path / "ipadapter.safetensors"
    tensors = many_tensors()
    save_file(tensors, str(path))
    assert blocks_left_per_call(lambda: load_torch_file(path)) < len(tensors) / 4
