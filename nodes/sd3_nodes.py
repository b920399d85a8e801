"""SD3 / SD3.5 nodes with ComfyUI 0.3.64's names, sockets and semantics (comfy_extras/nodes_sd3.py):
CLIPTextEncodeSD3, EmptySD3LatentImage and SkipLayerGuidanceSD3.

- CLIPTextEncodeSD3 gives each of the three encoders its own text (CLIP-L, CLIP-G, T5-XXL).
  With `empty_padding` "none", an empty text gives its encoder no tokens at all (the SD3 text
  encoder then uses zeros for it, as ComfyUI's SD3 model does), instead of the tokens of the
  empty prompt; CLIP-L and CLIP-G are then made the same number of chunks by appending chunks of
  the empty prompt to the shorter (their hidden states are concatenated along the width).
- EmptySD3LatentImage: zeros `[B, 16, H/8, W/8]` (the 16-channel SD3 / Flux VAE latent).
- SkipLayerGuidanceSD3: SkipLayerGuidanceDiT (nodes/skip_layer_guidance.py) on double blocks only.

TripleCLIPLoader and ControlNetApplySD3 (the module's other nodes) live with the loaders and the
ControlNet nodes.
"""
from __future__ import annotations

from typing import Any

from graph.native import MAX_RESOLUTION, Combo, Float, Input, Int, Output, String, node
import nodes.checks as checks
from nodes.errors import NodeInputError
from nodes.sdxl_text import pad_to_same_chunks
from nodes.skip_layer_guidance import skip_layer_guidance

MODULE = "comfy_extras.nodes_sd3"
EMPTY_PADDING = ["none", "empty_prompt"]
LATENT_CHANNELS = 16


def _prompt(name: str) -> Any:
    return String(name, default=None, multiline=True, dynamicPrompts=True)


@node("CLIPTextEncodeSD3", display_name=None, category="advanced/conditioning", python_module=MODULE,
      inputs=[Input("clip", "CLIP"), _prompt("clip_l"), _prompt("clip_g"), _prompt("t5xxl"),
              Combo("empty_padding", EMPTY_PADDING)],
      outputs=[Output("CONDITIONING")])
def clip_text_encode_sd3(clip: Any, clip_l: str, clip_g: str, t5xxl: str, empty_padding: str) -> tuple[list]:
    """Each text to its encoder; see the module docstring for `empty_padding` (ComfyUI's rule:
    "none" drops the tokens of an empty text, then CLIP-L and CLIP-G are padded to equal chunks).
    A CLIP without T5-XXL (an SD3 file without it) encodes CLIP-L and CLIP-G only."""
    clip = checks.clip(clip)
    texts = {name: checks.text(value, name) for name, value in (("clip_l", clip_l), ("clip_g", clip_g),
                                                                ("t5xxl", t5xxl))}
    no_padding = checks.choice(empty_padding, EMPTY_PADDING, "empty_padding") == "none"
    tokens = dict(clip.tokenize(texts["clip_g"]))
    if "l" not in tokens or "g" not in tokens:
        raise NodeInputError("clip", "an SD3 CLIP (CLIP-L and CLIP-G, optionally T5-XXL)",
                             f"one that tokenizes for {sorted(tokens)}")
    if no_padding and texts["clip_g"] == "":
        tokens["g"] = []
    tokens["l"] = [] if no_padding and texts["clip_l"] == "" else clip.tokenize(texts["clip_l"])["l"]
    if "t5xxl" in tokens:
        tokens["t5xxl"] = [] if no_padding and texts["t5xxl"] == "" else clip.tokenize(texts["t5xxl"])["t5xxl"]
    if len(tokens["l"]) != len(tokens["g"]):
        empty = clip.tokenize("")
        tokens["l"], tokens["g"] = pad_to_same_chunks(tokens["l"], tokens["g"], empty["l"], empty["g"])
    if hasattr(clip, "encode_from_tokens_scheduled"):
        return (clip.encode_from_tokens_scheduled(tokens),)
    cond, pooled = clip.encode_from_tokens(tokens, return_pooled=True)
    return ([[cond, {"pooled_output": pooled}]],)


@node("EmptySD3LatentImage", display_name=None, category="latent/sd3", python_module=MODULE,
      inputs=[Int("width", default=1024, min=16, max=MAX_RESOLUTION, step=16),
              Int("height", default=1024, min=16, max=MAX_RESOLUTION, step=16),
              Int("batch_size", default=1, min=1, max=4096)],
      outputs=[Output("LATENT")])
def empty_sd3_latent_image(width: int, height: int, batch_size: int = 1) -> tuple[dict]:
    """A batch of zero latents `[batch_size, 16, height // 8, width // 8]`."""
    import torch

    width = checks.integer(width, "width", 16, MAX_RESOLUTION)
    height = checks.integer(height, "height", 16, MAX_RESOLUTION)
    batch_size = checks.integer(batch_size, "batch_size", 1, 4096)
    # the ratio it was made at, as today's ComfyUI: a sampler resizes it for a 1/16 model
    return ({"samples": torch.zeros([batch_size, LATENT_CHANNELS, height // 8, width // 8]),
             "downscale_ratio_spacial": 8},)


@node("SkipLayerGuidanceSD3", display_name=None, category="advanced/guidance", python_module=MODULE,
      experimental=True, description="Generic version of SkipLayerGuidance node that can be used on every DiT model.",
      inputs=[Input("model", "MODEL"),
              Input("layers", "STRING", default="7, 8, 9", multiline=False),
              Float("scale", default=3.0, min=0.0, max=10.0, step=0.1),
              Float("start_percent", default=0.01, min=0.0, max=1.0, step=0.001),
              Float("end_percent", default=0.15, min=0.0, max=1.0, step=0.001)],
      outputs=[Output("MODEL")])
def skip_layer_guidance_sd3(model: Any, layers: str, scale: float, start_percent: float,
                            end_percent: float) -> tuple[Any]:
    """SkipLayerGuidanceDiT with `layers` as the double blocks, no single blocks, no rescaling
    (Dango233's experimental SD3.5 guidance, after Perturbed-Attention Guidance, arXiv 2403.17377)."""
    return skip_layer_guidance(model, scale, start_percent, end_percent, double_layers=layers, single_layers="",
                               rescaling_scale=0.0)
