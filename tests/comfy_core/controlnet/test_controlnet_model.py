"""The ControlNet network against diffusers' `ControlNetModel` on the same tiny random weights
(original layout converted by diffusers' own converter), and the loader's layouts and detection."""
from __future__ import annotations

import pytest
import torch

from comfy_core.controlnet.load import load_controlnet
from comfy_core.models.diffusion import size_embedding
from tests.fixtures.controlnets import controlnet_state_dict, diffusers_controlnet, write_controlnet

pytest.importorskip("diffusers")


def _inputs(family: str, batch: int = 2):
    gen = torch.Generator().manual_seed(7)
    context_dim = 128 if family == "sdxl" else 64
    x = torch.randn(batch, 4, 8, 8, generator=gen)
    hint = torch.rand(batch, 3, 64, 64, generator=gen)
    t = torch.tensor([999.0, 321.0][:batch])
    context = torch.randn(batch, 5, context_dim, generator=gen)
    return x, hint, t, context


@pytest.mark.parametrize("family", ["sd1", "sd2", "sdxl"])
def test_residuals_equal_diffusers_controlnet(tmp_path, family):
    sd = controlnet_state_dict(family)
    reference = diffusers_controlnet(family, sd)
    ours = load_controlnet(write_controlnet(tmp_path / "cn.safetensors", family, "pth")).control_model
    x, hint, t, context = _inputs(family)
    kwargs, y = {}, None
    if family == "sdxl":
        pooled = torch.randn(2, 64, generator=torch.Generator().manual_seed(3))
        values = [64.0, 64.0, 0.0, 0.0, 64.0, 64.0]
        y = torch.cat([pooled, size_embedding(values).unsqueeze(0).repeat(2, 1)], dim=1)
        kwargs["added_cond_kwargs"] = {"text_embeds": pooled, "time_ids": torch.tensor([values] * 2)}
    with torch.no_grad():
        down, mid = reference(x, t, context, hint, return_dict=False, **kwargs)
        got = ours(x=x, hint=hint, timesteps=t, context=context, y=y)
    assert len(got["output"]) == len(down)
    for a, b in zip(got["output"], down):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(got["middle"][0], mid, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("layout", ["bare", "diffusers"])
def test_every_layout_loads_the_same_network(tmp_path, layout):
    pth = load_controlnet(write_controlnet(tmp_path / "a.safetensors", "sd1", "pth")).control_model
    other = load_controlnet(write_controlnet(tmp_path / "b.safetensors", "sd1", layout)).control_model
    a, b = pth.state_dict(), other.state_dict()
    assert a.keys() == b.keys()
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_head_layout_follows_the_projection_kind(tmp_path):
    sd1 = load_controlnet(write_controlnet(tmp_path / "a.safetensors", "sd1", "pth")).control_model.config.unet
    sdxl = load_controlnet(write_controlnet(tmp_path / "b.safetensors", "sdxl", "pth")).control_model.config.unet
    assert (sd1.num_heads, sd1.use_linear_in_transformer) == (8, False)
    assert (sdxl.num_head_channels, sdxl.adm_in_channels, sdxl.transformer_depth) == (64, 64 + 6 * 256, (0, 0, 1, 1, 2, 2))


def test_weights_load_in_the_requested_dtype(tmp_path):
    cn = load_controlnet(write_controlnet(tmp_path / "a.safetensors", "sd1", "pth"), dtype=torch.float16)
    assert cn.control_model.dtype == torch.float16


def test_shuffle_files_pool_globally(tmp_path):
    cn = load_controlnet(write_controlnet(tmp_path / "control_v11e_sd15_shuffle.safetensors", "sd1", "pth"))
    assert cn.global_average_pooling is True


def test_a_file_that_is_no_controlnet_is_refused(tmp_path):
    from safetensors.torch import save_file

    from comfy_core.checkpoint.errors import MissingComponentError

    path = tmp_path / "x.safetensors"
    save_file({"foo.weight": torch.zeros(2)}, str(path))
    with pytest.raises(MissingComponentError, match="not a ControlNet"):
        load_controlnet(path)


def test_a_truncated_controlnet_names_the_missing_tensors(tmp_path):
    from safetensors.torch import save_file

    from comfy_core.checkpoint.errors import ShapeMismatchError

    sd = controlnet_state_dict("sd1")
    del sd["middle_block_out.0.weight"]
    path = tmp_path / "x.safetensors"
    save_file({"control_model." + k: v.contiguous() for k, v in sd.items()}, str(path))
    with pytest.raises(ShapeMismatchError, match="middle_block_out.0.weight"):
        load_controlnet(path)
