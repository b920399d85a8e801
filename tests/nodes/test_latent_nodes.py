"""Latent nodes: ComfyUI's shapes, upscale rules and the `.latent` file format."""
from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import load_file, save_file

from comfy_core.loading import load_checkpoint
from graph.context import NodeContext, reset_current, set_current
from nodes.environment import Environment
from nodes.errors import NodeInputError
from nodes.latent import (
    empty_latent_image,
    latent_upscale,
    list_latent_files,
    load_latent,
    save_latent,
    vae_decode,
    vae_encode,
)


@pytest.fixture
def env(tmp_path):
    environment = Environment.rooted_at(tmp_path)
    environment.ensure_dirs()
    token = set_current(NodeContext("p", "1", "1", None, environment))
    yield environment
    reset_current(token)


def test_empty_latent_image():
    (latent,) = empty_latent_image(512, 328, 3)
    assert latent["samples"].shape == (3, 4, 41, 64) and not latent["samples"].any()


def test_vae_decode_and_encode(tiny_sd1_ckpt, in_node):
    _, _, vae = load_checkpoint(tiny_sd1_ckpt, output_clip=False)
    (image,) = vae_decode({"samples": torch.randn(2, 4, 3, 5)}, vae)
    assert image.shape == (2, 24, 40, 3)
    (latent,) = vae_encode(torch.cat([image, torch.ones(2, 24, 40, 1)], dim=-1), vae)
    assert latent["samples"].shape == (2, 4, 3, 5)
    with in_node("VAEDecode", "8"), pytest.raises(NodeInputError, match=r"^VAEDecode \(node 8\): input 'samples'"):
        vae_decode({"wrong": 1}, vae)


def test_latent_upscale_sizes_and_keys():
    samples = {"samples": torch.randn(1, 4, 8, 16), "batch_index": [0]}
    (out,) = latent_upscale(samples, "nearest-exact", 256, 128, "disabled")
    assert out["samples"].shape == (1, 4, 16, 32) and out["batch_index"] == [0]
    (out,) = latent_upscale(samples, "bilinear", 0, 128, "disabled")  # keep aspect from height
    assert out["samples"].shape == (1, 4, 16, 32)
    (out,) = latent_upscale(samples, "area", 64, 0, "center")
    assert out["samples"].shape == (1, 4, 8, 8)
    assert latent_upscale(samples, "bicubic", 0, 0, "disabled")[0] is samples
    (out,) = latent_upscale(samples, "nearest-exact", 128, 64, "center")
    assert torch.equal(out["samples"], samples["samples"])


def test_save_then_load_latent_round_trip(env):
    samples = torch.randn(2, 4, 5, 6)
    result = save_latent({"samples": samples}, "latents/run", prompt={"1": {}}, extra_pnginfo={"workflow": {"a": 1}})
    entry = result["ui"]["latents"][0]
    assert entry == {"filename": "run_00001_.latent", "subfolder": "latents", "type": "output"}
    path = env.output_dir / "latents" / entry["filename"]
    stored = load_file(str(path))
    assert set(stored) == {"latent_tensor", "latent_format_version_0"}
    from safetensors import safe_open
    with safe_open(str(path), "pt") as f:
        assert json.loads(f.metadata()["workflow"]) == {"a": 1}
    assert save_latent({"samples": samples}, "latents/run")["ui"]["latents"][0]["filename"] == "run_00002_.latent"
    (env.input_dir / "run.latent").write_bytes(path.read_bytes())
    assert list_latent_files(env) == ["run.latent"]
    (loaded,) = load_latent("run.latent")
    assert torch.equal(loaded["samples"], samples)


def test_a_video_latent_saves_and_loads_back(env):
    samples = torch.randn(1, 16, 3, 4, 6)  # Wan's [B, C, T, h, w]
    entry = save_latent({"samples": samples}, "latents/video")["ui"]["latents"][0]
    (env.input_dir / "video.latent").write_bytes((env.output_dir / "latents" / entry["filename"]).read_bytes())
    (loaded,) = load_latent("video.latent")
    assert torch.equal(loaded["samples"], samples)


def test_legacy_latent_files_are_unscaled(env):
    samples = torch.randn(1, 4, 2, 2)
    save_file({"latent_tensor": samples * 0.18215}, str(env.input_dir / "old.latent"))
    (loaded,) = load_latent("old.latent")
    assert torch.allclose(loaded["samples"], samples, atol=1e-6)


def test_load_latent_refuses_paths_outside_input(env):
    with pytest.raises(ValueError):
        load_latent("../output/x.latent")


def test_bislerp_upscale_keeps_directions_and_interpolates_norms():
    constant = torch.tensor([1.0, -2.0, 0.5, 3.0]).reshape(1, 4, 1, 1).expand(1, 4, 3, 5).contiguous()
    (out,) = latent_upscale({"samples": constant}, "bislerp", 80, 48, "disabled")
    assert out["samples"].shape == (1, 4, 6, 10)
    assert torch.allclose(out["samples"], constant[:, :, :1, :1].expand(1, 4, 6, 10))
    # Two orthogonal unit pixels side by side: the new in-between pixel is their normalised
    # midpoint direction with unit norm (linear interpolation would give norm 0.71).
    two = torch.zeros(1, 4, 1, 2)
    two[0, 0, 0, 0] = 1.0
    two[0, 1, 0, 1] = 1.0
    (out,) = latent_upscale({"samples": two}, "bislerp", 24, 8, "disabled")
    mid = out["samples"][0, :, 0, 1]  # source position 0.5 -> halfway
    assert torch.allclose(mid.norm(), torch.tensor(1.0), atol=1e-5)
    assert torch.allclose(mid[:2], torch.tensor([0.5 ** 0.5, 0.5 ** 0.5]), atol=1e-5)
    (lin,) = latent_upscale({"samples": two}, "bilinear", 24, 8, "disabled")
    assert lin["samples"][0, :, 0, 1].norm() < 0.8
