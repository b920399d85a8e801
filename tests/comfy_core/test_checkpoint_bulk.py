"""Bulk tensor loading: zero-copy views of the file map, one-pass casts, parallel chunks, page release."""
from __future__ import annotations

import json
import struct
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file
from torch import nn

from comfy_core.checkpoint.bulk import load_tensors, plan_chunks
from comfy_core.checkpoint.errors import CorruptCheckpointError, ShapeMismatchError
from comfy_core.loading import LoadOptions, load_checkpoint
from comfy_core.checkpoint.materialize import materialize
from comfy_core.checkpoint.reader import CheckpointFile


def _shares_map(tensor: torch.Tensor, checkpoint: CheckpointFile) -> bool:
    return tensor.untyped_storage().data_ptr() == checkpoint.file_bytes().untyped_storage().data_ptr()


@pytest.fixture()
def mixed(tmp_path):
    gen = torch.Generator().manual_seed(0)
    tensors = {"big": torch.randn(300, 70, generator=gen).half(), "small": torch.randn(5, generator=gen).half(),
               "f32": torch.randn(4, 3, generator=gen), "ids": torch.arange(9)}
    path = tmp_path / "mixed.safetensors"
    save_file(tensors, str(path))
    return path, tensors


def test_plan_chunks_covers_each_tensor_in_whole_elements_and_file_order():
    extents = {"b": (1000, 1000 + 2 * 25, 2), "a": (8, 8 + 4 * 10, 4), "empty": (500, 500, 2)}
    chunks = plan_chunks(extents, chunk_bytes=16)
    assert [c.file_start for c in chunks] == sorted(c.file_start for c in chunks)
    for name, (start, stop, itemsize) in extents.items():
        mine = [c for c in chunks if c.name == name]
        assert sum(c.stop - c.start for c in mine) == (stop - start) // itemsize
        assert all(c.file_stop - c.file_start <= 16 and (c.file_stop - c.file_start) % itemsize == 0 for c in mine)
        assert all(c.file_start == start + c.start * itemsize for c in mine)
    assert not [c for c in chunks if c.name == "empty"]
    with pytest.raises(ValueError, match="chunk_bytes"):
        plan_chunks(extents, chunk_bytes=0)


@pytest.mark.parametrize("workers,chunk_bytes", [(1, 8 << 20), (3, 256)])
def test_same_dtype_is_a_zero_copy_view_and_casts_are_exact(mixed, workers, chunk_bytes):
    path, tensors = mixed
    with CheckpointFile(path) as ckpt:
        requests = {"big": torch.float16, "small": torch.float32, "f32": torch.float32, "ids": torch.int64}
        out = load_tensors(ckpt, requests, workers=workers, chunk_bytes=chunk_bytes)
        assert _shares_map(out["big"], ckpt) and _shares_map(out["f32"], ckpt)
        assert not _shares_map(out["small"], ckpt)
    assert torch.equal(out["big"], tensors["big"]) and out["big"].dtype == torch.float16
    assert torch.equal(out["small"], tensors["small"].float()) and out["small"].dtype == torch.float32
    assert torch.equal(out["f32"], tensors["f32"]) and torch.equal(out["ids"], tensors["ids"])


def test_copies_when_zero_copy_is_off(mixed):
    path, tensors = mixed
    with CheckpointFile(path) as ckpt:
        out = load_tensors(ckpt, {"big": torch.float16}, zero_copy=False, workers=2, chunk_bytes=1000)
        assert not _shares_map(out["big"], ckpt)
    assert torch.equal(out["big"], tensors["big"])


def test_views_outlive_close_and_writes_never_reach_the_file(mixed):
    path, tensors = mixed
    before = path.read_bytes()
    with CheckpointFile(path) as ckpt:
        big = load_tensors(ckpt, {"big": torch.float16})["big"]
    big.add_(1)  # copy-on-write: this process's pages only
    assert path.read_bytes() == before
    assert torch.equal(big, tensors["big"] + 1)


