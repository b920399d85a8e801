"""LatentUpscaleModelLoader and LTXVLatentUpsampler (nodes/latent_upscale_model.py) on tiny
latent-upsampler files (tests/fixtures/latent_upscale_files.py) and the tiny LTX video VAE
(tests/fixtures/ltxv_files.py, 128 latent channels): shapes, the VAE's statistics around the
network, the audio part of an audio-video latent, and the refusals."""
from __future__ import annotations

import pytest
import torch
from safetensors.torch import save_file

from comfy_core.latent.nested import NestedTensor
from comfy_core.patching.vae import VaePatcher
from nodes.environment import Environment
from nodes.errors import NodeInputError
from nodes.latent_upscale_model import _model_files, latent_upscale_model_loader, ltxv_latent_upsampler
from tests.fixtures import latent_upscale_files as fx
from tests.fixtures.ltxv_files import tiny_ltxv_vae_state_dict
from tests.nodes.node_context import folders_env, running_node


@pytest.fixture(scope="module")
def env(tmp_path_factory) -> Environment:
    root = tmp_path_factory.mktemp("latent_upscale")
    environment = folders_env(root)
    folder = root / "base" / "models" / "latent_upscale_models"
    fx.write_tiny_latent_upsampler(folder / "ltx-2-spatial-upscaler-x2-1.0.safetensors", "rational")
    fx.write_tiny_latent_upsampler(folder / "ltxv-temporal-upscaler-0.9.8.safetensors", "temporal_x2")
    save_file({"up.0.block.0.conv1.conv.weight": torch.zeros(4, 4, 3, 3, 3)},
              str(folder / "hunyuanvideo15_latent_upsampler_1080p.safetensors"))
    return environment


@pytest.fixture(scope="module")
def vae() -> VaePatcher:
    return VaePatcher(sd=tiny_ltxv_vae_state_dict("0.9.1", seed=7))


def _load(env: Environment, name: str):
    with running_node("LatentUpscaleModelLoader", "1", env):
        (model,) = latent_upscale_model_loader(name)
    return model


def _upsample(env: Environment, samples: dict, model, vae):
    with running_node("LTXVLatentUpsampler", "2", env):
        (out,) = ltxv_latent_upsampler(samples, model, vae)
    return out


def _video(frames: int = 2, h: int = 2, w: int = 3) -> torch.Tensor:
    return torch.randn(1, fx.LATENT_CHANNELS, frames, h, w, generator=torch.Generator().manual_seed(4))


def test_the_loader_lists_the_folder_and_loads_by_kind(env):
    assert _model_files(env) == ["hunyuanvideo15_latent_upsampler_1080p.safetensors",
                                 "ltx-2-spatial-upscaler-x2-1.0.safetensors", "ltxv-temporal-upscaler-0.9.8.safetensors"]
    spatial = _load(env, "ltx-2-spatial-upscaler-x2-1.0.safetensors")
    assert spatial.kind.name == "ltx" and spatial.config.kind() == "spatial x2 (rational)"
    assert spatial.model_dtype() == torch.float32  # the CPU's VAE dtype, as ComfyUI's vae_dtype
    assert _load(env, "ltxv-temporal-upscaler-0.9.8.safetensors").config.factors == (2.0, 1.0)


def test_the_loader_refuses_with_node_errors(env):
    with pytest.raises(NodeInputError, match="model_name"):
        _load(env, "missing.safetensors")
    with pytest.raises(NodeInputError, match="HunyuanVideo 1.5 1080p latent upsampler: 'conv_in.conv.weight' is missing"):
        _load(env, "hunyuanvideo15_latent_upsampler_1080p.safetensors")


def test_upsampler_works_in_the_vaes_raw_latent_space(env, vae):
    model = _load(env, "ltx-2-spatial-upscaler-x2-1.0.safetensors")
    video = _video()
    mask = torch.ones(1, 1, 2, 2, 3)
    out = _upsample(env, {"samples": video, "noise_mask": mask, "batch_index": [0]}, model, vae)
    assert out["samples"].shape == (1, fx.LATENT_CHANNELS, 2, 4, 6) and out["samples"].dtype == torch.float32
    assert "noise_mask" not in out and out["batch_index"] == [0]  # ComfyUI drops the mask, keeps the rest
    statistics = vae.first_stage_model.per_channel_statistics
    with torch.no_grad():
        want = statistics.normalize(model.model(statistics.un_normalize(video)))
    torch.testing.assert_close(out["samples"], want)
    assert not torch.allclose(out["samples"], model.upsample(video), atol=1e-3)  # the statistics are applied


