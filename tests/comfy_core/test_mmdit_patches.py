"""MMDiT patch points: ComfyUI's `patches_replace["dit"][("double_block", i)]`, ControlNet
residuals (`control["output"]`), the per-patcher attention backend and odd latent sizes."""
from __future__ import annotations

import pytest
import torch

from comfy_core.attention import use_backend
from comfy_core.families.sd3.mmdit import MMDiT, MMDiTConfig, MMDiTInputError
from tests.fixtures.mmdit_files import tiny_mmdit_state_dict


def _model(variant="sd35_medium") -> MMDiT:
    state = tiny_mmdit_state_dict(variant, seed=5, prefix="")
    with torch.device("meta"):
        model = MMDiT.from_config(MMDiTConfig.detect_from_weights(state, prefix=""))
    model.load_state_dict(state, strict=True, assign=True)
    return model.eval()


def _inputs(h=8, w=8):
    gen = torch.Generator().manual_seed(1)
    return (torch.randn(2, 16, h, w, generator=gen), torch.tensor([700.0, 50.0]),
            torch.randn(2, 6, 64, generator=gen), torch.randn(2, 64, generator=gen))


def _run(model, options=None, control=None, h=8, w=8):
    x, t, context, y = _inputs(h, w)
    with torch.no_grad():
        return model(x, t, context=context, y=y, control=control, transformer_options=options or {})


def _replace(i, fn):
    return {"patches_replace": {"dit": {("double_block", i): fn}}}


def test_pass_through_replacement_is_bit_exact():
    model = _model()
    seen = []

    def through(args, extra):
        seen.append((sorted(args), args["img"].shape, args["txt"].shape, args["vec"].shape))
        return extra["original_block"](args)

    plain = _run(model)
    patched = _run(model, _replace(1, through))
    assert torch.equal(plain, patched)
    assert seen == [(["img", "transformer_options", "txt", "vec"], (2, 16, 128), (2, 6, 128), (2, 128))]


@pytest.mark.parametrize("block", [0, 1])
def test_skipping_a_block_changes_the_output(block):
    model = _model()
    skip = _replace(block, lambda args, extra: args)  # SkipLayerGuidanceDiT's skip: inputs returned as is
    assert (_run(model) - _run(model, skip)).abs().max() > 1e-3


def test_control_residual_is_added_to_image_tokens_after_its_block():
    model = _model()
    residual = 0.3 * torch.randn(2, 16, 128, generator=torch.Generator().manual_seed(2))

    def add_after(args, extra):
        out = extra["original_block"](args)
        return {"txt": out["txt"], "img": out["img"] + residual}

    with_control = _run(model, control={"output": [residual, None]})
    assert torch.equal(with_control, _run(model, _replace(0, add_after)))
    assert (with_control - _run(model)).abs().max() > 1e-3
    # None entries and a shorter list leave the other blocks alone
    assert torch.equal(_run(model, control={"output": [None]}), _run(model))


def test_attention_runs_on_the_backend_in_force_and_honours_the_override():
    model = _model()
    calls = []

    def override(func, *args, **kwargs):
        calls.append(args[0].shape)
        return func(*args, **kwargs)

    plain = _run(model)
    assert torch.equal(_run(model, {"optimized_attention_override": override}), plain)
    # block 0 (MMDiT-X): joint attention and attn2; block 1: joint attention only
    assert calls == [(2, 22, 128), (2, 16, 128), (2, 22, 128)]
    with use_backend("naive"):
        naive = _run(model)
    assert (naive - plain).abs().max() < 1e-4
    # an invalid option raises inside the chosen kernel: proof the blocks call that backend
    with use_backend("sub_quadratic", query_chunk_size=0), pytest.raises(ValueError, match="query_chunk_size"):
        _run(model)


def test_odd_latent_sizes_are_padded_and_cropped_back():
    model = _model("sd3")
    out = _run(model, h=7, w=9)
    assert out.shape == (2, 16, 7, 9) and torch.isfinite(out).all()


def test_a_latent_larger_than_the_position_table_is_a_typed_error():
    with pytest.raises(MMDiTInputError, match="exceeds the position embedding"):
        _run(_model("sd3"), h=18, w=8)


def test_builds_from_a_comfy_ops_namespace_storing_bf16_computing_fp32():
    from compat.ldm_ops import manual_cast

    state = tiny_mmdit_state_dict("sd35_medium", seed=5, prefix="")
    rounded = {k: v.to(torch.bfloat16) for k, v in state.items()}
    config = MMDiTConfig.detect_from_weights(state, prefix="")
    with torch.device("meta"):
        model = MMDiT.from_config(config, operations=manual_cast, dtype=torch.bfloat16)
        reference = MMDiT.from_config(config)
    model.load_state_dict(rounded, strict=True, assign=True)
    reference.load_state_dict({k: v.float() for k, v in rounded.items()}, strict=True, assign=True)
    assert isinstance(model.joint_blocks[0].x_block.attn.qkv, manual_cast.Linear) and model.dtype == torch.bfloat16
    out = _run(model.eval())
    assert out.dtype == torch.float32
    assert (out - _run(reference.eval())).abs().max() < 1e-5
