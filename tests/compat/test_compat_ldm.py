"""ComfyUI's `comfy.ldm` / `comfy.ops` / `comfy.float` / `comfy.cldm` surface on our runtime:
the classes packs import are our model's classes, the module-level functions our UNet calls are
the replaceable globals, and a fixture pack's patches change the numbers exactly as they say."""
from __future__ import annotations

import pytest
import torch

from tests.compat.api_pack_support import import_api_pack, load_sd1_model, unet_output
@pytest.fixture
def ldm_pack(session):  # noqa: ANN001, ANN201
    yield from import_api_pack("ldm_pack")


@pytest.fixture
def model(tiny_sd1_ckpt):  # noqa: ANN001, ANN201
    return load_sd1_model(tiny_sd1_ckpt)




def test_surface_classes_are_our_model_classes(session) -> None:  # noqa: ANN001
    import comfy.cldm.cldm
    import comfy.ldm.models.autoencoder
    import comfy.ldm.modules.attention as attention
    import comfy.ldm.modules.diffusionmodules.model as vae_model
    import comfy.ldm.modules.diffusionmodules.openaimodel as openaimodel
    from comfy_core.controlnet.model import ControlNetModel
    from comfy_core.models import transformer, unet, unet_blocks, vae

    assert attention.SpatialTransformer is transformer.SpatialTransformer
    assert attention.BasicTransformerBlock is transformer.BasicTransformerBlock
    assert attention.CrossAttention is transformer.CrossAttention
    assert openaimodel.UNetModel is unet.UNetModel
    assert openaimodel.TimestepEmbedSequential is unet.TimestepEmbedSequential
    assert openaimodel.ResBlock is unet_blocks.ResBlock
    assert issubclass(openaimodel.ResBlock, openaimodel.TimestepBlock)
    assert vae_model.ResnetBlock is vae.VAEResBlock
    # ComfyUI's constructor-by-config adapter (compat/ldm_autoencoder.py); our loaders' VAEs are its instances
    ours = object.__new__(vae.AutoencoderKL)
    assert isinstance(ours, comfy.ldm.models.autoencoder.AutoencoderKL)
    assert comfy.cldm.cldm.ControlNet is ControlNetModel


def test_isinstance_checks_see_the_loaded_unets_modules(session, model) -> None:  # noqa: ANN001
    import comfy.ldm.modules.attention as attention
    import comfy.ldm.modules.diffusionmodules.openaimodel as openaimodel

    modules = list(model.model.diffusion_model.modules())
    assert isinstance(model.model.diffusion_model, openaimodel.UNetModel)
    assert any(isinstance(m, attention.BasicTransformerBlock) for m in modules)
    assert any(isinstance(m, attention.SpatialTransformer) for m in modules)
    assert any(isinstance(m, openaimodel.ResBlock) for m in modules)
    assert any(isinstance(m, openaimodel.Downsample) for m in modules)
    assert any(isinstance(m, openaimodel.Upsample) for m in modules)


def test_default_returning_attn2_replacement_is_bit_exact(ldm_pack, model) -> None:  # noqa: ANN001
    reference = unet_output(model)
    (same,) = ldm_pack.LdmAttn2Scale().patch(model, 1.0)
    assert same.model_options["transformer_options"]["patches_replace"]["attn2"]
    assert torch.equal(unet_output(same), reference)
    (zeroed,) = ldm_pack.LdmAttn2Scale().patch(model, 0.0)
    assert not torch.allclose(unet_output(zeroed), reference)


def test_attn2_replacement_scaling_changes_the_output_as_implied(ldm_pack, model) -> None:  # noqa: ANN001
    # With attn2's attention output scaled by s, to_out(s * a) = s * W a + bias: check against the
    # same computation done by hand on a lone block, through the pack's function.
    import comfy.ldm.modules.attention as attention

    block = attention.BasicTransformerBlock(32, 2, 16, context_dim=24).eval()
    x, ctx = torch.randn(1, 6, 32), torch.randn(1, 4, 24)
    captured = {}

    def replace(q, k, v, extra):  # noqa: ANN001, ANN202
        out = attention.optimized_attention(q, k, v, extra["n_heads"]) * 0.5
        captured["out"] = out
        return out

    options = {"block": ("input", 1), "block_index": 0, "patches_replace": {"attn2": {("input", 1, 0): replace}}}
    with torch.no_grad():
        y = block(x, ctx, options)
        h = block.attn1(block.norm1(x)) + x
        n = block.norm2(h)
        a = attention.optimized_attention(block.attn2.to_q(n), block.attn2.to_k(ctx), block.attn2.to_v(ctx), 2)
        h = block.attn2.to_out(0.5 * a) + h
        expected = block.ff(block.norm3(h)) + h
    assert torch.equal(y, expected)


