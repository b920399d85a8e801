"""bench/video_families.py and bench/video_vae_decode.py: the files they write at the released
widths are read back as the families and configs they were built from (names, shapes and
metadata only: the networks are built on the meta device, nothing is allocated), and the decode
bench's tiling is the largest that fits its memory budget."""
from __future__ import annotations

import importlib.util
import json
import struct
import sys
from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parents[2]


def _load(name: str):
    if str(REPO) not in sys.path:
        sys.path.insert(0, str(REPO))
    spec = importlib.util.spec_from_file_location(name, REPO / "bench" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def bench():
    return _load("video_families")


@pytest.mark.parametrize("family", ["ltx2", "hunyuan_video15", "kandinsky5", "wan22_s2v", "ace_step15"])
def test_the_written_layout_is_detected_as_the_family_and_config_it_was_built_from(bench, family):
    from comfy_core.families import default_registry

    spec = bench.FAMILIES[family]
    shapes = bench.shapes_of(family, 1)
    tensors = {name: torch.empty(shape, device="meta") for name, shape in shapes.items()}
    detection = default_registry().detect_diffusion_model(tensors, metadata=spec.get("metadata"))
    assert detection.family.name == spec["registry"]
    with torch.device("meta"):  # the network the loader builds from the detected config
        network = detection.family.architecture.build(detection.config)
    assert {bench.PREFIX + k: tuple(v.shape) for k, v in network.state_dict().items()} == shapes


def test_stable_audio_checkpoint_layout_is_detected_with_its_vae_and_seconds_embedders(bench):
    from comfy_core.families import default_registry

    shapes = bench.shapes_of("stable_audio", 1)
    tensors = {name: torch.empty(shape, device="meta") for name, shape in shapes.items()}
    detection = default_registry().detect(tensors)
    assert detection.family.name == "stable_audio"


def test_the_file_writer_keeps_only_matrices_in_fp8_and_carries_the_metadata(bench, tmp_path):
    shapes = {"a.weight": (4, 3), "a.bias": (4,), "conv.weight": (2, 2, 1, 1), "scalar": ()}
    path = tmp_path / "f.safetensors"
    bench.write_file(path, shapes, fp8=True, metadata={"config": "{}"})
    raw = path.read_bytes()
    header = json.loads(raw[8:8 + struct.unpack("<Q", raw[:8])[0]])
    assert {k: v["dtype"] for k, v in header.items() if k != "__metadata__"} == {
        "a.weight": "F8_E4M3", "a.bias": "BF16", "conv.weight": "BF16", "scalar": "BF16"}
    assert header["__metadata__"]["config"] == "{}"
    data = 4 * 3 * 1 + 4 * 2 + 2 * 2 * 2 + 2  # fp8 matrix, bf16 bias, bf16 conv, bf16 scalar
    assert path.stat().st_size == 8 + struct.unpack("<Q", raw[:8])[0] + data


class _FakeVae:
    """Decode estimate = latent volume x 1 000 bytes; 32x spatial, 8x temporal (LTX-Video)."""

    def spacial_compression_decode(self) -> int:
        return 32

    def temporal_compression_decode(self) -> int:
        return 8

    def memory_used_decode(self, shape, dtype) -> int:
        return 1000 * shape[2] * shape[3] * shape[4]


def test_the_decode_tiling_is_the_largest_volume_under_the_budget():
    decode = _load("video_vae_decode")
    shape = (1, 128, 11, 16, 24)
    tile, temporal = decode.pick_tiling(_FakeVae(), shape, 1000 * 11 * 16 * 24)
    assert (tile // 32 >= 24, temporal // 8) == (True, 11)  # the whole latent fits: one tile
    tile, temporal = decode.pick_tiling(_FakeVae(), shape, 1000 * 11 * 16 * 16)
    lat = (min(16, tile // 32), min(24, tile // 32), temporal // 8)
    assert 1000 * lat[0] * lat[1] * lat[2] <= 1000 * 11 * 16 * 16
    assert lat[0] * lat[1] * lat[2] == 11 * 16 * 16  # nothing larger fits
    assert decode.pick_tiling(_FakeVae(), shape, 1000) is None
