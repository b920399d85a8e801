"""ComfyUI's `comfy.text_encoders.sd3_clip` / `flux` / `t5` names on our runtime: a loaded SD3 or
Flux CLIP is an instance of the classes a pack imports (the dit_pack fixture, Easy-Use's checks),
its T5 tower and tokenizer too, and the helpers keep ComfyUI's behaviour. The MMDiT file's helpers
(`comfy.ldm.modules.diffusionmodules.mmdit`, `comfy.ldm.common_dit`) are checked here as well."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from tests.compat.api_pack_support import import_api_pack
from tests.fixtures.dit_checkpoints import flux_state_dict, save, sd3_state_dict


@pytest.fixture
def dit_pack(session):  # noqa: ANN001, ANN201
    yield from import_api_pack("dit_pack")


def _clip(state: dict, path) -> object:  # noqa: ANN001
    from comfy_core.loading import load_checkpoint

    _, clip, _ = load_checkpoint(save(state, path), output_vae=False)
    return clip


@pytest.fixture(scope="module")
def flux_clip(tmp_path_factory):  # noqa: ANN001, ANN201
    return _clip(flux_state_dict(), tmp_path_factory.mktemp("flux") / "flux.safetensors")


@pytest.fixture(scope="module")
def sd3_clip(tmp_path_factory):  # noqa: ANN001, ANN201
    return _clip(sd3_state_dict(), tmp_path_factory.mktemp("sd3") / "sd3.safetensors")


def test_loaded_clips_are_the_classes_packs_import(dit_pack, flux_clip, sd3_clip) -> None:  # noqa: ANN001
    assert dit_pack.describe_clip(flux_clip) == {
        "sd3": False, "flux": True, "t5_model": True, "t5_transformer": True, "sd3_tokenizer": False,
        "flux_tokenizer": True, "t5_tokenizer": True, "t5_min_length": 256}
    assert dit_pack.describe_clip(sd3_clip) == {
        "sd3": True, "flux": False, "t5_model": True, "t5_transformer": True, "sd3_tokenizer": True,
        "flux_tokenizer": False, "t5_tokenizer": True, "t5_min_length": 77}


def test_t5_module_classes_are_the_towers_layers(session, sd3_clip) -> None:  # noqa: ANN001
    import comfy.text_encoders.t5 as t5

    modules = list(sd3_clip.cond_stage_model.t5xxl.transformer.modules())
    for cls in (t5.T5Stack, t5.T5Block, t5.T5LayerNorm, t5.T5Attention, t5.T5LayerFF):
        assert any(isinstance(m, cls) for m in modules), cls.__name__
    assert not isinstance(sd3_clip.cond_stage_model.clip_l, t5.T5)


def test_t5_xxl_detect_reports_dtypes(session) -> None:  # noqa: ANN001
    from comfy.text_encoders.sd3_clip import t5_xxl_detect

    state = {k: v.to(torch.float16) for k, v in sd3_state_dict().items() if k.startswith("text_encoders.t5xxl.")}
    assert t5_xxl_detect(state, "text_encoders.t5xxl.transformer.") == {"dtype_t5": torch.float16}
    state["text_encoders.t5xxl.transformer.scaled_fp8"] = torch.empty(0, dtype=torch.float8_e4m3fn)
    assert t5_xxl_detect(state, "text_encoders.t5xxl.transformer.")["t5xxl_scaled_fp8"] == torch.float8_e4m3fn
    assert t5_xxl_detect(state, "text_encoders.clip_l.transformer.") == {}


def test_mmdit_numpy_tables_match_the_torch_table(session) -> None:  # noqa: ANN001
    import comfy.ldm.modules.diffusionmodules.mmdit as mmdit

    table = mmdit.get_2d_sincos_pos_embed(16, 4)
    assert table.shape == (16, 16)
    # column-major halves: token (row r, col c) = [sincos(c), sincos(r)]
    cols = mmdit.get_1d_sincos_pos_embed_from_grid(8, np.arange(4.0))
    assert np.allclose(table[1 * 4 + 2], np.concatenate([cols[2], cols[1]]))
    assert np.allclose(table[5, :4], np.sin([1.0 * 10000 ** (-i / 4) for i in range(4)]))
    torch_1d = mmdit.get_1d_sincos_pos_embed_from_grid_torch(8, torch.arange(4.0), dtype=torch.float64)
    assert torch.allclose(torch_1d, torch.from_numpy(cols))
    shifted = mmdit.get_2d_sincos_pos_embed(16, 4, cls_token=True, extra_tokens=1, scaling_factor=2.0, offset=0.5)
    assert shifted.shape == (17, 16) and not shifted[0].any()
    axis = np.arange(4.0) / 2.0 - 0.5
    assert np.allclose(shifted[1 + 4 + 3], np.concatenate(
        [mmdit.get_1d_sincos_pos_embed_from_grid(8, axis)[3], mmdit.get_1d_sincos_pos_embed_from_grid(8, axis)[1]]))


def test_mmdit_helpers_keep_comfyuis_behaviour(session, dit_pack) -> None:  # noqa: ANN001
    import comfy.ldm.common_dit as common_dit
    import comfy.ldm.modules.diffusionmodules.mmdit as mmdit

    x = torch.randn(2, 3, 8)
    g1, g2, a1, a2 = torch.randn(2, 8), torch.randn(2, 8), torch.randn(2, 3, 8), torch.randn(2, 3, 8)
    assert torch.allclose(mmdit.gate_cat(x, g1, g2, a1, a2), x + g1[:, None] * a1 + g2[:, None] * a2, atol=1e-6)
    assert mmdit.default(None, 3) == 3 and mmdit.default(0, 3) == 0
    ff = mmdit.SwiGLUFeedForward(32, 96, 16)
    assert (ff.w1.out_features, ff.w2.in_features) == (64, 64)  # 2/3 of 96, a multiple of 16
    assert mmdit.SwiGLUFeedForward(32, 96, 48, ffn_dim_multiplier=1.5).w1.out_features == 96
    assert torch.allclose(common_dit.rms_norm(x), x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6), atol=1e-6)
    w = torch.randn(8)
    assert torch.allclose(common_dit.rms_norm(x, w, 1e-5), torch.nn.functional.rms_norm(x, (8,), w, 1e-5))
    norm = dit_pack.make_qk_norm(8)  # RMSNorm(dim, 1e-6): a learnt scale, as in ComfyUI
    assert norm.weight is not None and norm.weight.shape == (8,)
    padded = common_dit.pad_to_patch_size(torch.arange(6.0).reshape(1, 1, 2, 3), (2, 2))
    assert padded.shape == (1, 1, 2, 4) and torch.equal(padded[..., 3], padded[..., 0])
