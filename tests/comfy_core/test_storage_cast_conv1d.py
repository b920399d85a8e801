"""fp8 storage with per-layer casts (`comfy_core.models.storage_cast`) covers 1-D convolutions,
as ComfyUI's manual-cast ops do: Wan 2.2 S2V's causal audio encoder (Conv1d layers) loaded by
UNETLoader with `weight_dtype` fp8_e4m3fn ran its convolutions on fp8 weights and a float32
input, a dtype error (found by bench/video_families.py)."""
from __future__ import annotations

import torch
from torch import nn

from comfy_core.models.storage_cast import cast_weights_at_run_time


def test_a_conv1d_casts_its_fp8_weight_and_bias_to_the_input():
    torch.manual_seed(0)
    conv = nn.Conv1d(4, 6, 3)
    want_weight, want_bias = conv.weight.detach().clone(), conv.bias.detach().clone()
    layer = nn.Sequential(conv).to(torch.float8_e4m3fn)
    assert cast_weights_at_run_time(layer) == 1
    x = torch.randn(1, 4, 9)
    out = layer(x)
    assert out.dtype == torch.float32
    stored_weight = want_weight.to(torch.float8_e4m3fn).float()
    stored_bias = want_bias.to(torch.float8_e4m3fn).float()
    torch.testing.assert_close(out, nn.functional.conv1d(x, stored_weight, stored_bias))
    assert conv.weight.dtype == torch.float8_e4m3fn  # still stored in fp8


def test_wan_s2v_runs_from_fp8_storage(tmp_path):
    from comfy_core.split.diffusion_model import load_diffusion_model
    from tests.fixtures.wan_files import write_tiny_wan

    patcher = load_diffusion_model(write_tiny_wan(tmp_path / "s2v.safetensors", "s2v"),
                                   weight_dtype=torch.float8_e4m3fn)
    model = patcher.model
    g = torch.Generator().manual_seed(0)
    x = torch.randn(1, 16, 2, 8, 8, generator=g)
    extra = model.extra_inputs(noise=x, device=x.device, audio_embed=torch.randn(1, 3, 32, 8, generator=g))
    with patcher.applied(), torch.no_grad():
        out = model.apply_model(x, torch.tensor([0.7]), c_crossattn=torch.randn(1, 6, 32, generator=g), **extra)
    assert out.shape == x.shape and torch.isfinite(out).all()
