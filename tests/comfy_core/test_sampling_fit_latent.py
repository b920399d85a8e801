"""The latent a sampler takes is fitted to the model first, as ComfyUI's
`comfy.sample.fix_empty_latent_channels`: an empty latent widened to the model's channels, a 4-D
latent given a frame axis for a model with 3-D latents; a latent with content is left alone."""
from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from comfy_core.sampling.guider import SamplingError, check_latent, fit_empty_latent, fit_latent_input

FLUX_LIKE = SimpleNamespace(latent_channels=16, latent_dimensions=2)
WAN_LIKE = SimpleNamespace(latent_channels=16, latent_dimensions=3)


def test_an_empty_latent_is_widened_to_the_models_channels():
    fitted = fit_empty_latent(FLUX_LIKE, torch.zeros(2, 4, 8, 8))
    assert fitted.shape == (2, 16, 8, 8) and not fitted.any()


def test_a_latent_with_content_keeps_its_channels_and_is_then_refused():
    latent = torch.ones(1, 4, 8, 8)
    assert fit_empty_latent(FLUX_LIKE, latent) is latent
    with pytest.raises(SamplingError, match="16-channel"):
        check_latent(SimpleNamespace(latent_format=FLUX_LIKE), latent)


def test_a_4d_latent_gets_a_frame_axis_for_a_model_with_3d_latents():
    fitted = fit_empty_latent(WAN_LIKE, torch.zeros(1, 16, 8, 8))
    assert fitted.shape == (1, 16, 1, 8, 8)
    check_latent(SimpleNamespace(latent_format=WAN_LIKE), fitted)
    image = torch.randn(1, 16, 8, 8)  # content too: only the axis is added
    torch.testing.assert_close(fit_empty_latent(WAN_LIKE, image)[:, :, 0], image)


def test_the_latent_dict_is_copied_not_changed():
    model = SimpleNamespace(get_model_object=lambda name: {"latent_format": WAN_LIKE}[name])
    mask = torch.ones(1, 8, 8)
    latent = {"samples": torch.zeros(1, 4, 8, 8), "noise_mask": mask}
    fitted = fit_latent_input(model, latent)
    assert fitted["samples"].shape == (1, 16, 1, 8, 8) and fitted["noise_mask"] is mask
    assert latent["samples"].shape == (1, 4, 8, 8)
    same = {"samples": torch.zeros(1, 16, 1, 8, 8)}
    assert fit_latent_input(model, same) is same


# --- today's ratios: a latent made at another ratio is resized to the model's ---

def test_an_empty_latent_made_at_1_8_is_halved_for_a_1_16_model():
    from comfy_core.families.flux2.latent_format import Flux2LatentFormat

    made = torch.zeros(2, 4, 16, 24)  # EmptyLatentImage at 192 x 128 px
    fitted = fit_empty_latent(Flux2LatentFormat(), made, downscale_ratio_spacial=8)
    assert fitted.shape == (2, 128, 8, 12) and not fitted.any()
    # without the ratio (0.3.64's LATENT) only the channels change, as before
    assert fit_empty_latent(Flux2LatentFormat(), made).shape == (2, 128, 16, 24)
    odd = fit_empty_latent(Flux2LatentFormat(), torch.zeros(1, 4, 13, 7), downscale_ratio_spacial=8)
    assert odd.shape == (1, 128, 6, 4)  # rounded (half to even), as ComfyUI's round()


def test_ratios_reach_the_sampler_from_the_latent_dict_and_content_is_never_resized():
    from comfy_core.families.flux2.latent_format import Flux2LatentFormat

    model = SimpleNamespace(get_model_object=lambda name: {"latent_format": Flux2LatentFormat()}[name])
    fitted = fit_latent_input(model, {"samples": torch.zeros(1, 4, 16, 16), "downscale_ratio_spacial": 8})
    assert fitted["samples"].shape == (1, 128, 8, 8)
    content = torch.ones(1, 128, 16, 16)
    assert fit_empty_latent(Flux2LatentFormat(), content, downscale_ratio_spacial=8) is content


def test_a_temporal_ratio_changes_the_frame_count_of_an_empty_video_latent():
    from comfy_core.families.wan.latent_format import wan21_latent_format

    wan = wan21_latent_format()  # 4 pixel frames a latent frame
    fitted = fit_empty_latent(wan, torch.zeros(1, 16, 6, 8, 8), downscale_ratio_temporal=8)
    assert fitted.shape == (1, 16, 12, 8, 8)
    assert fit_empty_latent(wan, torch.zeros(1, 16, 6, 8, 8), downscale_ratio_temporal=4).shape == (1, 16, 6, 8, 8)


def test_the_formats_own_fix_builds_minimax_h3s_nested_latent_from_an_empty_image_latent():
    from comfy_core.families.minimax_h3.latent_format import MiniMaxH3AV

    fitted = fit_empty_latent(MiniMaxH3AV(), torch.zeros(1, 4, 16, 24), downscale_ratio_spacial=8)
    video, audio = fitted.unbind()
    assert video.shape == (1, 24, 1, 8, 12) and audio.shape == (1, 32, 2, 2) and not video.any()


def test_empty_latent_image_says_its_ratio_and_packs_see_todays_signature():
    import inspect

    from compat.samplers_helpers import fix_empty_latent_channels
    from nodes.latent import empty_latent_image

    latent = empty_latent_image(192, 128, 1)[0]
    assert latent["downscale_ratio_spacial"] == 8 and latent["samples"].shape == (1, 4, 16, 24)
    assert list(inspect.signature(fix_empty_latent_channels).parameters) == [
        "model", "latent_image", "downscale_ratio_spacial", "downscale_ratio_temporal"]


def test_empty_video_and_sd3_latents_say_their_ratio_and_fit_a_1_16_video_model():
    from comfy_core.families.wan.latent_format import wan22_latent_format
    from nodes.sd3_nodes import empty_sd3_latent_image
    from nodes.video_latents import empty_hunyuan_latent_video

    video = empty_hunyuan_latent_video(256, 128, 9, 1)[0]  # [1, 16, 3, 16, 32] at 1/8
    assert video["downscale_ratio_spacial"] == 8
    fitted = fit_empty_latent(wan22_latent_format(), video["samples"], video["downscale_ratio_spacial"])
    assert fitted.shape == (1, 48, 3, 8, 16)  # Wan 2.2 5B: 48 channels at 1/16
    assert empty_sd3_latent_image(256, 128, 1)[0]["downscale_ratio_spacial"] == 8
