"""The SD3 and Flux.1 latent formats (comfy_core/models/latent_formats.py, ComfyUI's
`comfy/latent_formats.py: SD3, Flux`) and previews of 16-channel latents: latent2rgb through the
formats' factors and TAESD through 16-channel `taesd3_decoder` / `taef1_decoder` files."""
from __future__ import annotations

import importlib

import numpy as np
import pytest
import torch
from safetensors.torch import save_file

from comfy_core.folders import ModelFolders
from comfy_core.models.latent_formats import LatentFormat
from comfy_core.families.sd3.latent_format import SD3, sd3_latent_format
from comfy_core.families.flux.latent_format import FluxLatentFormat as Flux, flux_latent_format
from comfy_core.models.taesd import TAESDDecoder, load_taesd_decoder
from comfy_core.sampling.preview import (Latent2RGBPreviewer, PreviewError, TAESDPreviewer, find_taesd_decoder,
                                         latent_to_rgb, make_previewer)


@pytest.fixture
def folders(tmp_path):
    return ModelFolders.default(tmp_path / "models")


def write_taesd16(folder, name: str, seed: int = 0, width: int = 8) -> TAESDDecoder:
    """A random 16-channel TAESD decoder file (the taesd3 / taef1 layout, narrow)."""
    torch.manual_seed(seed)
    decoder = TAESDDecoder(latent_channels=16, width=width)
    with torch.no_grad():
        for p in decoder.parameters():
            p.copy_(torch.randn_like(p) * 0.2)
    folder.mkdir(parents=True, exist_ok=True)
    save_file(decoder.state_dict(), str(folder / name))
    return decoder.eval()


def test_formats_carry_comfyuis_constants():
    sd3, flux = sd3_latent_format(), flux_latent_format()
    assert (sd3.latent_channels, sd3.scale_factor, sd3.shift_factor, sd3.taesd_decoder_name) == \
        (16, 1.5305, 0.0609, "taesd3_decoder")
    assert (flux.latent_channels, flux.scale_factor, flux.shift_factor, flux.taesd_decoder_name) == \
        (16, 0.3611, 0.1159, "taef1_decoder")
    assert len(sd3.latent_rgb_factors) == len(flux.latent_rgb_factors) == 16
    assert sd3.latent_rgb_factors[0] == (-0.0922, -0.0175, 0.0749)
    assert sd3.latent_rgb_factors[15] == (-0.1448, -0.1463, -0.1189)
    assert flux.latent_rgb_factors[0] == (-0.0346, 0.0244, 0.0681)
    assert flux.latent_rgb_factors[15] == (-0.1262, -0.0982, -0.0778)
    assert sd3.latent_rgb_factors_bias == (0.2394, 0.2135, 0.1925)
    assert flux.latent_rgb_factors_bias == (-0.0329, -0.0718, -0.0851)
    # Constructible without arguments and equal by value, Flux a kind of SD3 as in ComfyUI.
    assert SD3() == sd3 and Flux() == flux and flux != sd3
    assert isinstance(flux, SD3) and isinstance(sd3, LatentFormat) and not isinstance(sd3, Flux)


@pytest.mark.parametrize("fmt", [SD3(), Flux()], ids=["sd3", "flux"])
def test_process_in_shifts_then_scales_and_process_out_inverts_it(fmt):
    raw = torch.randn(2, 16, 3, 4, generator=torch.Generator().manual_seed(0))
    model_space = fmt.process_in(raw)
    torch.testing.assert_close(model_space, (raw - fmt.shift_factor) * fmt.scale_factor)
    torch.testing.assert_close(fmt.process_in(torch.full((1, 16, 1, 1), fmt.shift_factor)), torch.zeros(1, 16, 1, 1))
    torch.testing.assert_close(fmt.process_out(model_space), raw, rtol=0, atol=1e-6)


