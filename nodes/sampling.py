"""Sampler nodes: KSampler and KSamplerAdvanced, with ComfyUI's names, inputs and semantics.

Thin: a NOISE object for the seed (`comfy_core.sampling.noise_object`, honouring the latent's
`batch_index`), then `comfy_core.sampling.ksampler.sample` (ComfyUI's `comfy.sample.sample`, or
the host's replacement of it: the `sample_steps` extension point), which composes the schedule, a
sampler object and a CFG guider exactly as SamplerCustomAdvanced is given them
(nodes/custom_sampling.py; the whole chain: docs/dev/sampling.md).
The bridge to the engine is the step callback: one `progress(step, total, preview)` per step on
the running node's context, with a JPEG preview (latent2rgb or TAESD) unless the host's `preview_method` is "none"; that call raises
`graph.context.Interrupted` when the prompt is interrupted, which unwinds sampling (the model's
patches are removed by the driver's context manager).
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable

from graph.context import current
from graph.native import Combo, Float, Input, Int, Output, node
import nodes.checks as checks
from nodes._names import sampler_names, scheduler_names

if TYPE_CHECKING:
    import torch

# torch and comfy_core are imported inside the functions that run: registering these nodes and
# rendering /object_info must not import torch (server start-up, see nodes/_names.py).

MAX_SEED = 0xFFFFFFFFFFFFFFFF

_TIPS = {
    "model": "The model used for denoising the input latent.",
    "seed": "The random seed used for creating the noise.",
    "steps": "The number of steps used in the denoising process.",
    "cfg": ("The Classifier-Free Guidance scale balances creativity and adherence to the prompt. Higher values "
            "result in images more closely matching the prompt however too high values will negatively impact quality."),
    "sampler_name": "The algorithm used when sampling, this can affect the quality, speed, and style of the generated output.",
    "scheduler": "The scheduler controls how noise is gradually removed to form the image.",
    "positive": "The conditioning describing the attributes you want to include in the image.",
    "negative": "The conditioning describing the attributes you want to exclude from the image.",
    "latent_image": "The latent image to denoise.",
    "denoise": ("The amount of denoising applied, lower values will maintain the structure of the initial image "
                "allowing for image to image sampling."),
}


def progress_callback(model: Any) -> Callable[[int, torch.Tensor, torch.Tensor, int], None] | None:
    """A step callback reporting progress (and a preview) to the running node, or None outside one.

    The previewer follows the host's `preview_method` and `preview_size` (ComfyUI's
    `--preview-method` / `--preview-size`; comfy_core.sampling.preview.make_previewer), TAESD
    decoders coming from the environment's `vae_approx` folders."""
    ctx = current()
    if ctx is None:
        return None
    from comfy_core.sampling.preview import MAX_PREVIEW_RESOLUTION, make_previewer

    env = ctx.env
    method = getattr(env, "preview_method", "latent2rgb")
    previewer = None
    if method != "none":
        getter = getattr(model, "get_model_object", None)
        latent_format = getter("latent_format") if getter is not None else None
        previewer = make_previewer(method, latent_format, getattr(env, "folders", None),
                                   max_size=getattr(env, "preview_size", MAX_PREVIEW_RESOLUTION))

    def report(step: int, x0: torch.Tensor, x: torch.Tensor, total: int) -> None:
        if getattr(x0, "is_nested", False) is True:  # a nested latent's preview is its first part (the video)
            x0 = x0.unbind()[0]
        preview = previewer.preview(x0) if previewer is not None else None
        ctx.progress(step + 1, total, preview)  # raises graph.context.Interrupted to stop

    return report


def recording_callback(model: Any, x0_output: dict | None = None
                       ) -> Callable[[int, torch.Tensor, torch.Tensor, int], None] | None:
    """The sampling nodes' own step callback: `x0_output["x0"]` keeps the latest x0 (SamplerCustom's
    denoised output), and the running node gets progress and previews (`progress_callback`)."""
    report = progress_callback(model)
    if x0_output is None:
        return report

    def callback(step: int, x0: torch.Tensor, x: torch.Tensor, total: int) -> None:
        x0_output["x0"] = x0
        if report is not None:
            report(step, x0, x, total)

    return callback


def step_callback(model: Any, steps: int, x0_output: dict | None = None
                  ) -> Callable[[int, torch.Tensor, torch.Tensor, int], None] | None:
    """A sampling node's step callback, as ComfyUI's nodes get it from
    `latent_preview.prepare_callback(model, steps[, x0_output])`: a pack's replacement of that
    function when one is in force (the `prepare_callback` extension point; its callback receives
    the sampler's live x0 and x), else `recording_callback`."""
    from comfy_core import extension_points

    prepare = extension_points.current().prepare_callback
    if prepare is None:
        return recording_callback(model, x0_output)
    return prepare(model, steps) if x0_output is None else prepare(model, steps, x0_output)


