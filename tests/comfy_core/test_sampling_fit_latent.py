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
