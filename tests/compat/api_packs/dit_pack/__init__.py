"""Fixture pack: ComfyUI's Flux / SD3 Python API used the way node packs use it.

The imports are those of real packs: Easy-Use's SD3 and Flux IP-Adapters (`JointBlock`,
`RMSNorm` from the MMDiT module; `DoubleStreamBlock`, `SingleStreamBlock`, `timestep_embedding`
from `comfy.ldm.flux.layers`; a `forward_orig` object patch and per-block replacements), its
loaders (`SD3ClipModel`, `T5XXLModel`; an `isinstance` chain over `comfy.supported_models`),
KJNodes' attention patches (`apply_rope` from `comfy.ldm.flux.math`), Impact's
`latent_formats.SD3()` / `Flux()`, and a diffusers-to-ComfyUI converter built on the
`comfy.utils` key maps and `comfy.model_detection`. The code here is written for these tests.
"""
from __future__ import annotations

from types import MethodType

import torch
from torch import nn

import comfy.cldm.mmdit
import comfy.latent_formats
import comfy.ldm.flux.model
import comfy.ldm.modules.diffusionmodules.mmdit
import comfy.model_base
import comfy.model_detection
import comfy.supported_models
import comfy.utils
from comfy.ldm.flux.layers import DoubleStreamBlock, SingleStreamBlock, timestep_embedding
from comfy.ldm.flux.math import apply_rope
from comfy.ldm.modules.attention import optimized_attention
from comfy.ldm.modules.diffusionmodules.mmdit import JointBlock, RMSNorm

try:  # Easy-Use's import, with its fallback for older ComfyUI
    from comfy.text_encoders.sd3_clip import SD3ClipModel, SD3Tokenizer, T5XXLModel
except ImportError:
    from comfy.sd3_clip import SD3ClipModel, SD3Tokenizer, T5XXLModel
from comfy.text_encoders.flux import FluxClipModel, FluxTokenizer, T5XXLTokenizer
from comfy.text_encoders.t5 import T5

NODE_CLASS_MAPPINGS: dict = {}
EVENTS: list = []


# --- telling model kinds apart (Easy-Use's get_sd_version chain) ---------------------------------

def sd_version(model) -> str:
    config = model.model.model_config
    if isinstance(config, comfy.supported_models.SDXL):
        return "sdxl"
    if isinstance(config, (comfy.supported_models.SD15, comfy.supported_models.SD20)):
        return "sd1"
    if isinstance(config, comfy.supported_models.SD3):
        return "sd3"
    if isinstance(config, comfy.supported_models.HunyuanDiT):
        return "hydit"
    if isinstance(config, comfy.supported_models.FluxSchnell):
        return "flux_schnell"
    if isinstance(config, comfy.supported_models.Flux):
        return "flux"
    if isinstance(config, comfy.supported_models.GenmoMochi):
        return "mochi"
    return "unknown"


def latent_format_for(kind: str):
    return comfy.latent_formats.SD3() if kind == "sd3" else comfy.latent_formats.Flux()


# --- diffusers files to ComfyUI modules through comfy.utils / comfy.model_detection -------------

def apply_key_map(state: dict, key_map: dict) -> dict:
    """Apply a ComfyUI diffusers -> native key map: a name, a `(name, (dim, offset, size))` slice
    of a fused tensor, or `(name, None, fn)` for a transformed tensor."""
    out: dict = {}
    for source, target in key_map.items():
        if source not in state:
            continue
        tensor = state[source]
        if isinstance(target, str):
            out[target] = tensor
        elif target[1] is None:
            out[target[0]] = target[2](tensor)
        else:
            dim, offset, size = target[1]
            fused = out.get(target[0])
            if fused is None or fused.shape[dim] < offset + size:
                shape = list(tensor.shape)
                shape[dim] = offset + size
                grown = torch.zeros(shape, dtype=tensor.dtype)
                if fused is not None:
                    grown.narrow(dim, 0, fused.shape[dim]).copy_(fused)
                fused = grown
            fused.narrow(dim, offset, size).copy_(tensor)
            out[target[0]] = fused
    return out


