"""Flux.1 conditioning nodes with ComfyUI 0.3.64's names, sockets and semantics
(comfy_extras/nodes_flux.py, and ReferenceLatent from comfy_extras/nodes_edit_model.py):

- FluxGuidance / FluxDisableGuidance: the distilled-guidance value Flux dev's guidance embedding
  reads, written into every entry (`"guidance"`: a float, or None to switch the embedding off).
- CLIPTextEncodeFlux: `clip_l` to CLIP-L (pooled vector) and `t5xxl` to T5-XXL (the context),
  encoded together, with the guidance.
- FluxKontextImageScale: the image resized (Lanczos, centre crop) to the Kontext training
  resolution whose aspect ratio is nearest the image's.
- ReferenceLatent: a latent appended to every entry's `"reference_latents"` list (chained nodes
  give several references); FluxKontextMultiReferenceLatentMethod: how the model lays several
  references out in RoPE positions (`"reference_latents_method"`).

The nodes only write options into copies of the entries; the Flux model's conditioning encoder
reads them when it samples. torch is imported only where an image is resized.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Mapping

from graph.native import Combo, Float, Input, Output, String, node
import nodes.checks as checks
from nodes.errors import NodeInputError, describe

if TYPE_CHECKING:
    import torch

MODULE = "comfy_extras.nodes_flux"
CATEGORY = "advanced/conditioning/flux"

# Flux Kontext's preferred (width, height) resolutions, ComfyUI's PREFERED_KONTEXT_RESOLUTIONS
# (about one megapixel each, sides multiples of 16).
KONTEXT_RESOLUTIONS: tuple[tuple[int, int], ...] = (
    (672, 1568), (688, 1504), (720, 1456), (752, 1392), (800, 1328), (832, 1248), (880, 1184),
    (944, 1104), (1024, 1024), (1104, 944), (1184, 880), (1248, 832), (1328, 800), (1392, 752),
    (1456, 720), (1504, 688), (1568, 672),
)
# Today's ComfyUI added "index_timestep_zero" (Qwen-Image-Edit 2511: references at timestep 0).
REFERENCE_LATENTS_METHODS = ["offset", "index", "uxo/uno", "index_timestep_zero"]


def _guidance(value: Any) -> float:
    # No bound beyond the widget's (the validator checks constants): a linked value runs as in ComfyUI.
    return checks.number(value, "guidance")


def set_values(conditioning: list, values: Mapping[str, Any], *, append: bool = False) -> list:
    """ComfyUI's `node_helpers.conditioning_set_values`: a copy of every entry with `values` set in
    its (copied) dict; with `append`, a value is added to the one already there (`old + new`, lists
    concatenated into a new list) instead of replacing it. Inputs are never mutated."""
    out = []
    for cond, options in conditioning:
        updated = dict(options)
        for key, value in values.items():
            old = updated.get(key)
            updated[key] = old + value if append and old is not None else value
        out.append([cond, updated])
    return out


@node("FluxGuidance", display_name=None, category=CATEGORY, python_module=MODULE,
      inputs=[Input("conditioning", "CONDITIONING"),
              Float("guidance", default=3.5, min=0.0, max=100.0, step=0.1)],
      outputs=[Output("CONDITIONING")])
def flux_guidance(conditioning: list, guidance: float) -> tuple[list]:
    """Every entry's `"guidance"` set to `guidance` (Flux dev's guidance embedding input)."""
    conditioning = checks.conditioning(conditioning)
    return (set_values(conditioning, {"guidance": _guidance(guidance)}),)


@node("FluxDisableGuidance", display_name=None, category=CATEGORY, python_module=MODULE,
      description="This node completely disables the guidance embed on Flux and Flux like models",
      inputs=[Input("conditioning", "CONDITIONING")],
      outputs=[Output("CONDITIONING")])
def flux_disable_guidance(conditioning: list) -> tuple[list]:
    """Every entry's `"guidance"` set to None: the model skips its guidance embedding."""
    conditioning = checks.conditioning(conditioning)
    return (set_values(conditioning, {"guidance": None}),)


@node("CLIPTextEncodeFlux", display_name=None, category=CATEGORY, python_module=MODULE,
      inputs=[Input("clip", "CLIP"),
              String("clip_l", default=None, multiline=True, dynamicPrompts=True),
              String("t5xxl", default=None, multiline=True, dynamicPrompts=True),
              Float("guidance", default=3.5, min=0.0, max=100.0, step=0.1)],
      outputs=[Output("CONDITIONING")])
