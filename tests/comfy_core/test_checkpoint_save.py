"""The safetensors writer (comfy_core/checkpoint/save.py): what it writes reads back bit for bit
with the safetensors library and our header reader, offsets aligned, metadata kept; a failed
write leaves no file."""
from __future__ import annotations

import pytest
import torch
from safetensors import safe_open

from comfy_core.checkpoint.errors import CheckpointError
from comfy_core.checkpoint.header import read_safetensors_header
from comfy_core.checkpoint.save import write_safetensors


def test_every_dtype_and_layout_reads_back_bit_for_bit(tmp_path):
    storage = torch.arange(24, dtype=torch.float32)
    tensors = {
        "f32": torch.randn(3, 5), "f16": torch.randn(7).half(), "bf16": torch.randn(2, 3).bfloat16(),
        "fp8": torch.randn(5).to(torch.float8_e4m3fn), "i64": torch.arange(77)[None], "bool": torch.tensor([True, False]),
        "scalar": torch.tensor(4.6052), "empty": torch.tensor([]), "transposed": torch.randn(4, 3).t(),
        "view_a": storage[:8], "view_b": storage[8:].reshape(4, 4),  # one storage: fine here
    }
    path = write_safetensors(tmp_path / "x.safetensors", tensors, {"prompt": "{}", "k": "v"})
    with safe_open(path, "pt") as f:
        assert f.metadata() == {"prompt": "{}", "k": "v"}
        for name, tensor in tensors.items():
            got = f.get_tensor(name)
            assert got.dtype == tensor.dtype and got.shape == tensor.shape
            assert torch.equal(got.reshape(-1).view(torch.uint8), tensor.contiguous().reshape(-1).view(torch.uint8)), name
    header = read_safetensors_header(path)
    assert header.data_start % 8 == 0
    for info in header.tensors.values():
        size = {"F32": 4, "I64": 8, "F16": 2, "BF16": 2}.get(info.dtype, 1)
        assert info.begin % size == 0  # every tensor at a multiple of its element size


def test_bad_input_raises_before_anything_is_written(tmp_path):
    with pytest.raises(CheckpointError, match="metadata"):
        write_safetensors(tmp_path / "a.safetensors", {"x": torch.ones(1)}, {"n": 1})
    with pytest.raises(CheckpointError, match="not a tensor"):
        write_safetensors(tmp_path / "a.safetensors", {"x": [1.0]})
    assert list(tmp_path.iterdir()) == []


def test_a_failure_while_writing_leaves_no_partial_file(tmp_path, monkeypatch):
    import comfy_core.checkpoint.save as save

    def broken(tensor):
        raise OSError("disk full")
    monkeypatch.setattr(save, "_tensor_bytes", broken)
    with pytest.raises(OSError, match="disk full"):
        write_safetensors(tmp_path / "a.safetensors", {"x": torch.ones(2)})
    assert list(tmp_path.iterdir()) == []
