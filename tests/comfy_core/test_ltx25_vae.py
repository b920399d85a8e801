"""LTX-2.4 / 2.5's diffusion-decoder video VAE (comfy_core/models/ltx_diffusion_vae.py): the tiled
neighbourhood attention against a per-query reference with NATTEN's window rule, the patch and
pixel-shuffle orders against einops with ComfyUI's patterns, and the tiny release-layout file
(tests/fixtures/template_models_ltx25.py) through the VAE loader: the encoder's latent, the
decoder's frame arithmetic (8 (T - 1) + 1 frames, 32x sides) and its fixed noise seed."""
from __future__ import annotations

from pathlib import Path

import pytest
import torch

from comfy_core.models.ltx_diffusion_vae import (LTXDiffusionVAE, LinearPixelShuffleUpsample,
                                                 neighborhood_attention_3d, patchify, unpatchify, window_starts)
from tests.fixtures.template_models_ltx25 import write_diffusion_vae

einops = pytest.importorskip("einops")


def _reference_na(q, k, v, kernel, scale):
    """Each query over its window, one at a time: per axis the window is the `kernel` positions
    starting at i - kernel // 2, moved inward to fit the axis (the whole axis when shorter)."""
    batch, t_len, h_len, w_len, heads, dim = q.shape
    out = torch.zeros_like(q)
    for t in range(t_len):
        for h in range(h_len):
            for w in range(w_len):
                ranges = []
                for axis, (i, length) in enumerate(((t, t_len), (h, h_len), (w, w_len))):
                    kernel_axis = kernel[axis]
                    size = min(kernel_axis, length)
                    start = min(max(i - kernel_axis // 2, 0), length - size)
                    ranges.append(list(range(start, start + size)))
                keys = k[:, ranges[0]][:, :, ranges[1]][:, :, :, ranges[2]].reshape(batch, -1, heads, dim)
                values = v[:, ranges[0]][:, :, ranges[1]][:, :, :, ranges[2]].reshape(batch, -1, heads, dim)
                logits = torch.einsum("bnd,bknd->bnk", q[:, t, h, w], keys) * scale
                out[:, t, h, w] = torch.einsum("bnk,bknd->bnd", logits.softmax(-1), values)
    return out


@pytest.mark.parametrize("kernel,tile", [((3, 3, 3), (2, 2, 3)), ((3, 5, 7), (1, 3, 2)), ((5, 3, 3), (4, 8, 8))])
def test_neighborhood_attention_equals_the_per_query_windows(kernel, tile) -> None:
    generator = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 4, 5, 6, 2, 4, generator=generator) for _ in range(3))
    out = neighborhood_attention_3d(q, k, v, kernel, 0.5, tile=tile)
    torch.testing.assert_close(out, _reference_na(q, k, v, kernel, 0.5), rtol=1e-5, atol=1e-5)


def test_windows_shift_inward_at_the_borders() -> None:
    starts, size = window_starts(7, 3)
    assert size == 3 and starts.tolist() == [0, 0, 1, 2, 3, 4, 4]
    starts, size = window_starts(2, 5)  # shorter than the kernel: the whole axis
    assert size == 2 and starts.tolist() == [0, 0]


def test_patch_and_pixel_shuffle_orders_are_comfyuis() -> None:
    x = torch.randn(2, 3, 2, 8, 12)
    expected = einops.rearrange(x, "b c (f p) (h q) (w r) -> b (c p r q) f h w", p=1, q=4, r=4)
    torch.testing.assert_close(patchify(x, 4), expected)
    torch.testing.assert_close(unpatchify(expected, 4), x)
    up = LinearPixelShuffleUpsample(6, (2, 1, 2), 2)
    y = torch.randn(1, 3, 2, 2, 6)
    widened = up.proj(y)
    reference = einops.rearrange(widened, "b t h w (c p1 p2 p3) -> b (t p1) (h p2) (w p3) c", p1=2, p2=1, p3=2)[:, 1:]
    torch.testing.assert_close(up(y), reference)


def test_the_tiny_release_file_loads_encodes_and_decodes(tmp_path: Path) -> None:
    from comfy_core.patching.vae_build import vae_module_from

    path = tmp_path / "ltx-2.5-video-vae-bf16.safetensors"
    write_diffusion_vae(path, seed=1)
    vae = vae_module_from(path)
    assert isinstance(vae, LTXDiffusionVAE)
    assert (vae.downscale_ratio, vae.temporal_ratio, vae.latent_channels) == (32, 8, 128)
    video = torch.rand(1, 9, 64, 96, 3)
    latent = vae.encode(video)
    assert latent.shape == (1, 128, 2, 2, 3)
    with torch.no_grad():
        first, again = vae.decode(latent), vae.decode(latent)
    assert first.shape == (1, 9, 64, 96, 3)
    torch.testing.assert_close(first, again)  # ComfyUI's fixed noise seed: decoding is reproducible
    context = vae.decoder.context(vae.per_channel_statistics.un_normalize(latent.to(torch.float32)))
    assert context.shape[1:4] == (9, 16, 24)  # stage 5 at a quarter of the pixels, 8 (T - 1) + 1 frames
