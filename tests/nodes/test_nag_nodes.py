"""NAGuidance (nodes/nag_nodes.py) and Normalized Attention Guidance (comfy_core/model_patches/nag.py;
Chen et al. 2025, arXiv 2505.21179; behaviour of ComfyUI's comfy_extras/nodes_nag.py): the formula
against an independent computation, the batch slices it reads and writes, the hooks it goes under
(the UNet's `attn1_output_patch`, Wan's `attn1_patch`), sampling runs on the tiny SD1 model (scale 1
and alpha 0 give the plain run, a real scale changes it, also at CFG 1), the tiny Wan network, and
the patch being data on a clone. Its `/object_info` entry is checked against the record by
tests/nodes/test_object_info_2026.py."""
from __future__ import annotations

import logging
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from comfy_core.model_patches.nag import (NAGError, NAGSelfAttentionPatch, NormalizedAttentionGuidance, apply_nag,
                                          normalized_attention_guidance)
from comfy_core.patching.model import ModelPatcher
from nodes.errors import NodeInputError
from nodes.nag_nodes import na_guidance
from tests.nodes.model_patch_helpers import sample, snapshot

TOL = dict(atol=1e-6, rtol=1e-5)


def _by_hand(z_pos: torch.Tensor, z_neg: torch.Tensor, scale: float, alpha: float, tau: float) -> torch.Tensor:
    """The paper's equations token by token, in float64 with plain Python sums of absolute values."""
    out = torch.empty_like(z_pos, dtype=torch.float64)
    zp, zn = z_pos.double(), z_neg.double()
    for b in range(zp.shape[0]):
        for n in range(zp.shape[1]):
            g = [scale * float(p) - (scale - 1.0) * float(q) for p, q in zip(zp[b, n], zn[b, n])]
            l1_g = max(sum(abs(v) for v in g), 1e-6)
            l1_p = max(sum(abs(float(v)) for v in zp[b, n]), 1e-6)
            ratio = l1_g / l1_p
            factor = min(ratio, tau) / ratio
            out[b, n] = torch.tensor([alpha * v * factor + (1.0 - alpha) * float(p) for v, p in zip(g, zp[b, n])])
    return out.to(z_pos.dtype)


@pytest.mark.parametrize("scale,alpha,tau", [(5.0, 0.5, 1.5), (2.0, 1.0, 10.0), (0.5, 0.3, 1.0), (8.0, 0.25, 2.5)])
def test_formula_matches_an_independent_computation(scale, alpha, tau):
    generator = torch.Generator().manual_seed(7)
    z_pos, z_neg = torch.randn(2, 3, 5, generator=generator), torch.randn(2, 3, 5, generator=generator)
    got = normalized_attention_guidance(z_pos, z_neg, scale, alpha, tau)
    torch.testing.assert_close(got, _by_hand(z_pos, z_neg, scale, alpha, tau), **TOL)


def test_growth_clipped_at_tau_and_unclipped_below_it():
    z_pos = torch.tensor([[[1.0, -1.0]]])
    z_neg = torch.tensor([[[-1.0, 1.0]]])  # g = 3 z+ (scale 2): L1 ratio 3
    torch.testing.assert_close(normalized_attention_guidance(z_pos, z_neg, 2.0, 1.0, 1.5), 1.5 * z_pos)
    torch.testing.assert_close(normalized_attention_guidance(z_pos, z_neg, 2.0, 1.0, 4.0), 3.0 * z_pos)
    torch.testing.assert_close(normalized_attention_guidance(z_pos, z_neg, 2.0, 0.5, 4.0), 2.0 * z_pos)
    # all-zero tokens stay finite (the norms are clamped at 1e-6)
    zero = torch.zeros(1, 1, 2)
    assert torch.equal(normalized_attention_guidance(zero, zero, 5.0, 0.5, 1.5), zero)


@pytest.mark.parametrize("order", [[0, 1], [1, 0]])
def test_patch_guides_the_positive_slice_only(order):
    generator = torch.Generator().manual_seed(1)
    batch = torch.randn(4, 6, 8, generator=generator)  # two rows per slice
    pos = slice(0, 2) if order[0] == 0 else slice(2, 4)
    neg = slice(2, 4) if order[0] == 0 else slice(0, 2)
    want = batch.clone()
    want[pos] = _by_hand(batch[pos], batch[neg], 5.0, 0.5, 1.5)
    got = NormalizedAttentionGuidance(5.0, 0.5, 1.5)(batch.clone(), {"cond_or_uncond": order})
    torch.testing.assert_close(got, want, **TOL)
    assert torch.equal(got[neg], batch[neg])


