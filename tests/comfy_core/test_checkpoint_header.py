"""Checkpoint files: header-only reading, typed errors naming the file, pickled checkpoints."""
from __future__ import annotations

import json
import os
import struct

import pytest
import torch
from safetensors.torch import save_file

from comfy_core.checkpoint.errors import (
    CheckpointNotFoundError,
    CorruptCheckpointError,
    UnsafeCheckpointError,
    UnsupportedFormatError,
)
from comfy_core.checkpoint.header import read_safetensors_header
from comfy_core.checkpoint.reader import CheckpointFile


def _write(path, tensors, metadata=None):
    save_file(tensors, str(path), metadata=metadata)
    return path


def test_header_lists_names_dtypes_shapes_and_metadata(tmp_path):
    path = _write(tmp_path / "a.safetensors", {"x": torch.zeros(2, 3, dtype=torch.float16), "y": torch.zeros(4)},
                  {"modelspec.prediction_type": "v"})
    header = read_safetensors_header(path)
    assert header.tensors["x"].dtype == "F16" and header.tensors["x"].shape == (2, 3)
    assert header.tensors["y"].dtype == "F32" and header.tensors["y"].shape == (4,)
    assert header.metadata == {"modelspec.prediction_type": "v"}
    assert header.data_bytes == 2 * 3 * 2 + 4 * 4


def test_header_reading_ignores_garbage_data(tmp_path):
    path = _write(tmp_path / "g.safetensors", {"x": torch.arange(1000, dtype=torch.float32)})
    n = struct.unpack("<Q", path.read_bytes()[:8])[0]
    raw = bytearray(path.read_bytes())
    raw[8 + n:] = os.urandom(len(raw) - 8 - n)
    path.write_bytes(bytes(raw))
    assert read_safetensors_header(path).tensors["x"].shape == (1000,)


def test_truncated_file_is_a_typed_error_naming_the_file(tmp_path):
    path = _write(tmp_path / "t.safetensors", {"x": torch.zeros(1000)})
    raw = path.read_bytes()
    path.write_bytes(raw[:-100])
    with pytest.raises(CorruptCheckpointError) as err:
        read_safetensors_header(path)
    assert "t.safetensors" in str(err.value) and "truncated" in str(err.value)
    path.write_bytes(raw[:5])
    with pytest.raises(CorruptCheckpointError):
        read_safetensors_header(path)


def test_malformed_headers_are_refused(tmp_path):
    path = tmp_path / "bad.safetensors"
    body = b"{not json"
    path.write_bytes(struct.pack("<Q", len(body)) + body)
    with pytest.raises(CorruptCheckpointError, match="not valid JSON"):
        read_safetensors_header(path)
    header = json.dumps({"x": {"dtype": "F32", "shape": [4], "data_offsets": [0, 8]}}).encode()
    path.write_bytes(struct.pack("<Q", len(header)) + header + b"\0" * 16)
    with pytest.raises(CorruptCheckpointError, match="do not match"):
        read_safetensors_header(path)
    header = json.dumps({"x": {"dtype": "Q7", "shape": [1], "data_offsets": [0, 1]}}).encode()
    path.write_bytes(struct.pack("<Q", len(header)) + header + b"\0")
    with pytest.raises(CorruptCheckpointError, match="unknown dtype"):
        read_safetensors_header(path)


def test_missing_and_unsupported_files(tmp_path):
    with pytest.raises(CheckpointNotFoundError):
        CheckpointFile(tmp_path / "nope.safetensors")
    other = tmp_path / "model.gguf"
    other.write_bytes(b"GGUF")
    with pytest.raises(UnsupportedFormatError, match="model.gguf"):
        CheckpointFile(other)


def test_read_and_read_into_cast(tmp_path):
    values = torch.randn(3, 5, dtype=torch.float32)
    path = _write(tmp_path / "r.safetensors", {"w": values.half(), "b": torch.arange(7, dtype=torch.int64)})
    with CheckpointFile(path) as ckpt:
        assert torch.equal(ckpt.read("w"), values.half())
        out = torch.empty(3, 5, dtype=torch.float32)
        ckpt.read_into("w", out)
        assert torch.equal(out, values.half().float())
        assert torch.equal(ckpt.read("b"), torch.arange(7))
        with pytest.raises(CorruptCheckpointError, match="does not fit"):
            ckpt.read_into("w", torch.empty(5, 3))


def test_pickled_checkpoint_loads_through_weights_only(tmp_path):
    path = tmp_path / "m.ckpt"
    torch.save({"state_dict": {"a": torch.ones(2, 2)}, "global_step": 10}, path)
    with CheckpointFile(path) as ckpt:
        assert ckpt.tensors["a"].shape == (2, 2) and ckpt.tensors["a"].dtype == "F32"
        assert torch.equal(ckpt.read("a"), torch.ones(2, 2))


class _Payload:
    def __reduce__(self):
        return (os.getcwd, ())


def test_pickled_checkpoint_with_code_is_refused(tmp_path):
    path = tmp_path / "evil.ckpt"
    torch.save({"state_dict": {"a": torch.ones(1)}, "payload": _Payload()}, path)
    with pytest.raises(UnsafeCheckpointError, match="evil.ckpt"):
        CheckpointFile(path)


def test_pickled_checkpoint_of_non_tensors_is_refused(tmp_path):
    path = tmp_path / "list.pt"
    torch.save([1, 2, 3], path)
    with pytest.raises(CorruptCheckpointError, match="dict of tensors"):
        CheckpointFile(path)
