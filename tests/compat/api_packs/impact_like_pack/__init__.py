"""A fixture pack that samples the way Impact-Pack and UltimateSDUpscale do
(tests/compat/test_compat_impact.py).

- `ImpactLikeKSamplerBasicPipe`: a BASIC_PIPE tuple `(model, clip, vae, positive, negative)`
  sampled as Impact's `impact_sampling.sample_with_custom_noise`: `comfy.samplers.sampler_object`,
  sigmas from `comfy.samplers.calculate_sigmas` on the model's `model_sampling`, noise from
  `comfy_extras.nodes_custom_sampler.Noise_RandomNoise`, `latent_preview.prepare_callback`,
  `comfy.sample.sample_custom`;
- `ImpactLikeSDESampler`: Impact's own `comfy.samplers.KSAMPLER` around
  `comfy.k_diffusion.sampling.sample_dpmpp_sde`, with the Brownian-tree noise sampler it builds
  (`BrownianTreeNoiseSampler(x, sigma_min, sigma_max, seed=seed, cpu=True)`);
- `UsduLikeTileSampler`: UltimateSDUpscale's `(samples, _) = SamplerCustom.execute(**kwargs)` on
  a V3 node called directly.
"""
import comfy.k_diffusion.sampling as k_diffusion_sampling
import comfy.model_management
import comfy.sample
import comfy.samplers
import comfy.utils
import latent_preview
from comfy_extras import nodes_custom_sampler
from comfy_extras.nodes_custom_sampler import Noise_RandomNoise, SamplerCustom


def impact_sigmas(model, scheduler, steps, denoise):
    """Impact's sigma computation: the schedule of `steps / denoise` steps, the tail kept."""
    total = steps if denoise >= 1.0 else int(steps / denoise)
    sigmas = comfy.samplers.calculate_sigmas(model.get_model_object("model_sampling"), scheduler, total).cpu()
    return sigmas[-(steps + 1):]


def sample_with_custom_noise(model, seed, cfg, sampler, sigmas, positive, negative, latent):
    samples = comfy.sample.fix_empty_latent_channels(model, latent["samples"])
    out = dict(latent, samples=samples)
    noise = Noise_RandomNoise(seed).generate_noise(out)
    x0_output = {}
    callback = latent_preview.prepare_callback(model, sigmas.shape[-1] - 1, x0_output)
    result = comfy.sample.sample_custom(model, noise, cfg, sampler, sigmas, positive, negative, samples,
                                        noise_mask=latent.get("noise_mask"), callback=callback,
                                        disable_pbar=not comfy.utils.PROGRESS_BAR_ENABLED, seed=seed)
    out["samples"] = result.to(comfy.model_management.intermediate_device())
    return out


class ImpactLikeKSamplerBasicPipe:
    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {"basic_pipe": ("BASIC_PIPE",), "seed": ("INT", {"default": 0}),
                             "steps": ("INT", {"default": 2}), "cfg": ("FLOAT", {"default": 3.0}),
                             "sampler_name": (comfy.samplers.KSampler.SAMPLERS,),
                             "scheduler": (comfy.samplers.KSampler.SCHEDULERS,),
                             "latent_image": ("LATENT",), "denoise": ("FLOAT", {"default": 1.0})}}

    RETURN_TYPES = ("BASIC_PIPE", "LATENT")
    FUNCTION = "sample"
    CATEGORY = "impact_like"

    def sample(self, basic_pipe, seed, steps, cfg, sampler_name, scheduler, latent_image, denoise=1.0):
        model, _clip, _vae, positive, negative = basic_pipe
        sampler = comfy.samplers.sampler_object(sampler_name)
        sigmas = impact_sigmas(model, scheduler, steps, denoise)
        return basic_pipe, sample_with_custom_noise(model, seed, cfg, sampler, sigmas, positive, negative, latent_image)


class ImpactLikeSDESampler:
    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {"model": ("MODEL",), "positive": ("CONDITIONING",), "negative": ("CONDITIONING",),
                             "latent_image": ("LATENT",), "seed": ("INT", {"default": 0}),
                             "steps": ("INT", {"default": 2}), "cfg": ("FLOAT", {"default": 3.0})}}

    RETURN_TYPES = ("LATENT",)
    FUNCTION = "sample"
    CATEGORY = "impact_like"

    def sample(self, model, positive, negative, latent_image, seed, steps, cfg):
        sigmas = impact_sigmas(model, "karras", steps, 1.0)
        sigma_min, sigma_max = sigmas[sigmas > 0].min(), sigmas.max()

        def sample_dpmpp_sde(model, x, sigmas, **kwargs):
            kwargs["noise_sampler"] = k_diffusion_sampling.BrownianTreeNoiseSampler(
                x, sigma_min, sigma_max, seed=seed, cpu=True)
            return k_diffusion_sampling.sample_dpmpp_sde(model, x, sigmas, **kwargs)

        sampler = comfy.samplers.KSAMPLER(sample_dpmpp_sde, {}, {})
        return (sample_with_custom_noise(model, seed, cfg, sampler, sigmas, positive, negative, latent_image),)


class UsduLikeTileSampler:
    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {"model": ("MODEL",), "positive": ("CONDITIONING",), "negative": ("CONDITIONING",),
                             "latent_image": ("LATENT",), "sampler": ("SAMPLER",), "sigmas": ("SIGMAS",),
                             "seed": ("INT", {"default": 0}), "cfg": ("FLOAT", {"default": 3.0})}}

    RETURN_TYPES = ("LATENT",)
    FUNCTION = "sample"
    CATEGORY = "impact_like"

    def sample(self, model, positive, negative, latent_image, sampler, sigmas, seed, cfg):
        kwargs = dict(model=model, add_noise=True, noise_seed=seed, cfg=cfg, positive=positive, negative=negative,
                      sampler=sampler, sigmas=sigmas, latent_image=latent_image)
        if hasattr(SamplerCustom, "execute"):
            (samples, _) = SamplerCustom.execute(**kwargs)
        else:
            custom = SamplerCustom()
            (samples, _) = getattr(custom, custom.FUNCTION)(**kwargs)
        return (samples,)


NODE_CLASS_MAPPINGS = {
    "ImpactLikeKSamplerBasicPipe": ImpactLikeKSamplerBasicPipe,
    "ImpactLikeSDESampler": ImpactLikeSDESampler,
    "UsduLikeTileSampler": UsduLikeTileSampler,
}