@pytest.mark.parametrize("options", [{}, {"cond_or_uncond": [0]}, {"cond_or_uncond": [1]}, {"cond_or_uncond": [0, 0]}])
def test_patch_leaves_a_batch_without_both_slices_as_it_is(options):
    batch = torch.randn(2, 3, 4)
    assert torch.equal(NormalizedAttentionGuidance(5.0, 0.5, 1.5)(batch.clone(), options), batch)


def test_joint_stream_guides_image_tokens_into_both_slices():
    """With `img_slice` (a text+image token stream) only those tokens change, in both slices (ComfyUI)."""
    batch = torch.randn(2, 7, 4)
    got = NormalizedAttentionGuidance(4.0, 0.5, 2.0)(batch.clone(), {"cond_or_uncond": [1, 0], "img_slice": (3, 7)})
    guided = _by_hand(batch[1:2, 3:], batch[0:1, 3:], 4.0, 0.5, 2.0)
    torch.testing.assert_close(got[1:2, 3:], guided, **TOL)
    torch.testing.assert_close(got[0:1, 3:], guided, **TOL)
    assert torch.equal(got[:, :3], batch[:, :3])


def test_settings_out_of_range_are_typed_errors():
    with pytest.raises(NAGError, match="nag_tau"):
        NormalizedAttentionGuidance(5.0, 0.5, 0.9)
    with pytest.raises(NAGError, match="nag_alpha"):
        NormalizedAttentionGuidance(5.0, 1.5, 1.5)
    with pytest.raises(NodeInputError, match="nag_tau"):
        na_guidance(ModelPatcher(torch.nn.Linear(1, 1)), 5.0, 0.5, 0.5)
    with pytest.raises(NodeInputError, match="nag_scale"):
        na_guidance(ModelPatcher(torch.nn.Linear(1, 1)), 51.0, 0.5, 1.5)
    with pytest.raises(NodeInputError, match="model"):
        na_guidance("not a model", 5.0, 0.5, 1.5)


def test_node_module_imports_without_torch():
    code = "import sys; import nodes.nag_nodes; assert 'torch' not in sys.modules, 'torch imported'"
    subprocess.run([sys.executable, "-c", code], check=True, cwd=str(Path(__file__).resolve().parents[2]))


# -- the tiny SD1 model ---------------------------------------------------------------------------

@pytest.fixture(scope="module")
def sd1(sd1_with_prompts):
    return sd1_with_prompts


def test_node_patches_a_clone_only(sd1):
    before = snapshot(sd1.model)
    (patched,) = na_guidance(sd1.model, 5.0, 0.5, 1.5)
    assert snapshot(sd1.model) == before
    assert "disable_cfg1_optimization" not in sd1.model.model_options
    assert patched.model_options["disable_cfg1_optimization"] is True
    assert patched.model_options["transformer_options"]["patches"]["attn1_output_patch"] == [
        NormalizedAttentionGuidance(5.0, 0.5, 1.5)]
    assert "attn1_patch" not in patched.model_options["transformer_options"]["patches"]
    assert patched.model is sd1.model.model  # the network is shared, not copied
    (again,) = na_guidance(sd1.model, 5.0, 0.5, 1.5)
    assert repr(again.model_options) == repr(patched.model_options)  # equal settings, equal data


def test_scale_one_and_alpha_zero_give_the_plain_run_and_a_scale_changes_it(sd1):
    plain = sample(sd1.model, sd1)
    assert torch.equal(sample(na_guidance(sd1.model, 1.0, 0.5, 1.5)[0], sd1), plain)
    assert torch.equal(sample(na_guidance(sd1.model, 5.0, 0.0, 1.5)[0], sd1), plain)
    guided = sample(na_guidance(sd1.model, 5.0, 0.5, 1.5)[0], sd1)
    assert torch.isfinite(guided).all()
    assert not torch.allclose(guided, plain, atol=1e-4)
    stronger = sample(na_guidance(sd1.model, 10.0, 1.0, 3.0)[0], sd1)
    assert not torch.allclose(stronger, guided, atol=1e-4)


