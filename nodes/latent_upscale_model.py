"""Latent upscale models: ComfyUI's `LatentUpscaleModelLoader` (`comfy_extras/nodes_hunyuan.py`)
and `LTXVLatentUpsampler` (`comfy_extras/nodes_lt_upsampler.py`), V3 schemas as today's ComfyUI
declares them; written here, the work in comfy_core/upscale/latent_models.py.

- LatentUpscaleModelLoader: a file of the `latent_upscale_models` folder -> LATENT_UPSCALE_MODEL,
  its kind told by its tensor names (LTX's latent upsamplers, every variant; HunyuanVideo 1.5's
  1080p upsampler and 720p SR model), its configuration by names, shapes and the `config`
  metadata, in the VAE dtype the device favours among bf16 and fp32 (as ComfyUI).
- LTXVLatentUpsampler: the video latent un-normalised with the VAE's per-channel statistics,
  upscaled, normalised again; other keys of the LATENT kept, its `noise_mask` dropped (the new
  latent is all to be refined), as ComfyUI. Beyond ComfyUI (whose node fails on it): given an
  LTX-2 audio-video latent (nested [video, audio]), the video part is upscaled and the audio part
  passed through.
"""
from __future__ import annotations

from typing import Any

from graph.spec import REQUIRED, InputSpec
from graph.v3_schema import Output, Socket, v3_node
import nodes.checks as checks
from nodes.environment import current_env, model_file, model_files
from nodes.errors import NodeInputError, describe

KIND = "latent_upscale_models"
LATENT_UPSCALE_MODEL = "LATENT_UPSCALE_MODEL"


_model_files = model_files(KIND)  # the loader combo's live options


def _vae_dtype() -> Any:
    """ComfyUI's `vae_dtype(allowed_dtypes=[bf16, fp32])` under the server's precision flags."""
    from nodes.loaders import _options

    return _options().dtype_policy.dtype_for("vae")


@v3_node("LatentUpscaleModelLoader", display_name="Load Latent Upscale Model", category="model/loaders",
         python_module="comfy_extras.nodes_hunyuan",
         inputs=[InputSpec("model_name", _model_files, REQUIRED, {"multiselect": False})],  # a live V3 combo
         outputs=[Output(LATENT_UPSCALE_MODEL)])
def latent_upscale_model_loader(model_name: str) -> tuple[Any]:
    from comfy_core.upscale.latent_models import LatentUpscaleModelError, load_latent_upscale_model

    env = current_env()
    path = model_file(KIND, model_name, "model_name")
    try:
        model = load_latent_upscale_model(path, dtype=_vae_dtype())
    except LatentUpscaleModelError as exc:
        raise NodeInputError("model_name", "a latent upscale model (LTX's or HunyuanVideo 1.5's)", str(exc)) from None
    if env.memory is not None:
        env.memory.track(model)  # runs on the compute device, offloaded like any model
    return (model,)


def _upscale_model(value: Any) -> Any:
    from comfy_core.upscale.latent_models import LatentUpscaleModel

    if not isinstance(value, LatentUpscaleModel):
        raise NodeInputError("upscale_model", "a LATENT_UPSCALE_MODEL (from LatentUpscaleModelLoader)",
                             describe(value))
    return value


def _statistics(vae: Any) -> Any:
    """The VAE's per-channel latent statistics (an LTX video VAE's `per_channel_statistics`)."""
    statistics = getattr(getattr(vae, "first_stage_model", None), "per_channel_statistics", None)
    if not (callable(getattr(statistics, "normalize", None)) and callable(getattr(statistics, "un_normalize", None))):
        raise NodeInputError("vae", "an LTX video VAE (with per-channel latent statistics)", describe(vae))
    return statistics


@v3_node("LTXVLatentUpsampler", category="model/latent/ltxv", python_module="comfy_extras.nodes_lt_upsampler",
         experimental=True,
         inputs=[Socket("samples", "LATENT"), Socket("upscale_model", LATENT_UPSCALE_MODEL), Socket("vae", "VAE")],
         outputs=[Output("LATENT")])
def ltxv_latent_upsampler(samples: dict, upscale_model: Any, vae: Any) -> tuple[dict]:
    from comfy_core.latent.nested import NestedTensor, is_nested
    from comfy_core.upscale.latent_models import LatentUpscaleModelError, upsample_normalized

    latent = checks.latent(samples, "samples", nested=True)
    model = _upscale_model(upscale_model)
    statistics = _statistics(vae)
    parts = latent.unbind() if is_nested(latent) else [latent]
    video = parts[0]
    if video.ndim != 5:
        raise NodeInputError("samples", "a video LATENT [B, C, F, H, W] (or an audio-video one)", describe(video))
    try:
        upscaled = upsample_normalized(model, video, statistics)
    except LatentUpscaleModelError as exc:
        raise NodeInputError("samples", "a latent the upscale model and VAE take", str(exc)) from None
    out = dict(samples)
    out["samples"] = NestedTensor([upscaled, *parts[1:]]) if is_nested(latent) else upscaled
    out.pop("noise_mask", None)
    return (out,)

