"""`latent_preview.get_previewer` for packs with their own sampling loop: the server's preview
method, with TAESD decoders from models/vae_approx/ (compat/previews.py)."""
from __future__ import annotations

import numpy as np
import pytest
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


def test_latent2rgb_previewer_is_the_projection_with_bias_and_first_frame(session):
    import latent_preview

    factors = [[0.5, -0.25, 0.125], [0.0, 1.0, 0.0], [-1.0, 0.0, 0.5], [0.25, 0.25, 0.25]]
    bias = [0.1, -0.2, 0.05]
    x0 = torch.randn(2, 4, 3, 5, generator=torch.Generator().manual_seed(1))
    previewer = latent_preview.Latent2RGBPreviewer(factors, bias)
    assert isinstance(previewer, latent_preview.LatentPreviewer)
    assert previewer.latent_rgb_factors.shape == (3, 4)  # ComfyUI keeps them transposed
    rgb = torch.einsum("chw,cr->hwr", x0[0], torch.tensor(factors)) + torch.tensor(bias)
    expected = ((rgb + 1) / 2).clamp(0, 1).mul(255).to(torch.uint8)
    image = previewer.decode_latent_to_preview(x0)
    assert torch.equal(torch.tensor(np.array(image)), expected)
    video = torch.stack([x0, torch.zeros_like(x0)], dim=2)  # [B, C, T, h, w]: the first frame is x0
    assert np.array_equal(np.array(previewer.decode_latent_to_preview(video)), np.array(image))
    fmt, same, size = previewer.decode_latent_to_preview_image("PNG", x0)
    assert (fmt, size) == ("JPEG", latent_preview.MAX_PREVIEW_RESOLUTION) == ("JPEG", session.env.preview_size)


def test_taesd_previewer_impl_decodes_with_any_taesd(session, tmp_path):
    import latent_preview
    from comfy_core.models.taesd import load_taesd_decoder
    from comfy_core.sampling.preview import TAESDPreviewer

    write_taesd(tmp_path / "approx", "taesd_decoder.safetensors", seed=2)
    decoder = load_taesd_decoder(tmp_path / "approx" / "taesd_decoder.safetensors")
    x0 = torch.randn(2, 4, 4, 4, generator=torch.Generator().manual_seed(5))
    image = latent_preview.TAESDPreviewerImpl(decoder).decode_latent_to_preview(x0)
    assert image.size == (32, 32)
    assert np.array_equal(np.array(image), np.array(TAESDPreviewer(decoder).preview(x0)[1]))


def test_a_pack_previewer_subclass_and_the_settable_preview_method(session):
    import latent_preview
    from comfy.cli_args import LatentPreviewMethod, args
    from PIL import Image

    class Solid(latent_preview.LatentPreviewer):
        def decode_latent_to_preview(self, x0):
            return Image.new("RGB", (2, 2), (1, 2, 3))

    fmt, image, _size = Solid().decode_latent_to_preview_image("PNG", torch.zeros(1, 4, 2, 2))
    assert fmt == "JPEG" and image.getpixel((0, 0)) == (1, 2, 3)
    with pytest.raises(NotImplementedError, match="LatentPreviewer.decode_latent_to_preview"):
        latent_preview.LatentPreviewer().decode_latent_to_preview(torch.zeros(1, 4, 2, 2))

    assert latent_preview.LatentPreviewMethod is LatentPreviewMethod
    # ComfyUI-Manager's preview setting: the server's previews follow it
    args.preview_method = LatentPreviewMethod.NoPreviews
    assert session.env.preview_method == "none" and args.preview_method is LatentPreviewMethod.NoPreviews
    assert latent_preview.get_previewer("cpu", sd15_latent_format()) is None
    args.preview_method = latent_preview.LatentPreviewMethod.Latent2RGB
    assert isinstance(latent_preview.get_previewer("cpu", sd15_latent_format()), latent_preview.Latent2RGBPreviewer)
    with pytest.raises(ValueError):
        args.preview_method = "sparkles"
    with pytest.raises(AttributeError, match="only preview_method"):
        args.cpu = True


def test_impact_packs_own_taesd_previewer_path(session, tmp_path):
    """Impact-Pack's get_previewer: `TAESD(None, path, latent_channels=4).to(device)` in
    `TAESDPreviewerImpl`, the same pixels as the server's own TAESD previews."""
    from latent_preview import TAESD, TAESDPreviewerImpl

    from comfy_core.models.taesd import TAESDError, load_taesd_decoder
    from comfy_core.sampling.preview import TAESDPreviewer
    from comfy_core.models.taesd import TAESDEncoder
    from safetensors.torch import save_file

    write_taesd(tmp_path / "approx", "taesd_decoder.safetensors", seed=4)
    path = str(tmp_path / "approx" / "taesd_decoder.safetensors")
    taesd = TAESD(None, path, latent_channels=4).to("cpu")
    x0 = torch.randn(1, 4, 3, 3, generator=torch.Generator().manual_seed(9))
    ours = TAESDPreviewer(load_taesd_decoder(path)).preview(x0)[1]
    assert np.array_equal(np.array(TAESDPreviewerImpl(taesd).decode_latent_to_preview(x0)), np.array(ours))
    assert torch.equal(TAESD.unscale_latents(TAESD.scale_latents(torch.zeros(1))), torch.zeros(1))
    encoder_file = str(tmp_path / "taesd_encoder.safetensors")  # the pair encodes too (ComfyUI-bleh builds it)
    save_file(TAESDEncoder().state_dict(), encoder_file)
    assert TAESD(encoder_file, path).encode(torch.zeros(1, 3, 16, 16)).shape == (1, 4, 2, 2)
    with pytest.raises(TAESDError, match="asked for 16"):
        TAESD(None, path, latent_channels=16)
