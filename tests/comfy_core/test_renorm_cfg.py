"""RenormCFG (comfy_core/model_patches/renorm_cfg.py, nodes/lumina2_nodes.py): Lumina 2's truncated,
renormalised CFG against a direct computation, through the sampler's cfg_function, and the node
(a clone holding the patch as data, the model's latent channels, typed refusals)."""
from __future__ import annotations

import pytest
import torch

from comfy_core.model_patches.renorm_cfg import RenormCFG, RenormCFGError, renorm_cfg_combine
from comfy_core.sampling.cfg import cfg_function


def _direct(cond, uncond, scale, t, channels, trunc, renorm):
    """The guidance written out per sample with plain Python scalars."""
    out = cond.clone()
    if t >= trunc:
        return out
    for b in range(cond.shape[0]):
        c, u = cond[b, :channels].double(), uncond[b, :channels].double()
        g = u + scale * (c - u)
        if renorm > 0:
            bound = float(c.pow(2).sum().sqrt()) * renorm
            norm = float(g.pow(2).sum().sqrt())
            if norm >= bound:
                g = g * (bound / norm)
        out[b, :channels] = g.float()
    return out


def _preds(seed=0, batch=1, channels=6):
    gen = torch.Generator().manual_seed(seed)
    cond = torch.randn(batch, channels, 4, 4, generator=gen)
    uncond = torch.randn(batch, channels, 4, 4, generator=gen)
    return cond, uncond


@pytest.mark.parametrize("renorm", [0.0, 1.0, 3.0, 50.0])
def test_guided_channels_are_cfg_capped_at_renorm_times_the_positive_norm(renorm):
    cond, uncond = _preds()
    got = renorm_cfg_combine(cond, uncond, 4.0, 0.5, 4, 100.0, renorm)
    torch.testing.assert_close(got, _direct(cond, uncond, 4.0, 0.5, 4, 100.0, renorm), atol=1e-6, rtol=1e-6)
    # The channels past in_channels are the positive's, unguided.
    assert torch.equal(got[:, 4:], cond[:, 4:])
    plain = uncond[:, :4] + 4.0 * (cond[:, :4] - uncond[:, :4])
    norm, bound = plain.norm(), cond[:, :4].norm() * renorm
    if renorm == 0.0 or norm < bound:
        torch.testing.assert_close(got[:, :4], plain)
    else:  # scaled down to exactly the bound
        torch.testing.assert_close(got[:, :4].norm(), bound, atol=1e-5, rtol=1e-5)


def test_the_bound_is_per_sample():
    cond, uncond = _preds(seed=1, batch=2)
    uncond[1] = cond[1] * 0.99  # a tiny guidance: sample 1 stays under the bound, sample 0 does not
    got = renorm_cfg_combine(cond, uncond, 6.0, 0.2, 6, 100.0, 1.0)
    torch.testing.assert_close(got, _direct(cond, uncond, 6.0, 0.2, 6, 100.0, 1.0), atol=1e-6, rtol=1e-6)
    assert not torch.equal(got[1], cond[1])


@pytest.mark.parametrize("t, trunc", [(0.7, 0.5), (0.5, 0.5)])
def test_at_or_past_the_truncation_the_positive_is_taken(t, trunc):
    cond, uncond = _preds(seed=2)
    assert torch.equal(renorm_cfg_combine(cond, uncond, 5.0, t, 4, trunc, 1.0), cond)
    assert not torch.equal(renorm_cfg_combine(cond, uncond, 5.0, 0.49, 4, trunc, 1.0), cond)