def test_at_cfg_one_the_negative_still_guides(sd1):
    """CFG 1 normally skips the negative; NAG turns that off, so the negative steers the run."""
    plain = sample(sd1.model, sd1, cfg=1.0)
    negative_run = sd1.model.clone()
    negative_run.set_option("disable_cfg1_optimization", True)
    with_negative = sample(negative_run, sd1, cfg=1.0)
    # scale 1: the negative is evaluated but changes nothing; the result is the run that evaluates it
    # anyway, exactly, and the plain run up to the rounding of `uncond + 1 * (cond - uncond)` (latents ~300)
    nag_one = sample(na_guidance(sd1.model, 1.0, 0.5, 1.5)[0], sd1, cfg=1.0)
    assert torch.equal(nag_one, with_negative)
    torch.testing.assert_close(nag_one, plain, atol=1e-3, rtol=1e-5)
    assert not torch.allclose(sample(na_guidance(sd1.model, 5.0, 0.5, 1.5)[0], sd1, cfg=1.0), plain, atol=1e-1)


def test_the_unet_calls_the_patch_after_every_self_attention_with_both_slices(sd1):
    seen: list[tuple[tuple[int, ...], list[int]]] = []

    class Recording(NormalizedAttentionGuidance):
        def __call__(self, out, extra_options):
            seen.append((tuple(out.shape), list(extra_options["cond_or_uncond"])))
            return super().__call__(out, extra_options)

    patched = sd1.model.clone()
    patched.add_block_patch("attn1_output_patch", Recording(5.0, 0.5, 1.5))
    patched.set_option("disable_cfg1_optimization", True)
    sample(patched, sd1, steps=1, cfg=1.0)
    assert seen and all(sorted(order) == [0, 1] and shape[0] == 2 for shape, order in seen)


# -- Wan (its self-attention's attn1_patch, before the output projection) ------------------------

@pytest.fixture(scope="module")
def wan():
    from comfy_core.families.wan.dit import WanConfig, WanModel
    from tests.fixtures.wan_files import tiny_wan_state_dict

    state = tiny_wan_state_dict("t2v", seed=3)
    model = WanModel.from_config(WanConfig.detect_from_weights(state))
    model.load_state_dict(state, strict=True)
    return model.eval()


def _wan_inputs(wan):
    generator = torch.Generator().manual_seed(5)
    x = torch.randn(1, wan.config.in_dim, 2, 4, 4, generator=generator).repeat(2, 1, 1, 1, 1)
    context = torch.randn(2, 8, wan.config.text_dim, generator=generator)  # row 0 positive, row 1 negative
    return x, torch.tensor([600.0, 600.0]), context


def _wan_run(wan, patch=None):
    x, t, context = _wan_inputs(wan)
    options = {"cond_or_uncond": [0, 1]}
    if patch is not None:
        options["patches"] = {"attn1_patch": [patch]}
    with torch.no_grad():
        return wan(x, t, context, transformer_options=options)


def test_wan_self_attention_patch_is_nag_before_the_output_projection(wan):
    attention = wan.blocks[0].self_attn
    generator = torch.Generator().manual_seed(2)
    tokens = torch.randn(2, 32, wan.config.dim, generator=generator)
    freqs = wan.rope_embedder(torch.zeros(1, 32, 3)).movedim(1, 2)
    captured = {}

    def capture(kwargs):
        captured["x"] = kwargs["x"].clone()
        return kwargs["x"]

    with torch.no_grad():
        attention(tokens, freqs, transformer_options={"patches": {"attn1_patch": [capture]}})
        got = attention(tokens, freqs, transformer_options={
            "cond_or_uncond": [0, 1],
            "patches": {"attn1_patch": [NAGSelfAttentionPatch(NormalizedAttentionGuidance(5.0, 0.5, 1.5))]}})
        z = captured["x"]
        want = torch.cat([_by_hand(z[:1], z[1:], 5.0, 0.5, 1.5), z[1:]])
        want = torch.nn.functional.linear(want, attention.o.weight, attention.o.bias)
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)


def test_wan_network_scale_one_is_plain_and_a_scale_moves_only_the_positive(wan):
    plain = _wan_run(wan)
    same = _wan_run(wan, NAGSelfAttentionPatch(NormalizedAttentionGuidance(1.0, 0.5, 1.5)))
    assert torch.equal(same, plain)
    guided = _wan_run(wan, NAGSelfAttentionPatch(NormalizedAttentionGuidance(5.0, 0.5, 1.5)))
    assert not torch.allclose(guided[0], plain[0], atol=1e-4)
    torch.testing.assert_close(guided[1], plain[1], atol=1e-6, rtol=1e-6)


