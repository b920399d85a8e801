"""`latent_preview.get_previewer` for packs with their own sampling loop: the server's preview
method, with TAESD decoders from models/vae_approx/ (compat/previews.py)."""
from __future__ import annotations

import torch

from comfy_core.models.latent_formats import sd15_latent_format
from tests.comfy_core.test_sampling_preview import write_taesd


def test_get_previewer_follows_the_preview_method(session, tmp_path):
    import latent_preview

    x0 = torch.randn(1, 4, 4, 4)
    session.env.preview_method = "none"
    assert latent_preview.get_previewer("cpu", sd15_latent_format()) is None
    session.env.preview_method = "taesd"
    fmt, image, size = latent_preview.get_previewer("cpu", sd15_latent_format()).decode_latent_to_preview_image("PNG", x0)
    assert (fmt, size, image.size) == ("JPEG", 512, (4, 4))  # no decoder file: latent2rgb
    write_taesd(tmp_path / "models" / "vae_approx", "taesd_decoder.safetensors")
    previewer = latent_preview.get_previewer("cpu", sd15_latent_format())
    assert previewer.decode_latent_to_preview(x0).size == (32, 32)
    assert latent_preview.preview_to_image(torch.zeros(2, 3, 3)).getpixel((0, 0)) == (127, 127, 127)