def flux_from_diffusers(state: dict) -> dict:
    depth = comfy.model_detection.count_blocks(state, "transformer_blocks.{}.")
    single = comfy.model_detection.count_blocks(state, "single_transformer_blocks.{}.")
    hidden = state["x_embedder.bias"].shape[0]
    key_map = comfy.utils.flux_to_diffusers({"depth": depth, "depth_single_blocks": single, "hidden_size": hidden})
    return apply_key_map(state, key_map)


def mmdit_from_diffusers(state: dict) -> dict:
    blocks = comfy.model_detection.count_blocks(state, "transformer_blocks.{}.")
    depth = state["pos_embed.proj.weight"].shape[0] // 64
    return apply_key_map(state, comfy.utils.mmdit_to_diffusers({"depth": depth, "num_blocks": blocks}))


def build_diffusion_model(state: dict, prefix: str = ""):
    """The ComfyUI module for `state`, from `detect_unet_config` (as ComfyUI's model_base builds
    it: `unet_model(**unet_config)`), weights assigned."""
    unet_config = comfy.model_detection.detect_unet_config(state, prefix)
    if unet_config.get("image_model") == "flux":
        cls = comfy.ldm.flux.model.Flux
    else:
        cls = comfy.ldm.modules.diffusionmodules.mmdit.OpenAISignatureMMDITWrapper
    with torch.device("meta"):
        module = cls(**unet_config)
    module.load_state_dict({k[len(prefix):]: v for k, v in state.items() if k.startswith(prefix)},
                           strict=True, assign=True)
    return module.eval(), unet_config


# --- SD3: a joint-block replacement (Easy-Use's JointBlockIPWrapper pattern) --------------------

class JointBlockImageScale:
    """`patches_replace["dit"][("double_block", i)]`: the joint block recomputed from its two
    streams' `pre_attention` / `post_attention`, the image stream's attention output scaled."""

    def __init__(self, block: JointBlock, scale: float) -> None:
        self.block = block
        self.scale = scale
        self.calls = 0

    def __call__(self, args: dict, extra: dict) -> dict:
        self.calls += 1
        context, x, c = args["txt"], args["img"], args["vec"]
        cb, xb = self.block.context_block, self.block.x_block
        context_qkv, context_rest = cb.pre_attention(context, c)
        x_qkv, x_rest = xb.pre_attention(x, c)
        qkv = [torch.cat((context_qkv[i], x_qkv[i]), dim=1) for i in range(3)]
        attn = optimized_attention(qkv[0], qkv[1], qkv[2], heads=xb.attn.num_heads)
        n = context_qkv[0].shape[1]
        context_attn, x_attn = attn[:, :n], attn[:, n:]
        if self.scale != 1.0:
            x_attn = x_attn * self.scale
        context = None if cb.pre_only else cb.post_attention(context_attn, *context_rest)
        return {"txt": context, "img": xb.post_attention(x_attn, *x_rest)}


def patch_joint_blocks(model, scale: float) -> tuple:
    patched = model.clone()
    wrappers = []
    for i, block in enumerate(model.model.diffusion_model.joint_blocks):
        wrapper = JointBlockImageScale(block, scale)
        patched.set_model_patch_replace(wrapper, "dit", "double_block", i)
        wrappers.append(wrapper)
    return patched, wrappers


# --- Flux: block and forward_orig object patches (Easy-Use's Flux IP-Adapter pattern) ----------

class DoubleBlockWrapper(nn.Module):
    """A module standing in for a double block: the original's result, the image update dropped
    when `keep_image_update` is False."""

    def __init__(self, original: DoubleStreamBlock, keep_image_update: bool = True) -> None:
        super().__init__()
        self.original = original
        self.keep_image_update = keep_image_update
        self.calls = 0

    def forward(self, img, txt, vec, pe, attn_mask=None, transformer_options={}):
        self.calls += 1
        out_img, out_txt = self.original(img=img, txt=txt, vec=vec, pe=pe, attn_mask=attn_mask,
                                         transformer_options=transformer_options)
        return (out_img if self.keep_image_update else img), out_txt