def test_audio_video_latents_have_their_video_part_upscaled(env, vae):
    model = _load(env, "ltxv-temporal-upscaler-0.9.8.safetensors")
    video, audio = _video(frames=3), torch.randn(1, 8, 5, 16)
    out = _upsample(env, {"samples": NestedTensor([video, audio]), "noise_mask": NestedTensor([video, audio])},
                    model, vae)
    upscaled, kept = out["samples"].unbind()
    assert upscaled.shape == (1, fx.LATENT_CHANNELS, 5, 2, 3) and kept is audio and "noise_mask" not in out
    torch.testing.assert_close(upscaled, _upsample(env, {"samples": video}, model, vae)["samples"])


def test_upsampler_refuses_what_it_cannot_run(env, vae):
    model = _load(env, "ltx-2-spatial-upscaler-x2-1.0.safetensors")
    with pytest.raises(NodeInputError, match="upscale_model"):
        _upsample(env, {"samples": _video()}, object(), vae)
    with pytest.raises(NodeInputError, match="an LTX video VAE"):
        _upsample(env, {"samples": _video()}, model, object())
    with pytest.raises(NodeInputError, match=r"samples.*video LATENT"):
        _upsample(env, {"samples": torch.zeros(1, 128, 2, 3)}, model, vae)
    with pytest.raises(NodeInputError, match=r"takes a video latent \[B, 128, F, H, W\]"):
        _upsample(env, {"samples": torch.zeros(1, 16, 2, 2, 3)}, model, vae)


def test_the_vae_precision_flag_and_the_memory_manager_are_honoured(env, vae):
    from comfy_core.memory import MemoryManager

    memory = MemoryManager("cpu")
    flagged = Environment.rooted_at(env.output_dir.parent, dtype_policy={"vae": "bf16"}, memory=memory)
    model = _load(flagged, "ltx-2-spatial-upscaler-x2-1.0.safetensors")
    assert model.model_dtype() == torch.bfloat16 and model.memory is memory  # --bf16-vae, tracked
    video = _video()
    out = _upsample(flagged, {"samples": video}, model, vae)["samples"]
    assert out.dtype == torch.float32 and out.shape == (1, fx.LATENT_CHANNELS, 2, 4, 6)
    exact = _upsample(env, {"samples": video}, _load(env, "ltx-2-spatial-upscaler-x2-1.0.safetensors"), vae)
    torch.testing.assert_close(out, exact["samples"], atol=0.1, rtol=0.05)


def test_a_workflow_upscales_an_ltx_video_latent(tmp_path):
    import asyncio

    from tests.fixtures.ltxv_files import write_tiny_ltxv_vae
    from tests.nodes.workflow_2026 import Runner, node

    runner = Runner(tmp_path)
    models = tmp_path / "models"
    fx.write_tiny_latent_upsampler(models / "latent_upscale_models" / "ltx-2.3-spatial-upscaler-x2-1.1.safetensors")
    write_tiny_ltxv_vae(models / "vae" / "ltx_vae.safetensors")
    prompt = {
        "1": node("EmptyLTXVLatentVideo", width=64, height=96, length=9, batch_size=1),
        "2": node("LatentUpscaleModelLoader", model_name="ltx-2.3-spatial-upscaler-x2-1.1.safetensors"),
        "3": node("VAELoader", vae_name="ltx_vae.safetensors"),
        "4": node("LTXVLatentUpsampler", samples=["1", 0], upscale_model=["2", 0], vae=["3", 0]),
        "5": node("SaveLatent", samples=["4", 0], filename_prefix="latents/up"),
    }
    asyncio.run(runner.run(prompt))
    from safetensors.torch import load_file

    (saved,) = (tmp_path / "output" / "latents").glob("up*.latent")
    assert load_file(str(saved))["latent_tensor"].shape == (1, fx.LATENT_CHANNELS, 2, 6, 4)
