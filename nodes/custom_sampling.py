"""Custom sampling nodes: SamplerCustom, SamplerCustomAdvanced, the NOISE nodes (RandomNoise,
DisableNoise, AddNoise) and the GUIDER nodes (CFGGuider, BasicGuider, DualCFGGuider, PerpNegGuider).

ComfyUI 0.3.64's names, sockets and semantics (comfy_extras/nodes_custom_sampler.py,
nodes_perpneg.py). The runtime objects are comfy_core's (`sampling.guider`, `sampling.perp_neg`,
`sampling.noise_object`, `sampling.guider`); KSampler samples through the same
`CFGGuider.sample`, so SamplerCustomAdvanced with CFGGuider + KSamplerSelect + BasicScheduler +
RandomNoise gives KSampler's latent bit for bit. Both samplers also return `denoised_output`:
the last step's x0 prediction in VAE latent space (the output itself when no step ran).
"""
from __future__ import annotations

from typing import Any

from graph.native import Boolean, Combo, Float, Input, Int, Output, node
import nodes.checks as checks
from nodes.errors import NodeInputError, describe
from nodes.sampling import MAX_SEED, step_callback
from nodes.scheduler_nodes import sigmas_input

MODULE = "comfy_extras.nodes_custom_sampler"
CATEGORY = "sampling/custom_sampling"
GUIDERS = "sampling/custom_sampling/guiders"
NOISE = "sampling/custom_sampling/noise"


def _cfg(name: str = "cfg") -> Any:
    return Float(name, default=8.0, min=0.0, max=100.0, step=0.1, round=0.01)


def _seed() -> Any:
    return Int("noise_seed", default=0, min=0, max=MAX_SEED, control_after_generate=True)


def _require(value: Any, attribute: str, input_name: str, expected: str) -> Any:
    if not hasattr(value, attribute):
        raise NodeInputError(input_name, expected, describe(value))
    return value


def _outputs(model: Any, latent: dict, samples: Any, store: dict) -> tuple[dict, dict]:
    """(output, denoised_output) LATENTs, other keys kept as ComfyUI's `latent.copy()`."""
    from comfy_core.sampling.guider import process_latent_out

    out = dict(latent)
    out["samples"] = samples
    if "x0" not in store:
        return out, out
    denoised = dict(latent)
    # a nested run's callback gets nested x0: processed part by part (ComfyUI's NestedTensor arithmetic)
    denoised["samples"] = process_latent_out(model.get_model_object("latent_format"), store["x0"].cpu())
    return out, denoised


@node("SamplerCustom", category=CATEGORY, display_name="SamplerCustom", python_module=MODULE,
      inputs=[Input("model", "MODEL"), Boolean("add_noise", default=True), _seed(), _cfg(),
              Input("positive", "CONDITIONING"), Input("negative", "CONDITIONING"), Input("sampler", "SAMPLER"),
              Input("sigmas", "SIGMAS"), Input("latent_image", "LATENT")],
      outputs=[Output("LATENT", "output"), Output("LATENT", "denoised_output")])
def sampler_custom(model: Any, add_noise: bool, noise_seed: int, cfg: float, positive: Any, negative: Any,
                   sampler: Any, sigmas: Any, latent_image: dict) -> tuple[dict, dict]:
    """CFG sampling with any SAMPLER over any SIGMAS (ComfyUI `comfy.sample.sample_custom`)."""
    from comfy_core.sampling.guider import cfg_guider
    from comfy_core.sampling.noise_object import EmptyNoise, RandomNoise

    from comfy_core.sampling.guider import fit_latent_input

    checks.model(model)
    checks.latent(latent_image, "latent_image", ndims=checks.sampled_latent_ndims(model), nested=True)
    latent_image = fit_latent_input(model, latent_image)
    samples = latent_image["samples"]
    _require(sampler, "sample", "sampler", "a SAMPLER")
    sigmas = sigmas_input(sigmas)
    noise = (RandomNoise(noise_seed) if add_noise else EmptyNoise()).generate_noise(latent_image)
    store: dict = {}
    guider = cfg_guider(model, checks.conditioning(positive, "positive"), checks.conditioning(negative, "negative"),
                        cfg)
    out = guider.sample(noise, samples, sampler, sigmas, denoise_mask=latent_image.get("noise_mask"),
                        callback=step_callback(model, sigmas.shape[-1] - 1, store), disable_pbar=True, seed=noise_seed)
    return _outputs(model, latent_image, out, store)