def test_latent_to_rgb_of_hand_made_latents():
    # Zero latent -> the bias alone; one unit channel -> its factors plus the bias; then (v + 1) / 2.
    sd3_latent = torch.zeros(1, 16, 2, 3)
    sd3_latent[0, 2, 1, 2] = 1.0
    rgb = SD3().latent_to_rgb(sd3_latent)  # [B, h, w, 3]
    assert rgb.shape == (1, 2, 3, 3)
    torch.testing.assert_close(rgb[0, 0, 0], torch.tensor([0.6197, 0.60675, 0.59625]))
    torch.testing.assert_close(rgb[0, 1, 2], torch.tensor([0.7194, 0.6531, 0.61915]))
    flux_latent = torch.zeros(1, 16, 1, 2)
    flux_latent[0, 15, 0, 1] = 1.0
    rgb = Flux().latent_to_rgb(flux_latent)
    torch.testing.assert_close(rgb[0, 0, 0], torch.tensor([0.48355, 0.4641, 0.45745]))
    torch.testing.assert_close(rgb[0, 0, 1], torch.tensor([0.42045, 0.415, 0.41855]))


def test_latent2rgb_previewer_draws_16_channel_latents(folders):
    previewer = make_previewer("latent2rgb", Flux(), folders)
    assert isinstance(previewer, Latent2RGBPreviewer)
    fmt, image, _ = previewer.preview(torch.zeros(2, 16, 3, 5))
    assert fmt == "JPEG" and image.size == (5, 3)
    # ((bias + 1) / 2 * 255) truncated: 123.3, 118.3, 116.6.
    assert image.getpixel((4, 2)) == (123, 118, 116)
    x0 = torch.randn(1, 16, 4, 4)
    expected = (Flux().latent_to_rgb(x0)[0] * 255).to(torch.uint8)  # the format's own projection
    drawn = torch.from_numpy(np.array(previewer.preview(x0)[1])).to(torch.int16)  # [h, w, 3]
    assert (drawn - expected.to(torch.int16)).abs().max() <= 1  # float order may round one level apart
    with pytest.raises(PreviewError, match="4 latent channels but factors for 16"):
        latent_to_rgb(torch.zeros(1, 4, 2, 2), Flux().latent_rgb_factors, Flux().latent_rgb_factors_bias)


def test_taesd_16_channel_decoder_builds_from_the_files_shapes(tmp_path):
    source = write_taesd16(tmp_path, "taef1_decoder.safetensors", seed=1)
    loaded = load_taesd_decoder(tmp_path / "taef1_decoder.safetensors")
    assert (loaded.latent_channels, loaded.width) == (16, 8)
    latent = torch.randn(1, 16, 3, 2, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        out = loaded.decode(latent)
        assert out.shape == (1, 3, 24, 16)
        assert torch.equal(out, source.decode(latent))


def test_taesd_previews_pick_the_16_channel_decoder_of_the_format(folders, tmp_path):
    approx = tmp_path / "models" / "vae_approx"
    write_taesd16(approx, "taesd3_decoder.safetensors", seed=2)
    assert find_taesd_decoder(folders, Flux()) is None  # an SD3 decoder is no Flux one
    write_taesd16(approx, "taef1_decoder.safetensors", seed=3)
    assert find_taesd_decoder(folders, Flux()).name == "taef1_decoder.safetensors"
    assert find_taesd_decoder(folders, SD3()).name == "taesd3_decoder.safetensors"
    previewer = make_previewer("taesd", Flux(), folders)
    assert isinstance(previewer, TAESDPreviewer) and previewer.decoder.latent_channels == 16
    fmt, image, _ = previewer.preview(torch.randn(2, 16, 3, 5))
    assert fmt == "JPEG" and image.size == (40, 24)


def test_comfy_latent_formats_surface_has_sd3_and_flux():
    surface = importlib.import_module("compat.comfy_surface.comfy.latent_formats")
    assert surface.SD3() == SD3() and surface.Flux() == Flux()
    assert surface.Flux().latent_channels == 16 and isinstance(surface.Flux(), surface.SD3)
