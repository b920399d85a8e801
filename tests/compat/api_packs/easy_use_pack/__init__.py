"""Fixture pack (area "easy_use"): what ComfyUI-Easy-Use does with ComfyUI's API at load time and
in its core nodes, so tests can check our answers.

- At import: `comfy.ldm.models.autoencoder.AutoencoderKL` read through attributes after plain
  `import comfy.sd1_clip` / `import comfy.ldm` (py/modules/brushnet/__init__.py), and
  `from comfy_extras.nodes_stable3d import camera_embeddings` (py/nodes/loaders.py).
- `EasyChannelLora`: layer_diffuse's way of widening LoRA diffs, by replacing
  `comfy.lora.calculate_weight` with a wrapper (py/modules/layer_diffuse/__init__.py).
- `EasyAdvancedEncode`: its advanced encoder (py/libs/adv_encode.py): `set_clip_options` with the
  CLIP's clip skip, `load_model_gpu(clip.patcher)`, then each tower's `encode_token_weights` on
  word-id tokens, unweighted and weighted.
- `EasyEncodeDecode`: the built-in nodes called positionally in ComfyUI's parameter order
  (`VAEEncode().encode(vae, pixels)`, `VAEDecode().decode(vae, samples)`,
  `CLIPTextEncode().encode(clip, text)`), as its samplers and pipe nodes do.
"""
from __future__ import annotations

import functools

import comfy
import comfy.ldm
import comfy.lora
import comfy.sd1_clip
import nodes
from comfy import model_management
from comfy_extras.nodes_stable3d import camera_embeddings

MODELS_TO_UNLOAD = [comfy.sd1_clip.SD1ClipModel, comfy.ldm.models.autoencoder.AutoencoderKL]


def add_after(func, extra):
    """A `calculate_weight` wrapper: ComfyUI's result plus `extra` (a scalar), per key."""

    @functools.wraps(func)
    def calculate_weight(patches, weight, key, intermediate_type=None):
        if intermediate_type is None:
            out = func(patches, weight, key)
        else:
            out = func(patches, weight, key, intermediate_type)
        return out + extra

    calculate_weight.seen = []
    return calculate_weight


class EasyAdvancedEncode:
    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {"clip": ("CLIP",), "text": ("STRING", {})}}

    RETURN_TYPES = ("CONDITIONING", "CONDITIONING")
    FUNCTION = "encode"
    CATEGORY = "tests/easy_use"

    def encode(self, clip, text):
        tokenized = clip.tokenize(text, return_word_ids=True)["l"]

        def encode_func(pairs):
            if clip.layer_idx is not None:
                clip.cond_stage_model.set_clip_options({"layer": clip.layer_idx})
            model_management.load_model_gpu(clip.patcher)
            return clip.cond_stage_model.clip_l.encode_token_weights(pairs)

        weighted, pooled = encode_func([[(t, w) for t, w, _ in chunk] for chunk in tokenized])
        unweighted, _ = encode_func([[(t, 1.0) for t, _, _ in chunk] for chunk in tokenized])
        return [[weighted, {"pooled_output": pooled}]], [[unweighted, {"pooled_output": pooled}]]


class EasyEncodeDecode:
    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {"vae": ("VAE",), "clip": ("CLIP",), "pixels": ("IMAGE",), "text": ("STRING", {})}}

    RETURN_TYPES = ("LATENT", "IMAGE", "CONDITIONING")
    FUNCTION = "run"
    CATEGORY = "tests/easy_use"

    def run(self, vae, clip, pixels, text):
        (latent,) = nodes.VAEEncode().encode(vae, pixels)
        (image,) = nodes.VAEDecode().decode(vae, latent)
        (cond,) = nodes.CLIPTextEncode().encode(clip, text)
        return latent, image, cond


NODE_CLASS_MAPPINGS = {"EasyAdvancedEncode": EasyAdvancedEncode, "EasyEncodeDecode": EasyEncodeDecode}
