"""Packs see an ACE-Step 1 model as ComfyUI's: `comfy.model_base.ACEStep`,
`comfy.supported_models.ACEStep` as its config, `comfy.latent_formats.ACEAudio`."""
from __future__ import annotations

import pytest

from tests.fixtures.ace1_files import write_ace1_diffusion_model


@pytest.fixture
def model(tmp_path):
    from comfy_core.split.diffusion_model import load_diffusion_model

    return load_diffusion_model(write_ace1_diffusion_model(tmp_path / "ace_step_v1_dit.safetensors"))


def test_ace_step_kinds_as_comfyui(session, model) -> None:
    import comfy.latent_formats
    import comfy.model_base
    import comfy.supported_models

    assert isinstance(model.model, comfy.model_base.ACEStep)
    assert not isinstance(model.model, comfy.model_base.StableAudio1)
    assert isinstance(model.model.model_config, comfy.supported_models.ACEStep)
    assert model.model.model_config.sampling_settings["shift"] == 3.0
    assert comfy.latent_formats.ACEAudio() == model.model.latent_format
    assert comfy.latent_formats.ACEAudio().latent_channels == 8