def test_misaligned_tensor_is_read_through_a_copy(tmp_path):
    # Legal in the format, never written by safetensors itself: an F32 tensor at data offset 2.
    header = json.dumps({"pad": {"dtype": "U8", "shape": [2], "data_offsets": [0, 2]},
                         "x": {"dtype": "F32", "shape": [3], "data_offsets": [2, 14]}}).encode()
    header += b" " * (-len(header) % 8)
    values = torch.tensor([1.5, -2.0, 3.25])
    path = tmp_path / "odd.safetensors"
    path.write_bytes(struct.pack("<Q", len(header)) + header + b"\x07\x09" + values.numpy().tobytes())
    with CheckpointFile(path) as ckpt:
        assert ckpt.stored_view("x") is None
        assert torch.equal(ckpt.read("x"), values)
        out = load_tensors(ckpt, {"x": torch.float32, "pad": torch.uint8}, workers=2)
    assert torch.equal(out["x"], values) and out["pad"].tolist() == [7, 9]


def _mapped_rss_kb(path: Path) -> int:
    """Resident kB of this process's mappings of `path` (Linux /proc/self/smaps)."""
    total, inside = 0, False
    for line in Path("/proc/self/smaps").read_text().splitlines():
        head = line.split()
        if head and "-" in head[0] and len(head) >= 5:  # a mapping's first line
            inside = line.endswith(str(path))
        elif inside and line.startswith("Rss:"):
            total += int(head[1])
    return total


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/smaps")
def test_cast_copies_unmap_their_source_pages(tmp_path):
    path = tmp_path / "cast.safetensors"
    save_file({"w": torch.ones(2_000_000, dtype=torch.float16)}, str(path))  # 4 MB of data
    with CheckpointFile(path) as ckpt:
        load_tensors(ckpt, {"w": torch.float32}, chunk_bytes=1 << 20)
        assert _mapped_rss_kb(path) < 64  # only partial pages at chunk edges may stay mapped
        kept = load_tensors(ckpt, {"w": torch.float16})["w"]
        assert _mapped_rss_kb(path) > 3900  # a zero-copy load is resident when it returns
    assert kept.dtype == torch.float16


def test_file_changed_after_the_header_is_refused(mixed):
    path, _ = mixed
    with CheckpointFile(path) as ckpt:
        with path.open("ab") as f:
            f.write(b"\0" * 100)
        with pytest.raises(CorruptCheckpointError, match="size changed"):
            ckpt.read("big")


def test_load_checkpoint_views_or_copies_per_option(tmp_path, tiny_sd1_ckpt):
    path = tmp_path / "fp16.safetensors"
    save_file({k: v.half() if v.is_floating_point() else v for k, v in load_file(str(tiny_sd1_ckpt)).items()},
              str(path))
    before = path.read_bytes()
    from comfy_core.checkpoint.dtype import DtypePolicy

    policy = DtypePolicy(unet=torch.float16, vae=torch.float32)
    model, clip, vae = load_checkpoint(path, LoadOptions(dtype_policy=policy, io_workers=2))
    weight = model.model.diffusion_model.out[2].weight
    file_size = path.stat().st_size
    assert weight.dtype == torch.float16 and weight.untyped_storage().nbytes() == file_size  # a view of the map
    assert vae.model.decoder.conv_out.weight.dtype == torch.float32
    assert vae.model.decoder.conv_out.weight.untyped_storage().nbytes() < file_size  # cast: its own memory
    with torch.no_grad():
        weight.mul_(2)
    assert path.read_bytes() == before
    copied, _, _ = load_checkpoint(path, LoadOptions(dtype_policy=policy, mmap=False, output_clip=False))
    own = copied.model.diffusion_model.out[2].weight
    assert own.untyped_storage().nbytes() == own.numel() * own.element_size()
    assert torch.equal(own * 2, weight)
    with pytest.raises(ValueError, match="io_workers"):
        LoadOptions(io_workers=0)