def _patcher_of(architecture: str) -> ModelPatcher:
    from comfy_core.families import default_registry

    hooks = {family.architecture.name: family.architecture.self_attention_hook for family in default_registry()}
    module = torch.nn.Linear(1, 1)
    module.family = SimpleNamespace(name=architecture, architecture=SimpleNamespace(
        name=architecture, self_attention_hook=hooks.get(architecture)))
    return ModelPatcher(module)


def test_node_puts_nag_under_the_hook_each_network_calls(caplog):
    wan_model = _patcher_of("wan")
    (patched,) = na_guidance(wan_model, 5.0, 0.5, 1.5)
    patches = patched.model_options["transformer_options"]["patches"]
    assert patches == {"attn1_patch": [NAGSelfAttentionPatch(NormalizedAttentionGuidance(5.0, 0.5, 1.5))]}
    assert "patches" not in wan_model.model_options["transformer_options"]
    unet, _ = apply_nag(_patcher_of("unet"), 5.0, 0.5, 1.5)
    assert list(unet.model_options["transformer_options"]["patches"]) == ["attn1_output_patch"]
    # a network without a hook: logged no-op (ComfyUI's hook installed all the same)
    with caplog.at_level(logging.WARNING, logger="nodes.nag_nodes"):
        (other,) = na_guidance(_patcher_of("ltxav"), 5.0, 0.5, 1.5)
    assert "ltxav network has no self-attention hook" in caplog.text
    assert list(other.model_options["transformer_options"]["patches"]) == ["attn1_output_patch"]
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="nodes.nag_nodes"):
        na_guidance(wan_model, 5.0, 0.5, 1.5)
    assert caplog.text == ""


# -- the Flux line (Flux, Flux.2, Chroma, LongCat: attn1_output_patch on the joint attention) --------


def _tiny_flux():
    from comfy_core.families.flux.dit import FluxConfig, FluxTransformer
    from tests.fixtures.flux_files import tiny_flux_state_dict

    state = tiny_flux_state_dict(True, seed=5)
    network = FluxTransformer.from_config(FluxConfig.detect_from_weights(state))
    network.load_state_dict(state, strict=True)
    return network.eval()


def _tiny_flux2():
    from comfy_core.families.flux2.dit import Flux2Config, Flux2Transformer
    from tests.fixtures.flux2_files import tiny_flux2_state_dict

    state = tiny_flux2_state_dict(seed=5)
    network = Flux2Transformer.from_config(Flux2Config.detect_from_weights(state))
    network.load_state_dict(state, strict=True)
    return network.eval()


def _flux_run(network, patch=None, record=None):
    """Rows 0 / 1 the same latent under different prompts: the positive and the negative."""
    patches = [p for p in (record, patch) if p is not None]
    options = {"cond_or_uncond": [0, 1], "patches": {"attn1_output_patch": patches}} if patches else {}
    return _flux_run_with_options(network, options)


