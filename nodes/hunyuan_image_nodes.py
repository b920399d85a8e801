"""The image nodes of ComfyUI 0.3.64's comfy_extras/nodes_hunyuan.py, with its names, sockets and
semantics: CLIPTextEncodeHunyuanDiT (Hunyuan-DiT's two prompts), EmptyHunyuanImageLatent
(HunyuanImage 2.1's 64-channel latent, 32 pixels a cell) and HunyuanRefinerLatent (its refiner's
input). The module's video nodes live in nodes/video_latents.py and nodes/hunyuan_video_nodes.py.
"""
from __future__ import annotations

from typing import Any

from graph.native import MAX_RESOLUTION, Float, Input, Int, Output, String, node
import nodes.checks as checks
from nodes.errors import NodeInputError, describe

MODULE = "comfy_extras.nodes_hunyuan"
IMAGE_LATENT_CHANNELS = 64
REFINER_LATENT_CHANNELS = 32


def _prompt(name: str) -> Any:
    return String(name, default=None, multiline=True, dynamicPrompts=True)


@node("CLIPTextEncodeHunyuanDiT", display_name="CLIPTextEncodeHunyuanDiT", category="advanced/conditioning",
      python_module=MODULE, inputs=[Input("clip", "CLIP"), _prompt("bert"), _prompt("mt5xl")],
      outputs=[Output("CONDITIONING")])
def clip_text_encode_hunyuan_dit(clip: Any, bert: str, mt5xl: str) -> tuple[list]:
    """`bert` for the CLIP's BERT tokens, `mt5xl` for its mT5-XL tokens (the `mt5xl` entry of the
    second tokenisation replaces the first's), encoded together."""
    clip = checks.clip(clip)
    tokens = clip.tokenize(checks.text(bert, "bert"))
    second = clip.tokenize(checks.text(mt5xl, "mt5xl"))
    if "mt5xl" not in second:
        raise NodeInputError("clip", "Hunyuan-DiT's text encoder (its tokens have an 'mt5xl' part)",
                             f"{describe(clip)} with tokens {sorted(second)}")
    tokens["mt5xl"] = second["mt5xl"]
    return (clip.encode_from_tokens_scheduled(tokens),)


@node("EmptyHunyuanImageLatent", display_name="EmptyHunyuanImageLatent", category="latent", python_module=MODULE,
      inputs=[Int("width", default=2048, min=64, max=MAX_RESOLUTION, step=32),
              Int("height", default=2048, min=64, max=MAX_RESOLUTION, step=32),
              Int("batch_size", default=1, min=1, max=4096)],
      outputs=[Output("LATENT")])
def empty_hunyuan_image_latent(width: int, height: int, batch_size: int = 1) -> tuple[dict]:
    """Zeros `[B, 64, height // 32, width // 32]`."""
    import torch

    width = checks.integer(width, "width", 64, MAX_RESOLUTION)
    height = checks.integer(height, "height", 64, MAX_RESOLUTION)
    batch_size = checks.integer(batch_size, "batch_size", 1, 4096)
    return ({"samples": torch.zeros([batch_size, IMAGE_LATENT_CHANNELS, height // 32, width // 32])},)


@node("HunyuanRefinerLatent", display_name="HunyuanRefinerLatent", python_module=MODULE,
      inputs=[Input("positive", "CONDITIONING"), Input("negative", "CONDITIONING"), Input("latent", "LATENT"),
              Float("noise_augmentation", default=0.10, min=0.0, max=1.0, step=0.01)],
      outputs=[Output("CONDITIONING", "positive"), Output("CONDITIONING", "negative"), Output("LATENT", "latent")])
def hunyuan_refiner_latent(positive: list, negative: list, latent: dict,
                           noise_augmentation: float) -> tuple[list, list, dict]:
    """The latent to refine as both conditionings' `concat_latent_image` (with the noise
    augmentation); a zero 32-channel latent of its frames and size to sample."""
    import torch
    from nodes.wan_conditioning import both, conditionings

    positive, negative = conditionings(positive, negative)
    samples = checks.latent(latent, "latent")
    noise_augmentation = checks.number(noise_augmentation, "noise_augmentation")
    positive, negative = both(positive, negative,
                              {"concat_latent_image": samples, "noise_augmentation": noise_augmentation})
    return positive, negative, {"samples": torch.zeros([samples.shape[0], REFINER_LATENT_CHANNELS, *samples.shape[-3:]])}