def wrap_double_blocks(model, keep_image_update: bool = True) -> tuple:
    patched = model.clone()
    wrappers = []
    for i, block in enumerate(model.model.diffusion_model.double_blocks):
        wrapper = DoubleBlockWrapper(block, keep_image_update)
        patched.add_object_patch(f"diffusion_model.double_blocks.{i}", wrapper)
        wrappers.append(wrapper)
    return patched, wrappers


def forward_orig_by_hand(self, img, img_ids, txt, txt_ids, timesteps, y, guidance=None, control=None,
                         transformer_options={}, attn_mask=None):
    """Flux's token-level forward written against ComfyUI's attribute names and block calls."""
    EVENTS.append("forward_orig")
    img = self.img_in(img)
    vec = self.time_in(timestep_embedding(timesteps, 256).to(img.dtype))
    if self.params.guidance_embed and guidance is not None:
        vec = vec + self.guidance_in(timestep_embedding(guidance, 256).to(img.dtype))
    vec = vec + self.vector_in(y[:, :self.params.vec_in_dim])
    txt = self.txt_in(txt)
    pe = self.pe_embedder(torch.cat((txt_ids, img_ids), dim=1))
    for block in self.double_blocks:
        img, txt = block(img=img, txt=txt, vec=vec, pe=pe, attn_mask=attn_mask)
    img = torch.cat((txt, img), 1)
    for block in self.single_blocks:
        img = block(img, vec=vec, pe=pe, attn_mask=attn_mask)
    img = img[:, txt.shape[1]:, ...]
    return self.final_layer(img, vec)


def patch_forward_orig(model):
    patched = model.clone()
    dm = model.model.diffusion_model
    patched.add_object_patch("diffusion_model.forward_orig", MethodType(forward_orig_by_hand, dm))
    return patched


def rope_attention(q, k, v, pe):
    """KJNodes' pattern: rotate with `apply_rope`, attend with ComfyUI's attention on `[B, H, L, D]`."""
    q, k = apply_rope(q, k, pe)
    return optimized_attention(q, k, v, q.shape[1], skip_reshape=True)


class CountingFluxAttention:
    """A replacement for `comfy.ldm.flux.layers.attention` that counts and delegates."""

    def __init__(self, previous) -> None:
        self.previous = previous
        self.calls = 0

    def __call__(self, q, k, v, pe, mask=None, transformer_options=None):
        self.calls += 1
        return self.previous(q, k, v, pe, mask=mask, transformer_options=transformer_options)


# --- text encoders (Easy-Use's checks on a CLIP) -------------------------------------------------

def describe_clip(clip) -> dict:
    cs = clip.cond_stage_model
    t5 = getattr(cs, "t5xxl", None)
    return {
        "sd3": isinstance(cs, SD3ClipModel), "flux": isinstance(cs, FluxClipModel),
        "t5_model": isinstance(t5, T5XXLModel), "t5_transformer": t5 is not None and isinstance(t5.transformer, T5),
        "sd3_tokenizer": isinstance(clip.tokenizer, SD3Tokenizer),
        "flux_tokenizer": isinstance(clip.tokenizer, FluxTokenizer),
        "t5_tokenizer": isinstance(getattr(clip.tokenizer, "t5xxl", None), T5XXLTokenizer),
        "t5_min_length": getattr(getattr(clip.tokenizer, "t5xxl", None), "min_length", None),
    }


def make_qk_norm(dim: int) -> RMSNorm:
    """Easy-Use's SD3 IP-Adapter call: `RMSNorm(head_dim, 1e-6)` (the second argument lands on
    `elementwise_affine`, so the norm gets a weight)."""
    return RMSNorm(dim, 1e-6)


def controlnet_class():
    return comfy.cldm.mmdit.ControlNet