@pytest.mark.parametrize("build", [_tiny_flux, _tiny_flux2], ids=["flux", "flux2"])
def test_flux_blocks_call_the_output_patch_on_the_joint_attention_with_the_image_tokens(build):
    network = build()
    calls = []

    def record(attn, extra_options):
        calls.append((extra_options["block_type"], tuple(attn.shape), tuple(extra_options["img_slice"])))
        return attn

    plain = _flux_run(network)
    recorded = _flux_run(network, record=record)
    torch.testing.assert_close(recorded, plain, rtol=0, atol=0)  # an identity patch changes nothing
    hidden = network.config.hidden_size
    patch = network.config.patch_size
    text, image = 5, (4 // patch) * (6 // patch)  # 5 prompt tokens; a 4x6 latent in patches
    want = [("double", (2, text + image, hidden), (text, text + image))] * len(network.double_blocks)
    want += [("single", (2, text + image, hidden), (text, text + image))] * len(network.single_blocks)
    assert calls == want


@pytest.mark.parametrize("build", [_tiny_flux, _tiny_flux2], ids=["flux", "flux2"])
def test_flux_nag_scale_one_keeps_the_positive_and_a_scale_guides_it(build):
    network = build()
    plain = _flux_run(network)
    same = _flux_run(network, NormalizedAttentionGuidance(1.0, 0.5, 1.5))
    torch.testing.assert_close(same[0], plain[0], atol=1e-6, rtol=1e-6)
    # a joint stream's guided image tokens go into both slices (ComfyUI's node): the negative's
    # image tokens attend with the positive's result, so its prediction moves even at scale 1
    assert (same[1] - plain[1]).abs().max() > 1e-4
    guided = _flux_run(network, NormalizedAttentionGuidance(5.0, 0.5, 1.5))
    assert (guided[0] - plain[0]).abs().max() > 1e-4


def test_a_zeroed_image_attention_equals_the_block_by_hand():
    """An independent check of where the patch sits: zeroing the image tokens' attention output
    leaves the double block's image stream `img + gate * proj(0)` before its MLP."""
    from comfy_core.families.flux.blocks import apply_mod

    network = _tiny_flux()
    block = network.double_blocks[0]
    generator = torch.Generator().manual_seed(11)
    img = torch.randn(1, 6, network.config.hidden_size, generator=generator)
    txt = torch.randn(1, 5, network.config.hidden_size, generator=generator)
    vec = torch.randn(1, network.config.hidden_size, generator=generator)

    def zero_image(attn, extra_options):
        start, end = extra_options["img_slice"]
        attn = attn.clone()
        attn[:, start:end] = 0
        return attn

    with torch.no_grad():
        got, _ = block(img, txt, vec, None, transformer_options={"patches": {"attn1_output_patch": [zero_image]}})
        mod1, mod2 = block.img_mod(vec)
        want = img + apply_mod(block.img_attn.proj(torch.zeros_like(img)), mod1.gate, None, None)
        hidden = apply_mod(block.img_norm2(want), 1 + mod2.scale, mod2.shift, None)
        want = want + apply_mod(block.img_mlp(hidden), mod2.gate, None, None)
    torch.testing.assert_close(got, want, atol=1e-6, rtol=1e-6)


def test_node_installs_nag_on_flux_without_the_no_effect_warning(caplog):
    with caplog.at_level(logging.WARNING, logger="nodes.nag_nodes"):
        for architecture in ("flux", "flux2", "chroma", "chroma_radiance", "longcat_image"):
            (patched,) = na_guidance(_patcher_of(architecture), 5.0, 0.5, 1.5)
            assert list(patched.model_options["transformer_options"]["patches"]) == ["attn1_output_patch"]
    assert caplog.text == ""


@pytest.mark.parametrize("build", [_tiny_flux, _tiny_flux2], ids=["flux", "flux2"])
def test_flux_blocks_call_the_attn1_patch_before_attention_and_take_its_tensors(build):
    """Today's ComfyUI's Flux `attn1_patch`: `(q, k, v, pe=, attn_mask=, extra_options=) -> dict`;
    an empty dict changes nothing, a replaced `v` of zeros zeroes every attention output (so the
    output patch after it sees zeros)."""
    network = build()
    seen, after = [], []

    def observe(q, k, v, pe=None, attn_mask=None, extra_options=None):
        seen.append((extra_options["block_type"], tuple(q.shape), tuple(extra_options["img_slice"])))
        return {}

    def zero_values(q, k, v, pe=None, attn_mask=None, extra_options=None):
        return {"v": torch.zeros_like(v)}

    def record(attn, extra_options):
        after.append(float(attn.abs().max()))
        return attn

    plain = _flux_run(network)
    same = _flux_run_with_options(network, {"cond_or_uncond": [0, 1], "patches": {"attn1_patch": [observe]}})
    torch.testing.assert_close(same, plain, rtol=0, atol=0)
    heads, hidden, patch = network.config.num_heads, network.config.hidden_size, network.config.patch_size
    tokens = 5 + (4 // patch) * (6 // patch)
    assert [s[0] for s in seen] == ["double"] * len(network.double_blocks) + ["single"] * len(network.single_blocks)
    assert {s[1] for s in seen} == {(2, heads, tokens, hidden // heads)}
    assert {s[2] for s in seen} == {(5, tokens)}
    zeroed = _flux_run_with_options(network, {"patches": {"attn1_patch": [zero_values], "attn1_output_patch": [record]}})
    assert after and max(after) == 0.0
    assert not torch.allclose(zeroed, plain)


def _flux_run_with_options(network, options):
    generator = torch.Generator().manual_seed(7)
    x = torch.randn(1, network.config.in_channels, 4, 6, generator=generator).repeat(2, 1, 1, 1)
    context = torch.randn(2, 5, network.config.context_in_dim, generator=generator)
    kwargs = {}
    if getattr(network.config, "vec_in_dim", None):
        kwargs["y"] = torch.randn(2, network.config.vec_in_dim, generator=generator)
    if getattr(network.config, "guidance_embed", False):
        kwargs["guidance"] = torch.full((2,), 3.5)
    with torch.no_grad():
        return network(x, torch.tensor([0.6, 0.6]), context, transformer_options=options, **kwargs)