@node("SamplerCustomAdvanced", category=CATEGORY, display_name="SamplerCustomAdvanced", python_module=MODULE,
      inputs=[Input("noise", "NOISE"), Input("guider", "GUIDER"), Input("sampler", "SAMPLER"),
              Input("sigmas", "SIGMAS"), Input("latent_image", "LATENT")],
      outputs=[Output("LATENT", "output"), Output("LATENT", "denoised_output")])
def sampler_custom_advanced(noise: Any, guider: Any, sampler: Any, sigmas: Any,
                            latent_image: dict) -> tuple[dict, dict]:
    """`guider.sample` with the noise object's noise and seed."""
    _require(noise, "generate_noise", "noise", "a NOISE (an object with generate_noise)")
    _require(guider, "sample", "guider", "a GUIDER")
    _require(sampler, "sample", "sampler", "a SAMPLER")
    model = guider.model_patcher
    checks.latent(latent_image, "latent_image", ndims=checks.sampled_latent_ndims(model), nested=True)
    if hasattr(model, "get_model_object"):  # a pack's guider may hold something else
        from comfy_core.sampling.guider import fit_latent_input

        latent_image = fit_latent_input(model, latent_image)
    samples = latent_image["samples"]
    sigmas = sigmas_input(sigmas)
    store: dict = {}
    out = guider.sample(noise.generate_noise(latent_image), samples, sampler, sigmas,
                        denoise_mask=latent_image.get("noise_mask"), callback=step_callback(model, sigmas.shape[-1] - 1, store),
                        disable_pbar=True, seed=noise.seed)
    return _outputs(model, latent_image, out.to(samples.device), store)


# -- noise -------------------------------------------------------------------------------------

@node("RandomNoise", category=NOISE, display_name="RandomNoise", python_module=MODULE,
      inputs=[_seed()], outputs=[Output("NOISE")])
def random_noise(noise_seed: int) -> tuple:
    from comfy_core.sampling.noise_object import RandomNoise

    return (RandomNoise(noise_seed),)


@node("DisableNoise", category=NOISE, display_name="DisableNoise", python_module=MODULE, outputs=[Output("NOISE")])
def disable_noise() -> tuple:
    from comfy_core.sampling.noise_object import EmptyNoise

    return (EmptyNoise(),)


@node("AddNoise", category="_for_testing/custom_sampling/noise", display_name="AddNoise", python_module=MODULE,
      inputs=[Input("model", "MODEL"), Input("noise", "NOISE"), Input("sigmas", "SIGMAS"),
              Input("latent_image", "LATENT")],
      outputs=[Output("LATENT")])
def add_noise(model: Any, noise: Any, sigmas: Any, latent_image: dict) -> tuple:
    """The latent noised to the schedule's span `|sigmas[0] - sigmas[-1]|` (or sigmas[0] alone) as a
    sampler would start from it, back in VAE space; NaN/inf become 0. Empty sigmas: unchanged."""
    import torch

    from comfy_core.sampling.guider import process_latent_in, process_latent_out

    sigmas = sigmas_input(sigmas)
    if len(sigmas) == 0:
        return (latent_image,)
    checks.model(model)
    _require(noise, "generate_noise", "noise", "a NOISE (an object with generate_noise)")
    samples = checks.latent(latent_image, "latent_image")
    noisy = noise.generate_noise(latent_image)
    ms = model.get_model_object("model_sampling")
    latent_format = model.get_model_object("latent_format")
    scale = torch.abs(sigmas[0] - sigmas[-1]) if len(sigmas) > 1 else sigmas[0]
    if torch.count_nonzero(samples) > 0:  # the empty latent is not shifted
        samples = process_latent_in(latent_format, samples)
    noisy = process_latent_out(latent_format, ms.noise_scaling(scale, noisy, samples))
    out = dict(latent_image)
    out["samples"] = torch.nan_to_num(noisy, nan=0.0, posinf=0.0, neginf=0.0)
    return (out,)