def test_through_the_samplers_cfg_function():
    """As a `sampler_cfg_function`: the hook answers `x - result`, cfg_function gives back `result`
    (the truncation reads the first sigma of the batch)."""
    cond, uncond = _preds(seed=3, batch=2)
    x = torch.randn_like(cond)
    patch = RenormCFG(cfg_trunc=0.6, renorm_cfg=1.5, in_channels=4)
    for sigma, expect_trunc in ((0.3, False), (0.8, True)):
        sigmas = torch.tensor([sigma, 0.1])
        out = cfg_function(None, cond, uncond, 3.0, x, sigmas, {"sampler_cfg_function": patch})
        want = cond if expect_trunc else _direct(cond, uncond, 3.0, sigma, 4, 0.6, 1.5)
        torch.testing.assert_close(out, want, atol=1e-5, rtol=1e-5)


def test_settings_are_data_and_bad_ones_are_refused():
    assert RenormCFG(100.0, 1.0, 16).cache_signature() == RenormCFG(100.0, 1.0, 16).cache_signature()
    assert RenormCFG(100.0, 1.0, 16).cache_signature() != RenormCFG(100.0, 2.0, 16).cache_signature()
    for kwargs in ({"cfg_trunc": -1.0, "renorm_cfg": 1.0, "in_channels": 16},
                   {"cfg_trunc": 1.0, "renorm_cfg": 101.0, "in_channels": 16},
                   {"cfg_trunc": 1.0, "renorm_cfg": 1.0, "in_channels": 0}):
        with pytest.raises(RenormCFGError):
            RenormCFG(**kwargs)


@pytest.fixture(scope="module")
def lumina2_model(tmp_path_factory):
    from comfy_core.split.diffusion_model import load_diffusion_model
    from tests.fixtures.lumina2_files import write_lumina2_unet

    return load_diffusion_model(write_lumina2_unet(tmp_path_factory.mktemp("renorm"), seed=1))


def test_the_node_returns_a_clone_with_the_patch_for_the_models_channels(lumina2_model):
    from nodes.lumina2_nodes import renorm_cfg

    (patched,) = renorm_cfg(lumina2_model, 0.9, 2.0)
    assert patched is not lumina2_model
    assert "sampler_cfg_function" not in lumina2_model.model_options
    assert patched.model_options["sampler_cfg_function"] == RenormCFG(0.9, 2.0, 16)


def test_the_node_refuses_values_out_of_range(lumina2_model):
    from nodes.errors import NodeInputError
    from nodes.lumina2_nodes import renorm_cfg

    with pytest.raises(NodeInputError, match="renorm_cfg"):
        renorm_cfg(lumina2_model, 100.0, -0.5)
    with pytest.raises(NodeInputError, match="cfg_trunc"):
        renorm_cfg(lumina2_model, float("nan"), 1.0)


def test_a_sample_with_the_patch_follows_the_direct_computation(lumina2_model):
    """KSampler on the tiny Lumina 2 with RenormCFG equals KSampler with a hook computing the same
    guidance here from the two predictions, and differs from plain CFG (the bound acts)."""
    from nodes.lumina2_nodes import renorm_cfg
    from nodes.sampling import ksampler

    def direct(args):
        t = float(args["timestep"].flatten()[0])
        return args["input"] - _direct(args["cond_denoised"], args["uncond_denoised"], float(args["cond_scale"]),
                                       t, 16, 100.0, 1.0)

    (patched,) = renorm_cfg(lumina2_model, 100.0, 1.0)
    reference = lumina2_model.clone()
    reference.set_option("sampler_cfg_function", direct)
    ctx = torch.randn(1, 5, 32, generator=torch.Generator().manual_seed(4))
    positive = [[ctx, {"pooled_output": None}]]
    negative = [[torch.zeros_like(ctx), {"pooled_output": None}]]
    latent = {"samples": torch.zeros(1, 16, 4, 4)}
    run = [ksampler(m, 3, 2, 4.0, "euler", "simple", positive, negative, latent)[0]["samples"]
           for m in (patched, reference, lumina2_model)]
    torch.testing.assert_close(run[0], run[1], atol=1e-5, rtol=1e-5)
    assert not torch.allclose(run[0], run[2], atol=1e-3)
