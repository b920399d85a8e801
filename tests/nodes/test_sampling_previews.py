"""KSampler live previews by preview method, end to end on tiny random checkpoints: TAESD
decoders from a temporary models/vae_approx/, chosen by the checkpoint's family."""
from __future__ import annotations

import pytest
import torch

from graph.context import NodeContext, reset_current, set_current
from nodes.environment import Environment
from nodes.sampling import ksampler
from tests.comfy_core.test_sampling_preview import write_taesd


def sample_previews(env: Environment, ckpt) -> list:
    from comfy_core.loading import load_checkpoint
    from nodes.conditioning import clip_text_encode

    model, clip, _ = load_checkpoint(ckpt, output_vae=False)
    positive, negative = clip_text_encode("a red cube", clip)[0], clip_text_encode("", clip)[0]
    previews: list = []
    ctx = NodeContext("p1", "3", "3", None, env, report=lambda v, m, p: previews.append(p))
    token = set_current(ctx)
    try:
        ksampler(model, 7, 2, 7.0, "euler", "normal", positive, negative, {"samples": torch.zeros(1, 4, 8, 8)}, 1.0)
    finally:
        reset_current(token)
    return previews


def test_taesd_previews_come_from_the_decoder_file_and_fall_back_without_it(tmp_path, tiny_sd1_ckpt):
    env = Environment.rooted_at(tmp_path, preview_method="taesd", preview_size=256)
    fallback = sample_previews(env, tiny_sd1_ckpt)
    assert [(f, s, i.size) for f, i, s in fallback] == [("JPEG", 256, (8, 8))] * 2  # latent2rgb
    write_taesd(tmp_path / "models" / "vae_approx", "taesd_decoder.safetensors")
    decoded = sample_previews(env, tiny_sd1_ckpt)
    assert [(f, s, i.size) for f, i, s in decoded] == [("JPEG", 256, (64, 64))] * 2  # 8x the latent
    for (_, rgb, _), (_, image, _) in zip(fallback, decoded):
        assert image.resize(rgb.size).tobytes() != rgb.tobytes()
    latent2rgb = sample_previews(Environment.rooted_at(tmp_path, preview_method="latent2rgb"), tiny_sd1_ckpt)
    assert [i.tobytes() for _, i, _ in latent2rgb] == [i.tobytes() for _, i, _ in fallback]
    assert sample_previews(Environment.rooted_at(tmp_path, preview_method="none"), tiny_sd1_ckpt) == [None, None]


def test_an_sdxl_model_needs_the_sdxl_decoder(tmp_path, tiny_sdxl_ckpt):
    env = Environment.rooted_at(tmp_path, preview_method="taesd")
    write_taesd(tmp_path / "models" / "vae_approx", "taesd_decoder.safetensors")
    assert {i.size for _, i, _ in sample_previews(env, tiny_sdxl_ckpt)} == {(8, 8)}
    write_taesd(tmp_path / "models" / "vae_approx", "taesdxl_decoder.safetensors", seed=5)
    assert {i.size for _, i, _ in sample_previews(env, tiny_sdxl_ckpt)} == {(64, 64)}


@pytest.mark.parametrize("method", ["auto", "latent2rgb"])
def test_auto_previews_are_latent2rgb_as_in_comfyui(tmp_path, tiny_sd1_ckpt, method):
    write_taesd(tmp_path / "models" / "vae_approx", "taesd_decoder.safetensors")
    env = Environment.rooted_at(tmp_path, preview_method=method)
    assert {(i.size, s) for _, i, s in sample_previews(env, tiny_sd1_ckpt)} == {((8, 8), 512)}