# -- guiders -----------------------------------------------------------------------------------

@node("CFGGuider", category=GUIDERS, display_name="CFGGuider", python_module=MODULE,
      inputs=[Input("model", "MODEL"), Input("positive", "CONDITIONING"), Input("negative", "CONDITIONING"), _cfg()],
      outputs=[Output("GUIDER")])
def cfg_guider_node(model: Any, positive: Any, negative: Any, cfg: float) -> tuple:
    from comfy_core.sampling.guider import cfg_guider

    return (cfg_guider(checks.model(model), checks.conditioning(positive, "positive"),
                       checks.conditioning(negative, "negative"), cfg),)


@node("BasicGuider", category=GUIDERS, display_name="BasicGuider", python_module=MODULE,
      inputs=[Input("model", "MODEL"), Input("conditioning", "CONDITIONING")], outputs=[Output("GUIDER")])
def basic_guider(model: Any, conditioning: Any) -> tuple:
    from comfy_core.sampling.guider import BasicGuider

    guider = BasicGuider(checks.model(model))
    guider.set_conds(checks.conditioning(conditioning))
    return (guider,)


@node("DualCFGGuider", category=GUIDERS, display_name="DualCFGGuider", python_module=MODULE,
      inputs=[Input("model", "MODEL"), Input("cond1", "CONDITIONING"), Input("cond2", "CONDITIONING"),
              Input("negative", "CONDITIONING"), _cfg("cfg_conds"), _cfg("cfg_cond2_negative"),
              Combo("style", ["regular", "nested"])],
      outputs=[Output("GUIDER")])
def dual_cfg_guider(model: Any, cond1: Any, cond2: Any, negative: Any, cfg_conds: float, cfg_cond2_negative: float,
                    style: str) -> tuple:
    from comfy_core.sampling.guider import DualCFGGuider

    if style not in ("regular", "nested"):
        raise NodeInputError("style", "one of ['regular', 'nested']", repr(style))
    guider = DualCFGGuider(checks.model(model))
    guider.set_conds(checks.conditioning(cond1, "cond1"), checks.conditioning(cond2, "cond2"),
                     checks.conditioning(negative, "negative"))
    guider.set_cfg(cfg_conds, cfg_cond2_negative, nested=style == "nested")
    return (guider,)


@node("PerpNegGuider", category="_for_testing", display_name=None, experimental=True,
      python_module="comfy_extras.nodes_perpneg",
      inputs=[Input("model", "MODEL"), Input("positive", "CONDITIONING"), Input("negative", "CONDITIONING"),
              Input("empty_conditioning", "CONDITIONING"), _cfg(),
              Float("neg_scale", default=1.0, min=0.0, max=100.0, step=0.01)],
      outputs=[Output("GUIDER")])
def perp_neg_guider(model: Any, positive: Any, negative: Any, empty_conditioning: Any, cfg: float,
                    neg_scale: float) -> tuple:
    from comfy_core.sampling.perp_neg import PerpNegGuider

    guider = PerpNegGuider(checks.model(model))
    guider.set_conds(checks.conditioning(positive, "positive"), checks.conditioning(negative, "negative"),
                     checks.conditioning(empty_conditioning, "empty_conditioning"))
    guider.set_cfg(cfg, neg_scale)
    return (guider,)
