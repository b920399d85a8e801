"""A fixture pack that uses ComfyUI's sampling API the way real packs do (tests/compat/test_compat_samplers.py).

- registers a sampler the smZNodes way (`k_diffusion_sampling.sample_<name> = fn`, the name
  inserted into `KSampler.SAMPLERS`) and a scheduler (`SCHEDULER_HANDLERS[name] =
  SchedulerHandler(fn)` + `SCHEDULER_NAMES.append`), removed again by `unregister()`;
- samples with `comfy.samplers.KSampler(...).sample` (Impact-Pack / essentials / Easy-Use),
- with a `CFGGuider` subclass overriding `predict_noise` (KJNodes, Easy-Use),
- with a custom `KSAMPLER` whose function calls `comfy.k_diffusion.sampling.sample_euler`,
- and with a replaced `comfy.samplers.sampling_function` (AnimateDiff) that calls
  `calc_cond_batch` and `cfg_function` itself.
"""
import comfy.k_diffusion.sampling
import comfy.sample
import comfy.samplers
import torch

SAMPLER = "samplers_pack_euler"
SCHEDULER = "samplers_pack_karras_rho5"
CALLS = {"sampler": 0, "sampling_function": 0}


def sample_samplers_pack_euler(model, x, sigmas, extra_args=None, callback=None, disable=None):
    """The pack's sampler: counts its runs and delegates to ComfyUI's euler."""
    CALLS["sampler"] += 1
    return comfy.k_diffusion.sampling.sample_euler(model, x, sigmas, extra_args=extra_args, callback=callback,
                                                   disable=disable)


def _karras_rho5(n, sigma_min, sigma_max):
    return comfy.k_diffusion.sampling.get_sigmas_karras(n, sigma_min, sigma_max, rho=5.0)


def register():
    from comfy.samplers import KSampler, k_diffusion_sampling

    if SAMPLER not in KSampler.SAMPLERS:
        KSampler.SAMPLERS.insert(KSampler.SAMPLERS.index("dpmpp_2m") + 1, SAMPLER)
        setattr(k_diffusion_sampling, "sample_" + SAMPLER, sample_samplers_pack_euler)
    if SCHEDULER not in comfy.samplers.SCHEDULER_NAMES:
        comfy.samplers.SCHEDULER_HANDLERS[SCHEDULER] = comfy.samplers.SchedulerHandler(_karras_rho5, use_ms=False)
        comfy.samplers.SCHEDULER_NAMES.append(SCHEDULER)


def unregister():
    from comfy.samplers import KSampler, k_diffusion_sampling

    if SAMPLER in KSampler.SAMPLERS:
        KSampler.SAMPLERS.remove(SAMPLER)
    if hasattr(k_diffusion_sampling, "sample_" + SAMPLER):
        delattr(k_diffusion_sampling, "sample_" + SAMPLER)
    if SCHEDULER in comfy.samplers.SCHEDULER_NAMES:
        comfy.samplers.SCHEDULER_NAMES.remove(SCHEDULER)
    comfy.samplers.SCHEDULER_HANDLERS.pop(SCHEDULER, None)


register()


class HalfwayGuider(comfy.samplers.CFGGuider):
    """A guider subclass: the prediction pulled halfway towards the plain positive one."""

    def predict_noise(self, x, timestep, model_options={}, seed=None):  # noqa: B006 (ComfyUI's signature)
        guided = super().predict_noise(x, timestep, model_options, seed)
        (positive,) = comfy.samplers.calc_cond_batch(self.inner_model, [self.conds.get("positive")], x, timestep,
                                                     model_options)
        return 0.5 * (guided + positive)


def euler_via_k_diffusion(model, x, sigmas, extra_args=None, callback=None, disable=None, scale=1.0):
    """A KSAMPLER function: ComfyUI's euler, its result scaled by an option."""
    return comfy.k_diffusion.sampling.sample_euler(model, x, sigmas, extra_args=extra_args, callback=callback,
                                                   disable=disable) * scale


def mirrored_sampling_function(model, x, timestep, uncond, cond, cond_scale, model_options={}, seed=None):  # noqa: B006
    """A replacement for `comfy.samplers.sampling_function`: ComfyUI's algorithm, counted."""
    CALLS["sampling_function"] += 1
    uncond_ = None if cond_scale == 1.0 else uncond
    cond_pred, uncond_pred = comfy.samplers.calc_cond_batch(model, [cond, uncond_], x, timestep, model_options)
    return comfy.samplers.cfg_function(model, cond_pred, uncond_pred, cond_scale, x, timestep, model_options,
                                       cond=cond, uncond=uncond_)


