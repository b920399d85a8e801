"""The tiny-checkpoint generator's key/shape enumeration, checked at full size against the
published facts (reference/dependencies.md sec. 4.1: key and parameter counts of the real files)."""
from __future__ import annotations

import math

import torch

from tests.fixtures.checkpoints import (
    FAMILIES,
    _UNetArch,
    _VAEArch,
    hf_clip_shapes,
    open_clip_shapes,
    tiny_state_dict,
    unet_shapes,
    vae_shapes,
)

SD_IN, SD_OUT = (1, 1, 1, 1, 1, 1, 0, 0), (0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 1)
VAE = _VAEArch(ch=128, ch_mult=(1, 2, 4, 4), num_res_blocks=2)


def _params(shapes: dict) -> int:
    return sum(math.prod(s) for s in shapes.values())


def test_sd15_full_size_layout():
    unet = unet_shapes(_UNetArch(320, (1, 2, 4, 4), 2, SD_IN, 1, SD_OUT, 768, linear_proj=False))
    vae = vae_shapes(VAE)
    text = hf_clip_shapes("cond_stage_model.transformer.", 768, 12)
    assert (_params(unet), _params(vae), _params(text)) == (859_520_964, 83_653_863, 123_060_480)
    assert len(unet) + len(vae) + len(text) + 1 + 12 + 2 == 1145  # + position_ids, schedule, ema


def test_sd2_and_sdxl_full_size_layout():
    unet = unet_shapes(_UNetArch(320, (1, 2, 4, 4), 2, SD_IN, 1, SD_OUT, 1024, linear_proj=True))
    text = open_clip_shapes("cond_stage_model.model.", 1024, 24, 1024)
    assert (_params(unet), _params(text)) == (865_910_724, 354_032_641)
    assert len(unet) + len(vae_shapes(VAE)) + len(text) + 12 + 2 == 1242
    xl = unet_shapes(_UNetArch(320, (1, 2, 4), 2, (0, 0, 2, 2, 10, 10), 10, (10, 10, 10, 2, 2, 2, 0, 0, 0),
                               2048, linear_proj=True, adm_in_channels=2816))
    text = {**hf_clip_shapes("conditioner.embedders.0.transformer.", 768, 12),
            **open_clip_shapes("conditioner.embedders.1.model.", 1280, 32, 1280)}
    assert _params(xl) == 2_567_463_684 and _params(text) + 77 == 817_720_398
    assert len(xl) + len(vae_shapes(VAE)) + len(text) + 1 == 2515


def test_tiny_files_are_seeded_and_dtyped():
    a, b = tiny_state_dict("sd1", seed=5), tiny_state_dict("sd1", seed=5)
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    half = tiny_state_dict("sdxl", dtype=torch.float16)
    assert half["model.diffusion_model.out.2.weight"].dtype == torch.float16
    assert half["conditioner.embedders.0.transformer.text_model.embeddings.position_ids"].dtype == torch.int64
    assert set(FAMILIES) == {"sd1", "sd2", "sd2_v", "sdxl", "sdxl_refiner"}
