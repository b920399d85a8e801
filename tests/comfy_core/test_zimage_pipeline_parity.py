"""A whole Z-Image sample against an independent implementation: diffusers' own `ZImagePipeline`
denoising loop (test-only: its transformer, its FlowMatchEulerDiscreteScheduler with Z-Image's
shift 3, its CFG and its VAE decode) and ours (the UNETLoader file, the model's own "simple"
schedule, CFGGuider + euler through `sample_custom`, the VAELoader file's decode), from the same
initial noise and text states, on tiny random weights.

The text states are handed over directly (the Qwen3 encoder has its own parity tests), 32 tokens
each, so neither side pads the caption. diffusers' guidance scale `g` is `pos + g * (pos - neg)`,
ComfyUI's CFG `1 + g`; `g = 0` is Z-Image Turbo's single pass. diffusers derives its sigmas itself
(`linspace(1, 1/n, n)` shifted by 3: the model's "simple" schedule for step counts that divide
1000, as these); the test checks they are ComfyUI's before comparing the latents (1e-4, in the
sampler's space) and the decoded images (2 levels of 255).
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

pytest.importorskip("diffusers")
from diffusers import (AutoencoderKL, FlowMatchEulerDiscreteScheduler, ZImagePipeline,  # noqa: E402
                       ZImageTransformer2DModel)

from tests.fixtures.dit_checkpoints import save  # noqa: E402
from tests.fixtures.vae16_files import diffusers_vae16_config, tiny_vae16_state_dict, write_tiny_vae16  # noqa: E402
from tests.fixtures.zimage_files import (CAP_WIDTH, diffusers_zimage_kwargs, tiny_zimage_state_dict,  # noqa: E402
                                         to_diffusers_layout)

LATENT_SIDE = 8  # 64 x 64 pixels (the tiny VAE is 8x down), 16 image tokens in 2x2 patches
TEXT_TOKENS = 32  # a multiple of 32: no caption padding on either side
VAE_SEED = 5
SCALE, SHIFT = 0.3611, 0.1159  # Flux's latent format, Z-Image's


def _diffusers_pipeline(dit: dict) -> ZImagePipeline:
    transformer = ZImageTransformer2DModel(**diffusers_zimage_kwargs())
    transformer.load_state_dict(to_diffusers_layout(dit), strict=True)
    vae = AutoencoderKL(**diffusers_vae16_config())
    vae.load_state_dict(tiny_vae16_state_dict("diffusers", seed=VAE_SEED), strict=True)
    # Z-Image's scheduler config: a fixed shift of 3, no dynamic shifting
    scheduler = FlowMatchEulerDiscreteScheduler(num_train_timesteps=1000, shift=3.0, use_dynamic_shifting=False)
    pipe = ZImagePipeline(scheduler=scheduler, vae=vae.eval(), text_encoder=None, tokenizer=None,
                          transformer=transformer.eval())
    pipe.set_progress_bar_config(disable=True)
    return pipe


def _ours(unet_path: Path, vae_path: Path, noise: torch.Tensor, positive: torch.Tensor, negative: torch.Tensor,
          steps: int, cfg: float) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    from comfy_core.loading import load_vae
    from comfy_core.sampling.ksampler import sample_custom
    from comfy_core.sampling.schedulers import calculate_sigmas
    from comfy_core.split.diffusion_model import load_diffusion_model

    model = load_diffusion_model(unet_path)
    sigmas = calculate_sigmas(model.get_model_object("model_sampling"), "simple", steps)
    latent = sample_custom(model, noise, cfg, "euler", sigmas, [[positive, {}]], [[negative, {}]],
                           torch.zeros_like(noise), disable_pbar=True)  # process_latent_out applied
    image = load_vae(vae_path).decode(latent)  # [1, H, W, 3] in 0..1
    return sigmas, latent, image


@pytest.mark.parametrize("steps, guidance", [(4, 3.0), (2, 0.0)], ids=["base-cfg4-4steps", "turbo-cfg1-2steps"])
def test_zimage_sample_matches_diffusers_pipeline(tmp_path: Path, steps: int, guidance: float) -> None:
    dit = tiny_zimage_state_dict(seed=3)
    unet_path = save(dit, tmp_path / "z_image_tiny.safetensors")
    vae_path = write_tiny_vae16(tmp_path / "ae.safetensors", "bfl", seed=VAE_SEED)
    gen = torch.Generator().manual_seed(11)
    noise = torch.randn(1, 16, LATENT_SIDE, LATENT_SIDE, generator=gen)
    positive = torch.randn(1, TEXT_TOKENS, CAP_WIDTH, generator=gen)
    negative = torch.randn(1, TEXT_TOKENS, CAP_WIDTH, generator=gen)

    sigmas, latent, image = _ours(unet_path, vae_path, noise.clone(), positive, negative, steps, 1.0 + guidance)

    pipe = _diffusers_pipeline(dit)
    final: dict[str, torch.Tensor] = {}

    def keep(_pipe, _i, _t, kwargs):  # the latents after each step
        final["latents"] = kwargs["latents"]
        return {}

    side = LATENT_SIDE * 8
    with torch.no_grad():
        theirs = pipe(prompt_embeds=[positive[0]], negative_prompt_embeds=[negative[0]], latents=noise.clone(),
                      height=side, width=side, num_inference_steps=steps, guidance_scale=guidance,
                      output_type="np", callback_on_step_end=keep).images  # [1, H, W, 3] float in 0..1
    # their schedule is the model's "simple" one, which is shifted (the check is not trivial)
    assert (sigmas[1:-1] - torch.linspace(1, 0, steps + 1)[1:-1]).min() > 0.05
    assert torch.allclose(pipe.scheduler.sigmas.float(), sigmas, atol=1e-6), (pipe.scheduler.sigmas, sigmas)
    ours_model_space = (latent - SHIFT) * SCALE  # the sampler's x, before process_latent_out
    assert (ours_model_space - final["latents"]).abs().max().item() < 1e-4
    ours_u8 = np.clip(255.0 * image.float().numpy(), 0, 255).astype(np.int16)
    theirs_u8 = np.clip(255.0 * theirs, 0, 255).astype(np.int16)
    assert ours_u8.shape == theirs_u8.shape == (1, side, side, 3)
    assert np.abs(ours_u8 - theirs_u8).max() <= 2
    assert ours_u8.std() > 5  # a picture, not a flat field