def _common(model, seed, steps, cfg, positive, negative, latent):
    samples = comfy.sample.fix_empty_latent_channels(model, latent["samples"])
    noise = comfy.sample.prepare_noise(samples, seed)
    return samples, noise


class ObjectKSampler:
    """Samples with `comfy.samplers.KSampler(...).sample`, as Impact-Pack's noise nodes do."""

    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {"model": ("MODEL",), "seed": ("INT", {"default": 0}), "steps": ("INT", {"default": 2}),
                             "cfg": ("FLOAT", {"default": 3.0}),
                             "sampler_name": (comfy.samplers.KSampler.SAMPLERS,),
                             "scheduler": (comfy.samplers.KSampler.SCHEDULERS,),
                             "positive": ("CONDITIONING",), "negative": ("CONDITIONING",), "latent": ("LATENT",),
                             "denoise": ("FLOAT", {"default": 1.0})}}

    RETURN_TYPES = ("LATENT",)
    FUNCTION = "run"
    CATEGORY = "tests/samplers_pack"

    def run(self, model, seed, steps, cfg, sampler_name, scheduler, positive, negative, latent, denoise):
        samples, noise = _common(model, seed, steps, cfg, positive, negative, latent)
        sampler = comfy.samplers.KSampler(model, steps=steps, device="cpu", sampler=sampler_name, scheduler=scheduler,
                                          denoise=denoise, model_options=model.model_options)
        out = sampler.sample(noise, positive, negative, cfg=cfg, latent_image=samples, seed=seed)
        return ({"samples": out},)


class GuiderSampler:
    """Samples with a `CFGGuider` subclass and a custom `KSAMPLER` (KJNodes / Easy-Use style)."""

    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {"model": ("MODEL",), "seed": ("INT", {"default": 0}), "cfg": ("FLOAT", {"default": 3.0}),
                             "positive": ("CONDITIONING",), "negative": ("CONDITIONING",), "latent": ("LATENT",),
                             "sigmas": ("SIGMAS",), "scale": ("FLOAT", {"default": 1.0}),
                             "halfway": ("BOOLEAN", {"default": False})}}

    RETURN_TYPES = ("LATENT",)
    FUNCTION = "run"
    CATEGORY = "tests/samplers_pack"

    def run(self, model, seed, cfg, positive, negative, latent, sigmas, scale, halfway):
        samples, noise = _common(model, seed, 0, cfg, positive, negative, latent)
        guider = (HalfwayGuider if halfway else comfy.samplers.CFGGuider)(model)
        guider.set_conds(positive, negative)
        guider.set_cfg(cfg)
        sampler = comfy.samplers.KSAMPLER(euler_via_k_diffusion, extra_options={"scale": scale})
        return ({"samples": guider.sample(noise, samples, sampler, sigmas, seed=seed)},)


class ReplacedSamplingFunction:
    """Runs `comfy.sample.sample` with `comfy.samplers.sampling_function` replaced for the call."""

    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {"model": ("MODEL",), "seed": ("INT", {"default": 0}), "steps": ("INT", {"default": 2}),
                             "cfg": ("FLOAT", {"default": 3.0}), "positive": ("CONDITIONING",),
                             "negative": ("CONDITIONING",), "latent": ("LATENT",)}}

    RETURN_TYPES = ("LATENT",)
    FUNCTION = "run"
    CATEGORY = "tests/samplers_pack"

    def run(self, model, seed, steps, cfg, positive, negative, latent):
        samples, noise = _common(model, seed, steps, cfg, positive, negative, latent)
        original = comfy.samplers.sampling_function
        comfy.samplers.sampling_function = mirrored_sampling_function
        try:
            out = comfy.sample.sample(model, noise, steps, cfg, "euler", "normal", positive, negative, samples,
                                      seed=seed)
        finally:
            comfy.samplers.sampling_function = original
        return ({"samples": out},)


NODE_CLASS_MAPPINGS = {
    "SamplersPackObjectKSampler": ObjectKSampler,
    "SamplersPackGuiderSampler": GuiderSampler,
    "SamplersPackReplacedSamplingFunction": ReplacedSamplingFunction,
}