def test_output_block_patch_scales_as_implied(ldm_pack, model) -> None:  # noqa: ANN001
    reference = unet_output(model)
    (one,) = ldm_pack.LdmOutputBlockScale().patch(model, 1.0)
    assert torch.equal(unet_output(one), reference)
    (zero,) = ldm_pack.LdmOutputBlockScale().patch(model, 0.0)
    # b = 0 drops the backbone at every output block: the result is the skips' path alone, which
    # differs from the unpatched one.
    assert not torch.allclose(unet_output(zero), reference)


def test_module_wide_optimized_attention_replacement_is_used_by_our_unet(ldm_pack, model) -> None:  # noqa: ANN001
    import comfy.ldm.modules.attention as attention
    from comfy_core import extension_points

    reference = unet_output(model)
    counting = ldm_pack.install_counting_attention()
    try:
        assert extension_points.current().attention is counting
        out = unet_output(model)
    finally:
        attention.optimized_attention = counting.previous
    assert extension_points.current().attention is counting.previous
    blocks = sum(isinstance(m, attention.BasicTransformerBlock) for m in model.model.diffusion_model.modules())
    assert counting.calls == 2 * blocks  # attn1 and attn2 of every block
    assert torch.equal(out, reference)


def test_replacing_forward_timestep_embed_reaches_our_unet(session, model) -> None:  # noqa: ANN001
    import comfy.ldm.modules.diffusionmodules.openaimodel as openaimodel

    original = openaimodel.forward_timestep_embed
    seen: list[tuple] = []

    def wrapped(ts, x, emb, context=None, transformer_options={}, *args, **kwargs):  # noqa: ANN001, ANN202, B006
        seen.append(transformer_options["block"])
        return original(ts, x, emb, context, transformer_options, *args, **kwargs)

    reference = unet_output(model)
    openaimodel.forward_timestep_embed = wrapped
    try:
        out = unet_output(model)
    finally:
        openaimodel.forward_timestep_embed = original
    unet = model.model.diffusion_model
    assert len(seen) == len(unet.input_blocks) + 1 + len(unet.output_blocks)
    assert seen[0] == ("input", 0) and ("middle", 0) in seen
    assert torch.equal(out, reference)


def test_attention_override_option_routes_every_call(session, model) -> None:  # noqa: ANN001
    import comfy.ldm.modules.attention as attention

    calls = []

    def override(func, *args, **kwargs):  # noqa: ANN001, ANN202
        calls.append(func.__name__)
        return attention.attention_pytorch(*args, **kwargs)

    reference = unet_output(model)
    patched = model.clone()
    patched.model_options.setdefault("transformer_options", {})["optimized_attention_override"] = override
    assert torch.allclose(unet_output(patched), reference, atol=1e-5)
    assert calls and set(calls) == {"attention_in_force"}


def test_pinned_attention_functions_agree_and_take_comfy_layouts(session) -> None:  # noqa: ANN001
    import comfy.ldm.modules.attention as attention

    gen = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 5, 4 * 8, generator=gen) for _ in range(3))
    ref = attention.attention_basic(q, k, v, 4)
    for fn in (attention.attention_pytorch, attention.attention_sub_quad, attention.attention_split,
               attention.optimized_attention):
        assert torch.allclose(fn(q, k, v, 4), ref, atol=1e-5)
    heads = q.reshape(2, 5, 4, 8).transpose(1, 2)
    kh, vh = (t.reshape(2, 5, 4, 8).transpose(1, 2) for t in (k, v))
    out = attention.attention_pytorch(heads, kh, vh, 4, skip_reshape=True, skip_output_reshape=True)
    assert out.shape == (2, 4, 5, 8)
    assert torch.allclose(out.transpose(1, 2).reshape(2, 5, 32), ref, atol=1e-5)
    from comfy_core.attention import AttentionBackendUnavailable

    with pytest.raises(AttentionBackendUnavailable, match="sage"):
        attention.attention_sage(q, k, v, 4)