def clip_text_encode_flux(clip: Any, clip_l: str, t5xxl: str, guidance: float) -> tuple[list]:
    """`clip_l` tokenized for every encoder, then T5-XXL's tokens replaced by those of `t5xxl`
    (ComfyUI's rule); encoded with `"guidance"` in the entry."""
    clip = checks.clip(clip)
    clip_l = checks.text(clip_l, "clip_l")
    t5xxl = checks.text(t5xxl, "t5xxl")
    guidance = _guidance(guidance)
    tokens = dict(clip.tokenize(clip_l))
    t5_tokens = clip.tokenize(t5xxl)
    if "t5xxl" not in t5_tokens:
        raise NodeInputError("clip", "a Flux CLIP (with a T5-XXL encoder)",
                             f"one that tokenizes for {sorted(t5_tokens)}")
    tokens["t5xxl"] = t5_tokens["t5xxl"]
    if hasattr(clip, "encode_from_tokens_scheduled"):
        return (clip.encode_from_tokens_scheduled(tokens, add_dict={"guidance": guidance}),)
    cond, pooled = clip.encode_from_tokens(tokens, return_pooled=True)
    return ([[cond, {"pooled_output": pooled, "guidance": guidance}]],)


def kontext_resolution(width: int, height: int) -> tuple[int, int]:
    """The Kontext resolution `(width, height)` whose aspect ratio is nearest `width / height`;
    on a tie the smaller width wins (ComfyUI's `min` over `(distance, w, h)`)."""
    aspect = width / height
    _, best_w, best_h = min((abs(aspect - w / h), w, h) for w, h in KONTEXT_RESOLUTIONS)
    return best_w, best_h


@node("FluxKontextImageScale", display_name=None, category=CATEGORY, python_module=MODULE,
      description="This node resizes the image to one that is more optimal for flux kontext.",
      inputs=[Input("image", "IMAGE")],
      outputs=[Output("IMAGE")])
def flux_kontext_image_scale(image: torch.Tensor) -> tuple[torch.Tensor]:
    """Centre-crop to the nearest Kontext aspect ratio, then Lanczos to that resolution
    (ComfyUI's `common_upscale(..., "lanczos", "center")`)."""
    from comfy_core.image.resize import upscale_samples

    image = checks.image_batch(image, "image")  # [B, H, W, C]
    width, height = kontext_resolution(image.shape[2], image.shape[1])
    resized = upscale_samples(image.movedim(-1, 1), width, height, "lanczos", "center")  # [B, C, h, w]
    return (resized.movedim(1, -1),)  # [B, height, width, C]


@node("FluxKontextMultiReferenceLatentMethod", display_name=None, category=CATEGORY, python_module=MODULE,
      experimental=True,
      inputs=[Input("conditioning", "CONDITIONING"), Combo("reference_latents_method", REFERENCE_LATENTS_METHODS)],
      outputs=[Output("CONDITIONING")])
def flux_kontext_multi_reference_latent_method(conditioning: list, reference_latents_method: str) -> tuple[list]:
    """Every entry's `"reference_latents_method"`: "offset", "index", "index_timestep_zero", or "uxo"
    (for "uxo/uno", as ComfyUI shortens any name containing "uxo" or "uso"); a model that does not
    lay references out that way refuses it when it samples."""
    conditioning = checks.conditioning(conditioning)
    method = checks.choice(reference_latents_method, REFERENCE_LATENTS_METHODS, "reference_latents_method")
    if "uxo" in method or "uso" in method:
        method = "uxo"
    return (set_values(conditioning, {"reference_latents_method": method}),)


@node("ReferenceLatent", display_name=None, category="advanced/conditioning/edit_models",
      python_module="comfy_extras.nodes_edit_model",
      description="This node sets the guiding latent for an edit model. If the model supports it you can chain "
                  "multiple to set multiple reference images.",
      inputs=[Input("conditioning", "CONDITIONING"), Input("latent", "LATENT", optional=True)],
      outputs=[Output("CONDITIONING")])
def reference_latent(conditioning: list, latent: dict | None = None) -> tuple[list]:
    """`latent["samples"]` appended to every entry's `"reference_latents"` list (a new list; the
    references already there are kept); without a latent the conditioning is returned as it is."""
    conditioning = checks.conditioning(conditioning)
    if latent is None:
        return (conditioning,)
    samples = checks.latent(latent, "latent")  # [B, C, h, w] (or [B, C, t, h, w])
    for index, (_, options) in enumerate(conditioning):
        old = options.get("reference_latents")
        if old is not None and not isinstance(old, list):
            raise NodeInputError("conditioning", "entries whose 'reference_latents' is a list",
                                 f"entry {index}: {describe(old)}")
    return (set_values(conditioning, {"reference_latents": [samples]}, append=True),)
