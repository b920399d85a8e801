"""A pack's replacement of ComfyUI's `latent_preview.prepare_callback` is the sampling nodes' step
callback (Haoming02's diffusion-cg and resharpen wrap it and edit the sampler's x0 / x in place):
KSampler asks it with `(model, steps)`, SamplerCustom / SamplerCustomAdvanced with `(model,
len(sigmas) - 1, x0_output)`, and its callback gets the live tensors, so its edits change the
result. The original it wraps still reports progress and records x0."""
from __future__ import annotations

import pytest
import torch


@pytest.fixture(scope="module")
def sd1(tiny_sd1_ckpt):
    from comfy_core.loading import load_checkpoint

    return load_checkpoint(tiny_sd1_ckpt)


def _conds(clip):
    from nodes.conditioning import clip_text_encode

    return clip_text_encode("a fox", clip)[0], clip_text_encode("", clip)[0]


def _ksample(model, clip, latent):
    from nodes.sampling import common_ksampler

    positive, negative = _conds(clip)
    return common_ksampler(model, 3, 3, 5.0, "euler", "karras", positive, negative, latent)[0]["samples"]


def test_a_packs_prepare_callback_is_the_samplers_step_callback(session, sd1):
    import latent_preview

    model, clip, _vae = sd1
    latent = {"samples": torch.zeros(1, 4, 8, 8)}
    with session.activate():
        plain = _ksample(model, clip, latent)
        original = latent_preview.prepare_callback
        asked, seen = [], []

        def zeroing(model, steps, x0_output_dict=None):
            asked.append((steps, x0_output_dict is not None))
            inner = original(model, steps, x0_output_dict)

            def callback(step, x0, x, total_steps):
                seen.append((step, total_steps))
                x0.zero_()  # in place, as the packs edit the live tensors
                inner(step, x0, x, total_steps)

            return callback

        latent_preview.prepare_callback = zeroing
        try:
            zeroed = _ksample(model, clip, latent)
            # euler with x0 = 0: each step scales x by sigma_next / sigma, the last by 0 (up to rounding)
            assert float(zeroed.abs().max()) < 1e-5 * float(plain.abs().max())
            assert asked == [(3, False)] and seen == [(0, 3), (1, 3), (2, 3)]

            from nodes.custom_sampling import sampler_custom

            positive, negative = _conds(clip)
            sigmas = torch.tensor([14.6, 3.0, 0.5, 0.0])
            from comfy_core.sampling.guider import sampler_object

            out, denoised = sampler_custom(model, True, 3, 5.0, positive, negative, sampler_object("euler"), sigmas,
                                           latent)
            assert asked[-1] == (3, True)  # len(sigmas) - 1, with SamplerCustom's x0 output
            assert torch.count_nonzero(denoised["samples"]) == 0  # the original recorded the edited x0
        finally:
            del latent_preview.prepare_callback  # the built-in again
        assert torch.equal(_ksample(model, clip, latent), plain)