def test_manual_cast_linear_computes_in_the_input_dtype_with_fp16_weights(ldm_pack) -> None:  # noqa: ANN001
    import comfy.ops

    layer = ldm_pack.manual_cast_linear(8, 3, torch.float16)
    torch.nn.init.normal_(layer.weight)
    torch.nn.init.normal_(layer.bias)
    assert isinstance(layer, comfy.ops.CastWeightBiasOp) and layer.weight.dtype == torch.float16
    x = torch.randn(2, 8, dtype=torch.float32)
    y = layer(x)
    assert y.dtype == torch.float32
    assert torch.equal(y, torch.nn.functional.linear(x, layer.weight.float(), layer.bias.float()))
    # disable_weight_init runs torch's own forward unless a weight function is set.
    plain = comfy.ops.disable_weight_init.Linear(8, 3)
    torch.nn.init.normal_(plain.weight)
    torch.nn.init.zeros_(plain.bias)
    plain.weight_function = [lambda w: w * 2]
    assert torch.allclose(plain(x), 2 * torch.nn.functional.linear(x, plain.weight), atol=1e-6)
    assert comfy.ops.pick_operations(torch.float16, torch.float32) is comfy.ops.manual_cast
    assert comfy.ops.pick_operations(torch.float16, None) is comfy.ops.disable_weight_init


def test_unet_built_with_comfy_ops_operations_matches_the_default(session) -> None:  # noqa: ANN001
    import comfy.ops
    from comfy_core.models.unet import UNetConfig, UNetModel

    config = UNetConfig(model_channels=32, channel_mult=(1, 2), num_res_blocks=1, transformer_depth=(1, 0),
                        transformer_depth_output=(0, 0, 1, 1), transformer_depth_middle=1, context_dim=16,
                        num_heads=2)
    torch.manual_seed(0)
    ours = UNetModel(config).eval()
    theirs = UNetModel(config, operations=comfy.ops.manual_cast).eval()
    theirs.load_state_dict(ours.state_dict())
    linears = [m for m in theirs.modules() if isinstance(m, torch.nn.Linear)]
    assert linears and all(isinstance(m, comfy.ops.manual_cast.Linear) for m in linears)
    convs = [m for m in theirs.modules() if isinstance(m, torch.nn.Conv2d)]
    assert all(isinstance(m, comfy.ops.manual_cast.Conv2d) for m in convs)
    x, ctx = torch.randn(1, 4, 8, 8), torch.randn(1, 3, 16)
    with torch.no_grad():
        assert torch.equal(theirs(x, torch.tensor([10.0]), ctx), ours(x, torch.tensor([10.0]), ctx))


def test_unet_from_comfy_keyword_arguments(session) -> None:  # noqa: ANN001
    import comfy.ldm.modules.diffusionmodules.openaimodel as openaimodel
    from comfy_core.models.unet import UNetConfigError

    unet = openaimodel.UNetModel(in_channels=4, model_channels=32, out_channels=4, num_res_blocks=1,
                                 channel_mult=[1, 2], transformer_depth=[1, 0], transformer_depth_output=[0, 0, 1, 1],
                                 transformer_depth_middle=1, context_dim=16, num_heads=2, use_spatial_transformer=True)
    assert unet.model_channels == 32 and unet.config.transformer_depth == (1, 0)
    with pytest.raises(UNetConfigError, match="use_scale_shift_norm"):
        openaimodel.UNetModel(in_channels=4, model_channels=32, out_channels=4, num_res_blocks=1,
                              channel_mult=[1, 2], transformer_depth=[1, 0], transformer_depth_output=[0, 0, 1, 1],
                              transformer_depth_middle=1, context_dim=16, num_heads=2, use_scale_shift_norm=True)


def test_float_stochastic_rounding_is_unbiased_and_seeded(session) -> None:  # noqa: ANN001
    import comfy.float

    x = torch.full((4000,), 1.0 + 1 / 32)  # a quarter of the way from 1.0 to 1.125 (e4m3's gap)
    a = comfy.float.stochastic_rounding(x, torch.float8_e4m3fn, seed=1)
    assert a.dtype == torch.float8_e4m3fn
    assert set(a.float().tolist()) == {1.0, 1.125}
    assert abs((a.float() == 1.125).float().mean().item() - 0.25) < 0.05
    assert torch.equal(a.float(), comfy.float.stochastic_rounding(x, torch.float8_e4m3fn, seed=1).float())
    assert comfy.float.stochastic_rounding(x, torch.float16).dtype == torch.float16


def test_controlnet_sd35_exists_and_refuses_with_a_typed_error(session) -> None:  # noqa: ANN001
    from comfy.controlnet import ControlNet, ControlNetSD35
    from compat.ldm_controlnet import UnsupportedControlNet

    assert issubclass(ControlNetSD35, ControlNet)
    with pytest.raises(UnsupportedControlNet, match="SD3"):
        ControlNetSD35(None)
