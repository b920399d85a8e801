"""Whole FLUX.2 samples against an independent implementation: diffusers' own `Flux2KleinPipeline`
and `Flux2Pipeline` denoising loops (test-only; their transformer, scheduler and VAE decode) and
ours (the UNETLoader file, ComfyUI's Flux2Scheduler sigmas, the guider + euler through
`sample_custom`, the VAELoader file's decode), from the same initial noise and text states, on
tiny random weights:

- Klein base: CFG 4 with a negative prompt (CFGGuider; diffusers' `is_distilled=False`);
- Klein distilled: CFG 1, the positive prompt alone;
- dev: the guidance embedding (FluxGuidance 4 on the conditioning, BasicGuider; diffusers'
  `guidance_scale` is dev's embedded guidance).

The text states are handed over directly (the text encoders have their own parity tests): ours get
the encoder's short states and front-pad them with zeros to 512 tokens as ComfyUI's
`model_base.Flux2` does; diffusers gets that padded tensor as `prompt_embeds` (its text ids count
the 512 positions, as ours). Diffusers derives its schedule itself (`compute_empirical_mu`, the
exponential time shift of FlowMatchEulerDiscreteScheduler); the test checks it is ComfyUI's before
comparing the latents (1e-4) and the decoded images (2 levels of 255).
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

pytest.importorskip("diffusers")
from diffusers import (FlowMatchEulerDiscreteScheduler, Flux2KleinPipeline, Flux2Pipeline,  # noqa: E402
                       Flux2Transformer2DModel)

from tests.fixtures.dit_checkpoints import save  # noqa: E402
from tests.fixtures.flux2_files import (CONTEXT, diffusers_flux2_kwargs, diffusers_flux2_vae,  # noqa: E402
                                        tiny_flux2_state_dict, tiny_flux2_vae_state_dict, to_diffusers_layout)

LEVELS = 4  # the released VAE's 8x (16x with the 2x2 patches): Flux2Scheduler's token count is the latent's
LATENT_SIDE = 4  # 64 x 64 pixels, 16 image tokens
SIDE = LATENT_SIDE * 16
TEXT_TOKENS = 7
GUIDANCE = 4.0


def _diffusers_pipeline(dev: bool, dit: dict, vae: dict) -> Flux2Pipeline | Flux2KleinPipeline:
    transformer = Flux2Transformer2DModel(**diffusers_flux2_kwargs(guidance=dev))
    transformer.load_state_dict(to_diffusers_layout(dit), strict=True)
    # FLUX.2's scheduler config: the shift comes from `mu` (exponential time shift)
    scheduler = FlowMatchEulerDiscreteScheduler(num_train_timesteps=1000, shift=3.0, use_dynamic_shifting=True,
                                                time_shift_type="exponential")
    parts = dict(scheduler=scheduler, vae=diffusers_flux2_vae(vae, levels=LEVELS), text_encoder=None, tokenizer=None,
                 transformer=transformer.eval())
    pipe = Flux2Pipeline(**parts) if dev else Flux2KleinPipeline(**parts, is_distilled=False)
    pipe.set_progress_bar_config(disable=True)
    return pipe


def _ours(unet_path: Path, vae_path: Path, noise: torch.Tensor, positive: list, negative: list, steps: int,
          cfg: float) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    from comfy_core.families.flux2.schedule import flux2_sigmas
    from comfy_core.loading import load_vae
    from comfy_core.sampling.ksampler import sample_custom
    from comfy_core.split.diffusion_model import load_diffusion_model

    model = load_diffusion_model(unet_path)
    sigmas = flux2_sigmas(steps, SIDE, SIDE)  # Flux2Scheduler(steps, width, height)
    latent = sample_custom(model, noise, cfg, "euler", sigmas, positive, negative, torch.zeros_like(noise),
                           disable_pbar=True)
    image = load_vae(vae_path).decode(latent)  # [1, H, W, 3] in 0..1
    return sigmas, latent, image


def _padded(states: torch.Tensor) -> torch.Tensor:  # model_base.Flux2: zeros in front, to 512 tokens
    return torch.nn.functional.pad(states, (0, 0, 512 - states.shape[1], 0))


@pytest.mark.parametrize("variant, steps, cfg", [("klein", 3, 4.0), ("klein", 2, 1.0), ("dev", 3, 1.0)],
                         ids=["klein-base-cfg4", "klein-distilled", "dev-guidance4"])
def test_sample_matches_diffusers_pipeline(tmp_path: Path, variant: str, steps: int, cfg: float) -> None:
    dev = variant == "dev"
    dit = tiny_flux2_state_dict(seed=3, guidance=dev)
    vae = tiny_flux2_vae_state_dict(seed=4, levels=LEVELS)
    unet_path, vae_path = save(dit, tmp_path / "flux2.safetensors"), save(vae, tmp_path / "flux2-vae.safetensors")
    gen = torch.Generator().manual_seed(11)
    noise = torch.randn(1, 128, LATENT_SIDE, LATENT_SIDE, generator=gen)
    positive = torch.randn(1, TEXT_TOKENS, CONTEXT, generator=gen)
    negative = torch.randn(1, TEXT_TOKENS - 2, CONTEXT, generator=gen)
    extra = {"guidance": GUIDANCE} if dev else {}  # FluxGuidance

    sigmas, latent, image = _ours(unet_path, vae_path, noise.clone(), [[positive, extra]], [[negative, extra]],
                                  steps, cfg)

    pipe = _diffusers_pipeline(dev, dit, vae)
    final: dict[str, torch.Tensor] = {}

    def keep(_pipe, _i, _t, kwargs):  # the packed latents after each step
        final["latents"] = kwargs["latents"]
        return {}

    call = dict(prompt_embeds=_padded(positive), latents=noise.clone(), height=SIDE, width=SIDE,
                num_inference_steps=steps, output_type="np", callback_on_step_end=keep)
    if dev:
        call.update(guidance_scale=GUIDANCE)
    else:
        call.update(guidance_scale=cfg, negative_prompt_embeds=_padded(negative))
    with torch.no_grad():
        theirs = pipe(**call).images  # [1, H, W, 3] float in 0..1
    # their schedule is ComfyUI's Flux2Scheduler's, which is shifted (the check is not trivial)
    assert (sigmas[1:-1] - torch.linspace(1, 0, steps + 1)[1:-1]).min() > 0.05
    assert torch.allclose(pipe.scheduler.sigmas.float(), sigmas, atol=1e-6), (pipe.scheduler.sigmas, sigmas)
    their_latent = final["latents"].reshape(1, LATENT_SIDE, LATENT_SIDE, 128).permute(0, 3, 1, 2)  # unpack [B, hw, C]
    assert (latent - their_latent).abs().max().item() < 1e-4
    ours_u8 = np.clip(255.0 * image.float().numpy(), 0, 255).astype(np.int16)
    theirs_u8 = np.clip(255.0 * theirs, 0, 255).astype(np.int16)
    assert ours_u8.shape == theirs_u8.shape == (1, SIDE, SIDE, 3)
    assert np.abs(ours_u8 - theirs_u8).max() <= 2
    assert ours_u8.std() > 5  # a picture, not a flat field
