"""A fixture pack that applies an image prompt the way ComfyUI_IPAdapter_plus does
(IPAdapterPlus.py / CrossAttentionPatch.py / utils.py), on a tiny "plus"-style adapter:

- its folder kind is registered at import (`folder_paths.folder_names_and_paths["ipadapter"]`),
  its file read with `comfy.utils.load_torch_file`: `image_proj.proj.weight` / `.bias` (a linear
  map of CLIP-vision tokens to the UNet's context width) and `ip_adapter.<n>.to_k_ip.weight` /
  `.to_v_ip.weight` per cross-attention, numbered 1, 3, 5, ... in SD1's block order;
- the image is encoded by CLIP vision into its penultimate hidden states, either with
  `clip_vision.encode_image(image).penultimate_hidden_states` or, as IPAdapter's
  `encode_image_masked_`, with `comfy.model_management.load_model_gpu(clip_vision.patcher)`,
  `comfy.clip_vision.clip_preprocess` and `clip_vision.model(pixel_values=..., intermediate_output=-2)[1]`;
- the MODEL is cloned and every SD1 cross-attention gets `set_model_attn2_replace(Attn2Replace)`
  (one callable object per block, holding the image-prompt embeddings, more callbacks added to
  it by a second apply), which runs `optimized_attention` (imported by name from
  `comfy.ldm.modules.attention` at import time, as CrossAttentionPatch.py does) and adds
  `weight * attention(q, to_k_ip(image), to_v_ip(image))` per batch chunk (cond or uncond, from
  `extra_options["cond_or_uncond"]`), while `sigma_start >= sigma >= sigma_end`
  (`model_sampling.percent_to_sigma(start_at / end_at)`).
"""
import os

import torch

import comfy.clip_vision
import comfy.model_management
import comfy.utils
import folder_paths
from comfy.ldm.modules.attention import optimized_attention

folder_paths.folder_names_and_paths["ipadapter"] = (
    [os.path.join(folder_paths.models_dir, "ipadapter")], folder_paths.supported_pt_extensions)

# SD1's cross-attentions in IPAdapter_plus's order: input blocks, output blocks, middle.
SD1_BLOCKS = [("input", i) for i in (1, 2, 4, 5, 7, 8)] + [("output", i) for i in range(3, 12)] + [("middle", 0)]


class ImagePromptAdapter(torch.nn.Module):
    """The loaded file: `image_proj` (tokens -> context width) and `to_kvs[<n>_to_k_ip]` linears."""

    def __init__(self, sd):
        super().__init__()
        weight = sd["image_proj.proj.weight"]
        self.image_proj = torch.nn.Linear(weight.shape[1], weight.shape[0])
        self.image_proj.weight.data = weight.float()
        self.image_proj.bias.data = sd["image_proj.proj.bias"].float()
        self.to_kvs = torch.nn.ModuleDict()
        for key, value in sd.items():
            if key.startswith("ip_adapter."):
                name = key[len("ip_adapter."):].replace(".weight", "").replace(".", "_")
                linear = torch.nn.Linear(value.shape[1], value.shape[0], bias=False)
                linear.weight.data = value.float()
                self.to_kvs[name] = linear

    @torch.no_grad()
    def image_tokens(self, hidden_states):
        return self.image_proj(hidden_states.float())


def encode_penultimate(clip_vision, image, way):
    if way == "encode_image":
        return clip_vision.encode_image(image).penultimate_hidden_states
    comfy.model_management.load_model_gpu(clip_vision.patcher)
    pixel_values = comfy.clip_vision.clip_preprocess(image.to(clip_vision.load_device), size=224).float()
    out = clip_vision.model(pixel_values=pixel_values, intermediate_output=-2)
    return out[1].to(comfy.model_management.intermediate_device())


def _per_chunk(tensor_for, cond_or_uncond, batch):
    """Stack the cond / uncond embeddings chunk by chunk in the order the sampler batched them."""
    per = batch // len(cond_or_uncond)
    return torch.cat([tensor_for(c).expand(per, -1, -1) for c in cond_or_uncond], dim=0)


def image_prompt_attention(out, q, k, v, extra_options, ipadapter=None, number=0, weight=1.0, cond=None,
                           uncond=None, **kwargs):
    """The image-prompt term added to the text attention `out` (IPAdapter's `ipadapter_attention`)."""
    to_k = ipadapter.to_kvs[f"{number}_to_k_ip"]
    to_v = ipadapter.to_kvs[f"{number}_to_v_ip"]
    cond_or_uncond = extra_options.get("cond_or_uncond", [0])
    tokens = _per_chunk(lambda c: uncond if c == 1 else cond, cond_or_uncond, q.shape[0]).to(q)
    ip_k, ip_v = to_k(tokens), to_v(tokens)
    return optimized_attention(q, ip_k, ip_v, extra_options["n_heads"]) * weight


