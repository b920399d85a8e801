"""Tiled VAE maths (tile spans, feathering, the three blended tilings) on plain functions, and
VaePatcher.decode_tiled / encode_tiled on the tiny SD1 VAE."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from comfy_core.loading import load_checkpoint
from comfy_core.models.vae import VAEConfigError
from comfy_core.models.vae_tiling import (
    TilingError,
    blended_tiles,
    crop_to_multiple,
    feather_ramp,
    three_tilings,
    tile_spans,
    tiled_pass,
)


def upscale8(z: torch.Tensor) -> torch.Tensor:
    """A pointwise 'decoder': every latent pixel becomes an 8x8 block of three channels."""
    return F.interpolate(z[:, :3], scale_factor=8, mode="nearest")


def downscale8(x: torch.Tensor) -> torch.Tensor:
    """A blockwise 'encoder': the mean of each 8x8 block, four channels."""
    pooled = F.avg_pool2d(x, 8)
    return torch.cat([pooled, pooled[:, :1]], dim=1)


# --- tile spans and feathering ------------------------------------------------------------------

def test_tile_spans_follow_comfyuis_stepping():
    assert tile_spans(50, 64, 8) == [(0, 50)]
    assert tile_spans(64, 64, 8) == [(0, 64)]
    assert tile_spans(70, 64, 8) == [(0, 64), (56, 14)]  # the last tile is cut at the border
    assert tile_spans(100, 40, 10) == [(0, 40), (30, 40), (60, 40)]
    assert tile_spans(10, 4, 0) == [(0, 4), (4, 4), (8, 2)]


@pytest.mark.parametrize("tile, overlap", [(8, 8), (4, 8), (0, 0), (8, -1)])
def test_tiles_that_cannot_cover_are_refused(tile, overlap):
    with pytest.raises(TilingError):
        tile_spans(100, tile, overlap)


def test_feather_ramp_rises_and_falls_linearly():
    assert feather_ramp(6, 2).tolist() == [0.5, 1.0, 1.0, 1.0, 1.0, 0.5]
    assert feather_ramp(8, 4).tolist() == [0.25, 0.5, 0.75, 1.0, 1.0, 0.75, 0.5, 0.25]
    assert feather_ramp(3, 2).tolist() == [0.5, 1.0, 0.5]  # both ramps meet in the middle
    assert feather_ramp(4, 4).tolist() == [1.0] * 4  # a feather that does not fit is dropped
    assert feather_ramp(4, 0).tolist() == [1.0] * 4


def test_three_tilings():
    assert three_tilings(64, 32) == [(64, 32), (32, 64), (128, 16)]


# --- blending -------------------------------------------------------------------------------------

def test_overlap_fades_linearly_from_one_tile_to_the_next():
    # Each tile "decodes" to a constant: its index. Two 16-wide tiles overlapping by 8 columns.
    calls = []

    def constant(z: torch.Tensor) -> torch.Tensor:
        calls.append(z.shape[-1])
        return torch.full_like(z, float(len(calls) - 1))

    out = tiled_pass(torch.zeros(1, 1, 1, 24), constant, (8, 16), overlap=8, scale=1.0, out_channels=1)
    assert calls == [16, 16]
    row = out[0, 0, 0]
    assert torch.equal(row[:8], torch.zeros(8)) and torch.equal(row[16:], torch.ones(8))
    # In the overlap, tile 0 weighs (16 - c) / 8 and tile 1 (c - 7) / 8: the blend is (c - 7) / 9.
    expected = (torch.arange(8, 16, dtype=torch.float32) - 7) / 9
    torch.testing.assert_close(row[8:16], expected)


@pytest.mark.parametrize("height, width, tile_h, tile_w, overlap", [
    (13, 9, 4, 4, 1), (40, 48, 16, 16, 4), (7, 30, 8, 6, 2), (33, 17, 16, 8, 0)])
def test_a_pointwise_function_is_unchanged_by_any_tiling(height, width, tile_h, tile_w, overlap):
    z = torch.randn(2, 4, height, width)
    out = blended_tiles(z, upscale8, tile_h, tile_w, overlap, scale=8, out_channels=3)
    assert out.shape == (2, 3, height * 8, width * 8)
    torch.testing.assert_close(out, upscale8(z), rtol=1e-5, atol=1e-6)


def test_a_blockwise_downscale_is_unchanged_by_tiling():
    x = torch.randn(1, 3, 96, 72)
    out = blended_tiles(x, downscale8, 64, 64, 16, scale=1 / 8, out_channels=4)
    assert out.shape == (1, 4, 12, 9)
    torch.testing.assert_close(out, downscale8(x), rtol=1e-5, atol=1e-6)


def test_the_result_is_the_mean_of_the_three_tilings():
    def tile_mean(z: torch.Tensor) -> torch.Tensor:  # depends on the tile: tilings disagree
        return upscale8(z) + z.mean()

    z = torch.randn(1, 3, 20, 20)
    passes = [tiled_pass(z, tile_mean, tile, 2, 8, 3) for tile in three_tilings(8, 8)]
    torch.testing.assert_close(blended_tiles(z, tile_mean, 8, 8, 2, 8, 3), sum(passes) / 3)


def test_an_input_that_fits_the_tiles_is_mapped_once_per_element_exactly():
    calls = []

    def fn(z):
        calls.append(tuple(z.shape))
        return upscale8(z) * 1.1

    z = torch.randn(3, 4, 5, 7)
    out = blended_tiles(z, fn, 16, 16, 4, 8, 3)  # every tiling sees one whole tile: one run
    assert calls == [(1, 4, 5, 7)] * 3
    assert torch.equal(out, fn(z))


def test_progress_counts_every_tile_of_every_distinct_tiling():
    seen = []
    z = torch.randn(2, 4, 20, 12)
    blended_tiles(z, upscale8, 8, 8, 2, 8, 3, progress=lambda done, total: seen.append((done, total)))
    # (8, 8): 3 x 2 tiles; (4, 16): 9 x 1; (16, 4): 2 x 5 -> 25 per element, 50 in all.
    assert seen == [(i, 50) for i in range(1, 51)]


def test_samples_must_be_four_dimensional():
    with pytest.raises(TilingError, match="B, C, H, W"):
        blended_tiles(torch.zeros(4, 8, 8), upscale8, 8, 8, 2, 8, 3)


def test_crop_to_multiple_is_centred():
    pixels = torch.arange(13 * 19, dtype=torch.float32).reshape(1, 13, 19, 1)
    cropped = crop_to_multiple(pixels, 8)
    assert cropped.shape == (1, 8, 16, 1)
    assert torch.equal(cropped, pixels[:, 2:10, 1:17])  # offsets (13 % 8) // 2, (19 % 8) // 2
    exact = pixels[:, :8, :16]
    assert crop_to_multiple(exact, 8) is exact


# --- VaePatcher on the tiny SD1 VAE ---------------------------------------------------------------

@pytest.fixture(scope="module")
def vae(tiny_sd1_ckpt):
    return load_checkpoint(tiny_sd1_ckpt, output_clip=False)[2]


def test_tiles_covering_the_latent_equal_the_plain_decode_exactly(vae):
    z = torch.randn(2, 4, 13, 9, generator=torch.Generator().manual_seed(1))
    tiled = vae.decode_tiled(z, tile_x=32, tile_y=32, overlap=8)  # the half tile 16 still covers 13
    assert tiled.shape == (2, 104, 72, 3)
    assert torch.equal(tiled[:1], vae.decode(z[:1]))
    assert torch.equal(tiled[1:], vae.decode(z[1:]))


def test_tiled_decode_with_overlap_is_close_to_the_plain_decode(vae):
    # 24 x 40: wider than a 32 tile (and the 16 x 64 / 64 x 16 tilings cut both sides), at half
    # the cost of 40 x 48; smaller tiles would make the tile-local statistics below coarser.
    z = torch.randn(1, 4, 24, 40, generator=torch.Generator().manual_seed(0))
    plain = vae.decode(z)
    feathered = (vae.decode_tiled(z, 32, 32, 8) - plain).abs().mean().item()
    hard = (vae.decode_tiled(z, 32, 32, 0) - plain).abs().mean().item()
    # Measured on this random VAE (pixel std 0.25): 0.014-0.017 with an overlap of 8 over five
    # seeds, 0.038-0.041 without (40 x 48: 0.016-0.018 and 0.041-0.045). The difference is not a
    # seam: GroupNorm statistics and the mid-block attention see only the tile, and random
    # weights make them content-sensitive.
    assert feathered < 0.03
    assert feathered < 0.6 * hard


def test_tiled_decode_output_shapes_for_odd_sizes(vae):
    for h, w in ((1, 1), (7, 3), (13, 10)):  # 13 x 10: two tiles each way, the last ones cut
        assert vae.decode_tiled(torch.randn(1, 4, h, w), 8, 8, 2).shape == (1, h * 8, w * 8, 3)


def test_tiles_covering_the_image_equal_the_plain_encode_exactly(vae):
    pixels = torch.rand(2, 101, 77, 4, generator=torch.Generator().manual_seed(2))
    tiled = vae.encode_tiled(pixels, tile_x=256, tile_y=256, overlap=64)  # cropped to 96 x 72
    assert tiled.shape == (2, 4, 12, 9)
    assert torch.equal(tiled[:1], vae.encode(pixels[:1]))
    assert torch.equal(tiled[1:], vae.encode(pixels[1:]))


def test_tiled_encode_with_overlap_is_close_to_the_plain_encode(vae):
    # 192 x 288 pixels: wider than a 256 tile, the 128 x 512 / 512 x 128 tilings cut both sides.
    pixels = vae.decode(torch.randn(1, 4, 24, 36, generator=torch.Generator().manual_seed(0)))
    plain = vae.encode(pixels)
    feathered = (vae.encode_tiled(pixels, 256, 256, 64) - plain).abs().mean().item()
    hard = (vae.encode_tiled(pixels, 256, 256, 0) - plain).abs().mean().item()
    # Measured (latent std 0.54): 0.025-0.034 with an overlap of 64 pixels over five seeds,
    # 0.068-0.077 without (320 x 384: 0.029-0.034 and 0.068-0.081); same cause as for decoding.
    assert feathered < 0.06
    assert feathered < 0.6 * hard


def test_tiled_encode_output_shapes_for_odd_sizes(vae):
    for h, w in ((8, 8), (23, 9), (130, 70)):
        assert vae.encode_tiled(torch.rand(1, h, w, 3), 64, 64, 16).shape == (1, 4, h // 8, w // 8)


def test_bad_shapes_raise_vae_errors(vae):
    with pytest.raises(VAEConfigError, match="decode_tiled"):
        vae.decode_tiled(torch.zeros(1, 3, 8, 8))
    with pytest.raises(VAEConfigError, match="encode_tiled"):
        vae.encode_tiled(torch.zeros(1, 8, 8))
    with pytest.raises(VAEConfigError, match="smaller than 8x8"):
        vae.encode_tiled(torch.zeros(1, 4, 16, 3))


def test_the_tile_loop_runs_inside_one_application_of_the_patches(vae):
    clone = vae.clone()
    delta = torch.full_like(vae.model.decoder.conv_out.bias, 0.25)
    clone.add_patches({"decoder.conv_out.bias": delta})
    original = vae.model.decoder.conv_out.bias.detach().clone()
    entered, during = [], []
    real_applied = clone.applied

    def counting_applied(*args, **kwargs):
        entered.append(1)
        return real_applied(*args, **kwargs)

    clone.applied = counting_applied
    z = torch.randn(1, 4, 10, 10, generator=torch.Generator().manual_seed(3))
    clone.decode_tiled(z, 8, 8, 2, progress=lambda done, total: during.append(
        torch.equal(clone.model.decoder.conv_out.bias, original + delta)))
    # 12 tiles: (8, 8) 2 x 2, (4, 16) 4 x 1, (16, 4) 1 x 4, all inside one applied().
    assert len(entered) == 1 and len(during) == 12 and all(during)
    assert torch.equal(vae.model.decoder.conv_out.bias, original)  # restored afterwards
    # The patch shows in the result: the decoder's last bias moves every pixel before clamping.
    patched = clone.decode_tiled(z, 64, 64, 8)
    assert not torch.equal(patched, vae.decode_tiled(z, 64, 64, 8))
    assert torch.equal(patched, clone.decode(z))
