"""What ComfyUI-KJNodes imports and calls, on our runtime (fixture pack tests/compat/api_packs/kj_pack):
`comfy.ldm.flux.math` RoPE and DiT attention, Lumina's SwiGLU `FeedForward`, attention overrides,
CFG functions reading the run's sigmas, `CFGGuider` subclasses calling `sampling_function`,
`KSAMPLER` functions written with `to_d`, `CallbacksMP` callbacks and chunked feed-forward
object patches; each checked against numbers computed independently here."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from tests.compat.api_pack_support import import_api_pack, load_sd1_model, unet_output
from tests.nodes.test_custom_sampling import _c, _d, _toy_model

@pytest.fixture
def kj_pack(session):  # noqa: ANN001, ANN201
    yield from import_api_pack("kj_pack")


@pytest.fixture
def sd1(tiny_sd1_ckpt):  # noqa: ANN001, ANN201
    return load_sd1_model(tiny_sd1_ckpt)




def _complex_rope(x: torch.Tensor, positions: torch.Tensor, theta: float) -> torch.Tensor:
    """RoPE as RoFormer writes it: consecutive pairs as complex numbers times e^{i p w_j}."""
    d = x.shape[-1]
    omega = theta ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)
    rot = torch.polar(torch.ones_like(positions[..., None] * omega), positions[..., None] * omega)  # [B, L, D/2]
    pairs = torch.view_as_complex(x.to(torch.float64).reshape(*x.shape[:-1], -1, 2).contiguous())
    return torch.view_as_real(pairs * rot[:, None]).reshape(x.shape)


def test_pack_imports_what_kjnodes_imports_at_load(kj_pack) -> None:  # noqa: ANN001
    import comfy.ldm.flux.math
    import comfy.ldm.lumina.model

    from comfy_core.attention import rope
    from comfy_core.models.swiglu import SwiGLUFeedForward

    assert comfy.ldm.flux.math.apply_rope is rope.apply_rope
    assert comfy.ldm.lumina.model.FeedForward is SwiGLUFeedForward
    assert set(kj_pack.NODE_CLASS_MAPPINGS) >= {"KJPackRope", "KJPackCFGZeroStar", "KJPackScheduledCFG"}


def test_flux_rope_rotates_pairs_as_complex_numbers(kj_pack) -> None:  # noqa: ANN001
    import comfy.ldm.flux.math as flux_math

    gen = torch.Generator().manual_seed(0)
    b, h, length, d, theta = 2, 3, 5, 8, 10000.0
    positions = torch.arange(length, dtype=torch.float32)[None].repeat(b, 1) + torch.tensor([[0.0], [7.0]])
    freqs = flux_math.rope(positions, d, theta)
    assert freqs.shape == (b, length, d // 2, 2, 2) and freqs.dtype == torch.float32
    q, k = torch.randn(b, h, length, d, generator=gen), torch.randn(b, h, length, d, generator=gen)
    rq, rk = kj_pack.KJPackRope().apply(q, k, freqs[:, None])
    assert torch.allclose(rq.double(), _complex_rope(q, positions.double(), theta), atol=1e-5)
    assert torch.allclose(rk.double(), _complex_rope(k, positions.double(), theta), atol=1e-5)
    # position 0 is the identity; a rotation keeps each pair's length
    assert torch.equal(rq[0, :, 0], q[0, :, 0])
    assert torch.allclose(rq.reshape(b, h, length, -1, 2).norm(dim=-1), q.reshape(b, h, length, -1, 2).norm(dim=-1), atol=1e-5)
    # Wan's layout: [B, L, H, D] with freqs [B, L, 1, D/2, 2, 2]; computed in freqs' dtype, returned in the input's
    q16 = q.transpose(1, 2).to(torch.bfloat16)
    out16 = flux_math.apply_rope1(q16, freqs[:, :, None])
    assert out16.dtype == torch.bfloat16
    assert torch.allclose(out16.float(), rq.transpose(1, 2), atol=5e-2)


def test_flux_attention_is_sdpa_over_rotated_queries_and_keys(kj_pack) -> None:  # noqa: ANN001
    import comfy.ldm.flux.math as flux_math

    gen = torch.Generator().manual_seed(1)
    b, h, length, d = 1, 2, 6, 8
    q, k, v = (torch.randn(b, h, length, d, generator=gen) for _ in range(3))
    pe = flux_math.rope(torch.arange(length, dtype=torch.float32)[None], d, 256.0)[:, None]
    rq, rk = flux_math.apply_rope(q, k, pe)
    expected = F.scaled_dot_product_attention(rq, rk, v).transpose(1, 2).reshape(b, length, h * d)
    assert torch.allclose(flux_math.attention(q, k, v, pe), expected, atol=1e-6)
    assert torch.allclose(flux_math.attention(q, k, v, None),
                          F.scaled_dot_product_attention(q, k, v).transpose(1, 2).reshape(b, length, h * d), atol=1e-6)


def test_flux_attention_calls_the_replaceable_optimized_attention(kj_pack) -> None:  # noqa: ANN001
    import comfy.ldm.flux.math as flux_math
    import comfy.ldm.modules.attention as attention

    original = attention.optimized_attention
    seen = []

    def mine(q, k, v, heads, **kwargs):  # noqa: ANN001, ANN202
        seen.append((heads, kwargs.get("skip_reshape")))
        return original(q, k, v, heads, **kwargs) * 2.0

    q = torch.randn(1, 2, 4, 8)
    reference = flux_math.attention(q, q, q, None)
    attention.optimized_attention = mine
    try:
        assert torch.allclose(flux_math.attention(q, q, q, None), 2.0 * reference)
    finally:
        attention.optimized_attention = original
    assert seen == [(2, True)]


def test_lumina_feedforward_has_comfyuis_widths_and_swiglu(kj_pack) -> None:  # noqa: ANN001
    import comfy.ldm.lumina.model as lumina
    import comfy.ops

    ops = comfy.ops.disable_weight_init
    ff = lumina.FeedForward(dim=8, hidden_dim=20, multiple_of=16, ffn_dim_multiplier=1.5,
                            operation_settings={"operations": ops, "device": "cpu", "dtype": torch.float64})
    # int(1.5 * 20) = 30 rounded up to a multiple of 16
    assert ff.w1.weight.shape == (32, 8) and ff.w3.weight.shape == (32, 8) and ff.w2.weight.shape == (8, 32)
    assert isinstance(ff.w1, ops.Linear) and ff.w1.bias is None and ff.w1.weight.dtype == torch.float64
    for layer in (ff.w1, ff.w2, ff.w3):  # disable_weight_init leaves weights uninitialised
        torch.nn.init.normal_(layer.weight, generator=torch.Generator().manual_seed(layer.weight.shape[0]))
    x = torch.randn(2, 7, 8, dtype=torch.float64)
    a, g = x @ ff.w1.weight.T, x @ ff.w3.weight.T
    expected = (a * torch.sigmoid(a) * g) @ ff.w2.weight.T
    assert torch.allclose(ff(x), expected, atol=1e-12)
    # KJNodes' chunked forward calls the class's forward on token chunks: same numbers
    chunked = torch.cat([lumina.FeedForward.forward(ff, c) for c in torch.chunk(x, 3, dim=1)], dim=1)
    assert torch.allclose(chunked, ff(x), atol=1e-12)
    plain = lumina.FeedForward(4, 10, 4, None)  # no operation_settings: torch.nn layers, width 12
    assert plain.w2.weight.shape == (4, 12)


def test_attention_override_calling_wrapped_sdpa_keeps_the_output(kj_pack, sd1) -> None:  # noqa: ANN001
    reference = unet_output(sd1)
    patched = kj_pack.KJPackAttentionOverride().patch(sd1, "pytorch")[0]
    override = patched.model_options["transformer_options"]["optimized_attention_override"]
    assert "optimized_attention_override" not in sd1.model_options.get("transformer_options", {})
    assert torch.allclose(unet_output(patched), reference, atol=1e-5)
    assert override.calls and set(override.calls) == {"attention_in_force"}
    assert kj_pack.KJPackAttentionOverride().patch(sd1, "disabled")[0] is sd1


def test_sage_mode_fails_naming_the_missing_package(kj_pack, sd1) -> None:  # noqa: ANN001
    with pytest.raises(ModuleNotFoundError, match="sageattention"):
        kj_pack.KJPackAttentionOverride().patch(sd1, "sage")


def _sample(model, sampler, sigmas, pos=0.4, neg=-0.2, cfg=3.0, seed=5):  # noqa: ANN001, ANN202
    from nodes.custom_sampling import sampler_custom

    latent = {"samples": torch.zeros(1, 4, 8, 8)}
    return sampler_custom(model, True, seed, cfg, _c(pos), _c(neg), sampler, sigmas, latent)[0]["samples"]


def _euler():  # noqa: ANN202
    import comfy.samplers

    return comfy.samplers.sampler_object("euler")


def _noise(seed: int = 5) -> torch.Tensor:
    import comfy.sample

    return comfy.sample.prepare_noise(torch.zeros(1, 4, 8, 8), seed)


def test_cfg_zero_star_zero_init_leaves_the_noise_untouched(kj_pack) -> None:  # noqa: ANN001
    """Every step zero-initialised: the CFG result is 0, so denoised == x and Euler never moves."""
    m = kj_pack.KJPackCFGZeroStar().patch(_toy_model(), True, 10)[0]
    sigmas = torch.tensor([3.0, 1.5, 0.5, 0.0])
    out = _sample(m, _euler(), sigmas)
    assert torch.allclose(out, _noise() * 3.0 / 0.18215, atol=1e-5)
    assert not torch.allclose(_sample(_toy_model(), _euler(), sigmas), out, atol=1e-2)


def test_cfg_zero_star_formula(kj_pack) -> None:  # noqa: ANN001
    """One Euler step to 0 returns x - result, result = u*a + s*(c - u*a), a = <c,u>/|u|^2."""
    m = kj_pack.KJPackCFGZeroStar().patch(_toy_model(), False, 0)[0]
    s0, scale = 2.0, 3.0
    x = _noise() * s0
    c, u = x - _d(x, s0, 0.4), x - _d(x, s0, -0.2)
    alpha = (c * u).sum() / ((u * u).sum() + 1e-8)
    expected = x - (u * alpha + scale * (c - u * alpha))
    out = _sample(m, _euler(), torch.tensor([s0, 0.0]), cfg=scale)
    assert torch.allclose(out, expected / 0.18215, atol=1e-4)
    plain = _sample(_toy_model(), _euler(), torch.tensor([s0, 0.0]), cfg=scale)
    assert not torch.allclose(out, plain, atol=1e-3)  # alpha != 1 here, so the patch shows


def _guided(kj_pack, start: float, end: float, cfg: float = 4.0) -> torch.Tensor:  # noqa: ANN001
    from nodes.custom_sampling import random_noise, sampler_custom_advanced

    guider = kj_pack.KJPackScheduledCFG().get_guider(_toy_model(), _c(0.4), _c(-0.2), cfg, start, end)[0]
    latent = {"samples": torch.zeros(1, 4, 8, 8)}
    return sampler_custom_advanced(random_noise(9)[0], guider, _euler(), torch.tensor([4.0, 2.0, 1.0, 0.0]), latent)[0]["samples"]


def test_scheduled_cfg_guider_through_sampling_function(kj_pack) -> None:  # noqa: ANN001
    import comfy.samplers

    from nodes.custom_sampling import random_noise, sampler_custom_advanced

    def plain(cfg: float) -> torch.Tensor:
        guider = comfy.samplers.CFGGuider(_toy_model())
        guider.set_conds(_c(0.4), _c(-0.2))
        guider.set_cfg(cfg)
        latent = {"samples": torch.zeros(1, 4, 8, 8)}
        return sampler_custom_advanced(random_noise(9)[0], guider, _euler(), torch.tensor([4.0, 2.0, 1.0, 0.0]),
                                       latent)[0]["samples"]

    assert torch.equal(_guided(kj_pack, 0.0, 1.0), plain(4.0))  # every step inside: plain CFG
    assert torch.equal(_guided(kj_pack, 0.9, 1.0), plain(1.0))  # none inside (0, 1/3, 2/3): positive only
    partly = _guided(kj_pack, 0.0, 0.5)
    assert not torch.equal(partly, plain(4.0)) and not torch.equal(partly, plain(1.0))


def test_ksampler_function_written_with_to_d_equals_builtin_euler(kj_pack) -> None:  # noqa: ANN001
    sigmas = torch.tensor([5.0, 2.5, 1.0, 0.3, 0.0])
    sampler = kj_pack.KJPackEuler().get_sampler()[0]
    assert torch.equal(_sample(_toy_model(), sampler, sigmas), _sample(_toy_model(), _euler(), sigmas))


def test_pre_run_and_cleanup_callbacks_frame_each_sampling(kj_pack) -> None:  # noqa: ANN001
    m = kj_pack.KJPackTorchSettings().patch(_toy_model())[0]
    _sample(m, _euler(), torch.tensor([2.0, 0.0]))
    assert [event for event, _ in kj_pack.EVENTS] == ["pre_run", "cleanup"]
    assert all(patcher is not None for _, patcher in kj_pack.EVENTS)
    _sample(_toy_model(), _euler(), torch.tensor([2.0, 0.0]))  # an unpatched model runs none
    assert len(kj_pack.EVENTS) == 2


def test_chunked_feed_forward_object_patches(kj_pack, sd1) -> None:  # noqa: ANN001
    reference = unet_output(sd1)
    same = kj_pack.KJPackChunkFeedForward().patch(sd1, 2, 1.0)[0]
    assert any(name.endswith(".ff.forward") for name in same.object_patches)
    assert torch.allclose(unet_output(same), reference, atol=1e-5)
    silenced = kj_pack.KJPackChunkFeedForward().patch(sd1, 2, 0.0)[0]
    assert not torch.allclose(unet_output(silenced), reference, atol=1e-3)
    # the patches lived only inside applied(): the shared module is as it was
    assert torch.equal(unet_output(sd1), reference)