class Attn2Replace:
    """One block's attn2 replacement (CrossAttentionPatch.py's pattern): text attention through
    `optimized_attention`, plus each added callback's term while the sigma is in its range."""

    def __init__(self, callback=None, **kwargs):
        self.callback = [callback]
        self.kwargs = [kwargs]

    def add(self, callback, **kwargs):
        self.callback.append(callback)
        self.kwargs.append(kwargs)

    def __call__(self, q, k, v, extra_options):
        dtype = q.dtype
        out = optimized_attention(q, k, v, extra_options["n_heads"])
        sigma = extra_options["sigmas"].detach().cpu()[0].item() if "sigmas" in extra_options else 999999999.9
        for callback, kwargs in zip(self.callback, self.kwargs):
            if kwargs["sigma_start"] >= sigma >= kwargs["sigma_end"]:
                out = out + callback(out, q, k, v, extra_options, **kwargs)
        return out.to(dtype=dtype)

    def to(self, device, *args, **kwargs):
        return self


def set_model_patch_replace(model, patch_kwargs, key):
    """A new Attn2Replace for the block, or the callback added to the one a previous apply put there
    (IPAdapter copies the option dicts on the way, so the source MODEL keeps its own)."""
    to = model.model_options["transformer_options"].copy()
    to["patches_replace"] = dict(to.get("patches_replace", {}))
    to["patches_replace"]["attn2"] = dict(to["patches_replace"].get("attn2", {}))
    existing = to["patches_replace"]["attn2"].get(key)
    if isinstance(existing, Attn2Replace):
        fresh = Attn2Replace.__new__(Attn2Replace)
        fresh.callback, fresh.kwargs = list(existing.callback), list(existing.kwargs)
        fresh.add(image_prompt_attention, **patch_kwargs)
        to["patches_replace"]["attn2"][key] = fresh
        model.model_options["transformer_options"] = to
    else:
        model.model_options["transformer_options"] = to
        model.set_model_attn2_replace(Attn2Replace(image_prompt_attention, **patch_kwargs), key[0], key[1])


class ImagePromptLoader:
    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {"ipadapter_file": (folder_paths.get_filename_list("ipadapter"),)}}

    RETURN_TYPES = ("IPADAPTER",)
    FUNCTION = "load"
    CATEGORY = "tests/ipadapter_like"

    def load(self, ipadapter_file):
        sd = comfy.utils.load_torch_file(folder_paths.get_full_path("ipadapter", ipadapter_file), safe_load=True)
        return (ImagePromptAdapter(sd),)


class ImagePromptApply:
    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {"model": ("MODEL",), "ipadapter": ("IPADAPTER",), "clip_vision": ("CLIP_VISION",),
                             "image": ("IMAGE",),
                             "weight": ("FLOAT", {"default": 1.0, "min": -1.0, "max": 5.0, "step": 0.05}),
                             "start_at": ("FLOAT", {"default": 0.0, "min": 0.0, "max": 1.0, "step": 0.001}),
                             "end_at": ("FLOAT", {"default": 1.0, "min": 0.0, "max": 1.0, "step": 0.001}),
                             "encode": (["encode_image", "model"],)}}

    RETURN_TYPES = ("MODEL",)
    FUNCTION = "apply"
    CATEGORY = "tests/ipadapter_like"

    def apply(self, model, ipadapter, clip_vision, image, weight, start_at=0.0, end_at=1.0, encode="encode_image"):
        hidden = encode_penultimate(clip_vision, image, encode)
        cond = ipadapter.image_tokens(hidden)
        uncond = ipadapter.image_tokens(encode_penultimate(clip_vision, torch.zeros_like(image), encode))
        model_sampling = model.get_model_object("model_sampling")
        work = model.clone()
        base = {"ipadapter": ipadapter, "weight": weight, "cond": cond, "uncond": uncond,
                "sigma_start": model_sampling.percent_to_sigma(start_at),
                "sigma_end": model_sampling.percent_to_sigma(end_at)}
        for n, key in enumerate(SD1_BLOCKS):
            set_model_patch_replace(work, dict(base, number=2 * n + 1), key)
        return (work,)


NODE_CLASS_MAPPINGS = {"ImagePromptLoader": ImagePromptLoader, "ImagePromptApply": ImagePromptApply}
