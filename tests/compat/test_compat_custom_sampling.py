"""`comfy.samplers.KSAMPLER` / `CFGGuider` / `ksampler` / `sampler_object` and
`comfy.sample.sample_custom` for packs: a pack-style guider subclass and sampler run through
SamplerCustomAdvanced, and `sample_custom` equals the SamplerCustom node."""
from __future__ import annotations

import torch

from tests.nodes.test_custom_sampling import _c, _d, _toy_model


def test_pack_style_guider_and_sampler(session) -> None:
    import comfy.samplers

    from nodes.custom_sampling import random_noise, sampler_custom_advanced

    class HalfGuider(comfy.samplers.CFGGuider):  # a pack's guider: predict_noise overridden
        def predict_noise(self, x, timestep, model_options={}, seed=None):  # noqa: B006 (ComfyUI's signature)
            return 0.5 * super().predict_noise(x, timestep, model_options, seed)

    def one_step(model, x, sigmas, extra_args=None, callback=None, disable=None, scale=1.0):
        return model(x, sigmas[0] * x.new_ones([x.shape[0]]), **extra_args) * scale

    m = _toy_model()
    guider = HalfGuider(m)
    guider.set_conds(_c(0.4), _c(0.0))
    guider.set_cfg(1.0)
    sampler = comfy.samplers.KSAMPLER(one_step, extra_options={"scale": 3.0})
    out, _ = sampler_custom_advanced(random_noise(2)[0], guider, sampler, torch.tensor([2.0, 0.0]),
                                     {"samples": torch.zeros(1, 4, 8, 8)})
    x = torch.randn(1, 4, 8, 8, generator=torch.Generator().manual_seed(2)) * 2.0
    assert torch.allclose(out["samples"], 1.5 * _d(x, 2.0, 0.4) / 0.18215, atol=1e-5)
    assert comfy.samplers.ksampler("lms", {"order": 2}).extra_options == {"order": 2}
    assert comfy.samplers.sampler_object("ddim").inpaint_options == {"random": True}


def test_sample_custom_is_the_sampler_custom_node(session) -> None:
    import comfy.sample
    import comfy.samplers

    from nodes.custom_sampling import sampler_custom

    m = _toy_model()
    latent = {"samples": torch.zeros(1, 4, 8, 8)}
    sigmas = torch.tensor([5.0, 2.0, 0.0])
    sampler = comfy.samplers.sampler_object("euler_ancestral")
    noise = comfy.sample.prepare_noise(latent["samples"], 8)
    ours = comfy.sample.sample_custom(m, noise, 3.0, sampler, sigmas, _c(0.5), _c(-0.5), latent["samples"], seed=8)
    node = sampler_custom(m, True, 8, 3.0, _c(0.5), _c(-0.5), sampler, sigmas, latent)[0]["samples"]
    assert torch.equal(ours, node)
