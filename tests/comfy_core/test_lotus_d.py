"""Lotus-D (comfy_core/families/sd2/lotus.py): the SD 2 UNet with the 4-wide task label, loaded from
a diffusion-model file in ComfyUI's layout (UNETLoader), sampled as ComfyUI samples its `Lotus`
model: image-to-image (the latent in unscaled, the output the clean prediction), the label input
ComfyUI's `[sin 1, sin 0, cos 1, cos 0]`, conditioned on LotusConditioning's null prompt."""
from __future__ import annotations

import math

import pytest
import torch

from comfy_core.families.sd2.lotus import LABEL_WIDTH, null_prompt_embedding
from comfy_core.models.latent_formats import sd15_latent_format
from comfy_core.sampling.ksampler import sample_custom
from comfy_core.split.diffusion_model import load_diffusion_model
from tests.fixtures.dit_checkpoints import save
from tests.fixtures.template_models_lotus import tiny_lotus_d_state_dict


@pytest.fixture(scope="module")
def lotus(tmp_path_factory):
    path = save(tiny_lotus_d_state_dict(seed=3, dtype=torch.float16),
                tmp_path_factory.mktemp("lotus") / "lotus-depth-d-v1-1.safetensors")
    return load_diffusion_model(path)


def test_a_lotus_d_file_is_detected_as_comfyuis_lotus_d(lotus):
    model = lotus.model
    assert model.family.name == "lotus_d"
    assert model.model_sampling.prediction == "img_to_img"
    assert model.adm_channels == LABEL_WIDTH
    assert type(model.model_config).__name__ == "LotusD"
    assert model.model_config.unet_config["adm_in_channels"] == 4


def test_the_label_input_is_comfyuis_task_embedding(lotus):
    y = lotus.model.encode_adm(device="cpu")
    expected = torch.tensor([[math.sin(1.0), math.sin(0.0), math.cos(1.0), math.cos(0.0)]])
    assert torch.allclose(y, expected)


def test_the_templates_one_step_is_the_unets_clean_prediction_of_the_unscaled_latent(lotus):
    """The official template: SetFirstSigma 999, DisableNoise, one euler step: the result is the
    network's output for the encoded image (no input scaling, no noise), at timestep 999."""
    gen = torch.Generator().manual_seed(0)
    latent = torch.randn(1, 4, 16, 16, generator=gen)
    context = null_prompt_embedding()
    cond = [[context, {}]]
    ours = sample_custom(lotus, torch.zeros_like(latent), 1.0, "euler", torch.tensor([999.0, 0.0]), cond, cond,
                         latent)
    fmt = sd15_latent_format()
    network = lotus.model.diffusion_model
    task = torch.tensor([1.0, 0.0])
    y = torch.cat([task.sin(), task.cos()]).unsqueeze(0)
    with torch.no_grad():
        out = network(latent * fmt.scale_factor, torch.tensor([999]), context=context, y=y).float()
    expected = out / fmt.scale_factor
    assert (ours - expected).abs().max() < 1e-3 * expected.abs().max()
    # and not the plain SD 2 reading of the same step (eps with a scaled input)
    assert (ours - latent).abs().max() > 1e-2