class _WithHiddenBuffer(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(2, 2)
        self.register_buffer("scale", torch.ones(2), persistent=False)


def test_module_tensor_outside_the_state_dict_is_a_typed_error(tmp_path):
    path = tmp_path / "m.safetensors"
    save_file({"m.lin.weight": torch.zeros(2, 2), "m.lin.bias": torch.zeros(2)}, str(path))
    with torch.device("meta"):
        module = _WithHiddenBuffer()
    with CheckpointFile(path) as ckpt, pytest.raises(ShapeMismatchError, match="scale"):
        materialize(module, ckpt, "m.", torch.float32, "Toy")


def test_plan_touches_merges_neighbours_then_cuts_and_pack_batches_small_chunks():
    from comfy_core.checkpoint.bulk import Chunk, pack, plan_touches

    assert plan_touches([(10, 20), (0, 10), (15, 30), (40, 40), (50, 75)], chunk_bytes=12) == [
        (0, 12), (12, 24), (24, 30), (50, 62), (62, 74), (74, 75)]
    chunks = [Chunk(n, 0, 1, a, b) for n, (a, b) in zip("abcd", [(0, 4), (4, 8), (8, 20), (20, 22)])]
    assert [[c.name for c in job] for job in pack(chunks, chunk_bytes=12)] == [["a", "b"], ["c"], ["d"]]
    with pytest.raises(ValueError, match="chunk_bytes"):
        plan_touches([(0, 1)], chunk_bytes=0)


def test_bulk_read_leaves_no_thread_behind_on_error(mixed):
    import threading

    from comfy_core.checkpoint.bulk import BulkRead

    path, tensors = mixed
    with CheckpointFile(path) as ckpt:
        with pytest.raises(RuntimeError, match="while building"):
            with BulkRead(ckpt, {"big": torch.float32, "f32": torch.float32}, workers=3, chunk_bytes=512):
                raise RuntimeError("failed while building")
        assert not [t for t in threading.enumerate() if t.name.startswith("checkpoint-read")]
        with BulkRead(ckpt, {"big": torch.float32}, workers=2, chunk_bytes=512) as reading:
            first = reading.result()
            assert reading.result() is first and torch.equal(first["big"], tensors["big"].float())
        with pytest.raises(CorruptCheckpointError, match="nope"):
            BulkRead(ckpt, {"nope": torch.float32})
        with pytest.raises(ValueError, match="workers"):
            BulkRead(ckpt, {"big": torch.float16}, workers=0)


def test_jobs_serving_maps_each_tensor_to_exactly_the_jobs_that_fill_it():
    from comfy_core.checkpoint.bulk import _jobs_serving

    # Touches over [0, 100) in pieces of 40, then two copy jobs holding chunks of "c" and "d".
    work = [(0, 40, (), None), (40, 80, (), None), (80, 100, (), None),
            (100, 140, {"c"}, None), (140, 180, {"c", "d"}, None)]
    zero_copied = {"a": (0, 30), "b": (30, 90), "edge": (40, 40 + 40)}
    jobs = _jobs_serving(work, zero_copied)
    assert jobs["a"] == [0]
    assert sorted(jobs["b"]) == [0, 1, 2]
    assert sorted(jobs["edge"]) == [1]
    assert jobs["c"] == [3, 4] and jobs["d"] == [4]


@pytest.mark.parametrize("zero_copy", [True, False])
def test_one_tensor_is_served_before_the_whole_read_with_the_same_values(mixed, zero_copy):
    from comfy_core.checkpoint.bulk import BulkRead

    path, tensors = mixed
    with CheckpointFile(path) as ckpt:
        requests = {"big": torch.float32, "small": torch.float16, "f32": torch.float32, "ids": torch.int64}
        with BulkRead(ckpt, requests, zero_copy=zero_copy, workers=2, chunk_bytes=512) as reading:
            small = reading.tensor("small")
            big = reading.tensor("big")
            with pytest.raises(KeyError):
                reading.tensor("not-requested")
            everything = reading.result()
    assert small is everything["small"] and torch.equal(small, tensors["small"])
    assert big is everything["big"] and torch.equal(big, tensors["big"].float())
