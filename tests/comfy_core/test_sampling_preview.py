"""Which previewer a preview method gives (comfy_core/sampling/preview.py, after ComfyUI's
`latent_preview.get_previewer`), and what each one draws."""
from __future__ import annotations

import logging

import pytest
import torch
from safetensors.torch import save_file

from comfy_core.folders import ModelFolders
from comfy_core.models.latent_formats import sd15_latent_format
from comfy_core.families.sdxl.latent_format import sdxl_latent_format
from comfy_core.models.taesd import TAESDDecoder
from comfy_core.sampling.preview import (Latent2RGBPreviewer, PreviewError, TAESDPreviewer, find_taesd_decoder,
                                         make_previewer)


def write_taesd(folder, name: str, seed: int = 0) -> None:
    """A random full-size TAESD decoder file, as the published ones are laid out."""
    torch.manual_seed(seed)
    decoder = TAESDDecoder()
    with torch.no_grad():
        for p in decoder.parameters():
            p.copy_(torch.randn_like(p) * 0.05)
    folder.mkdir(parents=True, exist_ok=True)
    save_file(decoder.state_dict(), str(folder / name))


@pytest.fixture
def folders(tmp_path):
    return ModelFolders.default(tmp_path / "models")


def test_methods_pick_comfyuis_previewers(folders, tmp_path, caplog):
    fmt = sd15_latent_format()
    assert make_previewer("none", fmt, folders) is None
    assert isinstance(make_previewer("latent2rgb", fmt, folders), Latent2RGBPreviewer)
    with caplog.at_level(logging.WARNING):
        fallback = make_previewer("taesd", fmt, folders)
    assert isinstance(fallback, Latent2RGBPreviewer)  # no file: latent2rgb, with a warning
    assert "vae_approx/taesd_decoder" in caplog.text
    write_taesd(tmp_path / "models" / "vae_approx", "taesd_decoder.safetensors")
    assert isinstance(make_previewer("taesd", fmt, folders), TAESDPreviewer)
    # ComfyUI 0.3.64 maps "auto" to latent2rgb, decoder file or not.
    assert isinstance(make_previewer("auto", fmt, folders), Latent2RGBPreviewer)
    with pytest.raises(PreviewError, match="preview method"):
        make_previewer("fast", fmt, folders)


def test_the_family_names_its_decoder_file(folders, tmp_path):
    approx = tmp_path / "models" / "vae_approx"
    write_taesd(approx, "taesd_decoder.pth.safetensors", seed=1)
    assert find_taesd_decoder(folders, sdxl_latent_format()) is None  # an SD1 decoder is no SDXL one
    write_taesd(approx, "taesdxl_decoder.safetensors", seed=2)
    assert find_taesd_decoder(folders, sdxl_latent_format()).name == "taesdxl_decoder.safetensors"
    assert find_taesd_decoder(folders, sd15_latent_format()).name == "taesd_decoder.pth.safetensors"


def test_taesd_previews_are_full_size_and_differ_from_latent2rgb(folders, tmp_path):
    write_taesd(tmp_path / "models" / "vae_approx", "taesd_decoder.safetensors")
    x0 = torch.randn(2, 4, 6, 5)
    fmt, image, size = make_previewer("taesd", sd15_latent_format(), folders, max_size=256).preview(x0)
    assert (fmt, size, image.size, image.mode) == ("JPEG", 256, (40, 48), "RGB")
    _, rgb, _ = make_previewer("latent2rgb", sd15_latent_format(), folders).preview(x0)
    assert rgb.size == (5, 6)
    assert image.resize(rgb.size).tobytes() != rgb.tobytes()