def common_ksampler(model: Any, seed: int, steps: int, cfg: float, sampler_name: str,
                    scheduler: str, positive: Any, negative: Any, latent: dict, denoise: float = 1.0,
                    disable_noise: bool = False, start_step: int | None = None, last_step: int | None = None,
                    force_full_denoise: bool = False) -> tuple[dict]:
    """ComfyUI's `common_ksampler`: the parts SamplerCustomAdvanced is given (a NOISE object, the
    schedule, `sampler_object(sampler_name)`, a CFG guider) composed by `ksampler.sample`."""
    from comfy_core import extension_points
    from comfy_core.sampling.ksampler import sample as ours
    from comfy_core.sampling.noise_object import EmptyNoise, RandomNoise

    from comfy_core.sampling.guider import fit_latent_input

    checks.latent(latent, "latent_image", ndims=checks.sampled_latent_ndims(model), nested=True)
    latent = fit_latent_input(model, latent)
    samples = latent["samples"]
    noise_source = EmptyNoise() if disable_noise else RandomNoise(seed)
    noise = noise_source.generate_noise(latent)
    sample = extension_points.current().sample_steps or ours
    out_samples = sample(model, noise, steps, cfg, sampler_name, scheduler, positive, negative, samples,
                         denoise=denoise, start_step=start_step, last_step=last_step,
                         force_full_denoise=force_full_denoise, noise_mask=latent.get("noise_mask"),
                         callback=step_callback(model, steps), seed=seed)
    out = dict(latent)
    out["samples"] = out_samples
    return (out,)


def _common_inputs(seed_name: str, tips: bool = True) -> list:
    """KSampler's inputs (with its tooltips) or KSamplerAdvanced's (ComfyUI gives that one none)."""
    tip = (lambda key: {"tooltip": _TIPS[key]}) if tips else (lambda key: {})
    return [
        Input("model", "MODEL", **tip("model")),
        Int(seed_name, default=0, min=0, max=MAX_SEED, control_after_generate=True, **tip("seed")),
        Int("steps", default=20, min=1, max=10000, **tip("steps")),
        Float("cfg", default=8.0, min=0.0, max=100.0, step=0.1, round=0.01, **tip("cfg")),
        Combo("sampler_name", sampler_names, **tip("sampler_name")),
        Combo("scheduler", scheduler_names, **tip("scheduler")),
        Input("positive", "CONDITIONING", **tip("positive")),
        Input("negative", "CONDITIONING", **tip("negative")),
        Input("latent_image", "LATENT", **tip("latent_image")),
    ]


@node("KSampler", category="sampling", display_name="KSampler",
      description="Uses the provided model, positive and negative conditioning to denoise the latent image.",
      inputs=_common_inputs("seed") + [Float("denoise", default=1.0, min=0.0, max=1.0, step=0.01, tooltip=_TIPS["denoise"])],
      outputs=[Output("LATENT", tooltip="The denoised latent.")])
def ksampler(model: Any, seed: int, steps: int, cfg: float, sampler_name: str, scheduler: str, positive: Any,
             negative: Any, latent_image: dict, denoise: float = 1.0) -> tuple[dict]:
    return common_ksampler(model, seed, steps, cfg, sampler_name, scheduler, positive, negative,
                           latent_image, denoise=denoise)


@node("KSamplerAdvanced", category="sampling", display_name="KSampler (Advanced)",
      inputs=[Input("model", "MODEL"), Combo("add_noise", ["enable", "disable"])]
      + _common_inputs("noise_seed", tips=False)[1:]
      + [Int("start_at_step", default=0, min=0, max=10000), Int("end_at_step", default=10000, min=0, max=10000),
         Combo("return_with_leftover_noise", ["disable", "enable"])],
      outputs=[Output("LATENT")])
def ksampler_advanced(model: Any, add_noise: str, noise_seed: int, steps: int, cfg: float, sampler_name: str,
                      scheduler: str, positive: Any, negative: Any, latent_image: dict, start_at_step: int,
                      end_at_step: int, return_with_leftover_noise: str, denoise: float = 1.0) -> tuple[dict]:
    return common_ksampler(model, noise_seed, steps, cfg, sampler_name, scheduler, positive,
                           negative, latent_image, denoise=denoise, disable_noise=add_noise == "disable",
                           start_step=start_at_step, last_step=end_at_step,
                           force_full_denoise=return_with_leftover_noise != "enable")
