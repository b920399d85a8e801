"""A fixture pack that uses ComfyUI's API the way ComfyUI-KJNodes does (tests/compat/test_compat_kjnodes.py).

Module-level imports as KJNodes' `nodes/model_optimization_nodes.py` and `nodes/nodes.py` make
them (the pack fails to load without any of them), then one node per pattern:

- `KJPackAttentionOverride`: `transformer_options["optimized_attention_override"]` set to a
  function that calls a `@wrap_attn` kernel's `__wrapped__` (PathchSageAttentionKJ's form);
  mode "sage" imports `sageattention` when the node runs, as KJNodes does;
- `KJPackCFGZeroStar`: `set_model_sampler_cfg_function` reading
  `model_options["transformer_options"]["sample_sigmas"]` (CFG-Zero*, Fan et al. 2025, with
  zero-init of the first steps);
- `KJPackScheduledCFG`: a `CFGGuider` subclass whose `predict_noise` calls
  `comfy.samplers.sampling_function` with no negative outside a step range;
- `KJPackEuler`: a `KSAMPLER` over a sampler function written with `k_diffusion.sampling.to_d`;
- `KJPackTorchSettings`: `CallbacksMP.ON_PRE_RUN` / `ON_CLEANUP` callbacks (recorded in `EVENTS`);
- `KJPackChunkFeedForward`: object patches of every transformer block's `ff.forward` with a
  bound method that runs the class's `forward` over token chunks (WanChunkFeedForward's form);
- `KJPackRope`: `comfy.ldm.flux.math.apply_rope` on a `[B, H, L, D]` tensor.
"""
import types

import torch

import comfy.ldm.modules.attention
import comfy.model_management as mm
import comfy.ops
import comfy.utils
from comfy.k_diffusion.sampling import to_d
from comfy.ldm.flux.math import apply_rope
from comfy.ldm.lumina.model import FeedForward as SwiGLUFeedForward  # imported at load, as KJNodes
from comfy.ldm.modules.attention import attention_pytorch, optimized_attention, optimized_attention_masked, wrap_attn
from comfy.patcher_extension import CallbacksMP
from comfy.sampler_helpers import prepare_mask
from comfy.samplers import KSAMPLER, CFGGuider, sampling_function

EVENTS = []  # (event, patcher) from KJPackTorchSettings' callbacks


def _step_index(sigmas, sigma):
    """Which step of `sigmas` `sigma` is: an exact match, else the interval that contains it."""
    hit = (sigmas == sigma).nonzero()
    if len(hit) > 0:
        return int(hit[0].item())
    for i in range(len(sigmas) - 1):
        if (sigmas[i] - sigma) * (sigmas[i + 1] - sigma) <= 0:
            return i
    return 0


class KJPackAttentionOverride:
    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {"model": ("MODEL",), "mode": (["disabled", "pytorch", "sage"],)}}

    RETURN_TYPES = ("MODEL",)
    FUNCTION = "patch"
    CATEGORY = "kj_pack"

    def patch(self, model, mode):
        if mode == "disabled":
            return (model,)
        if mode == "sage":
            from sageattention import sageattn  # noqa: F401 (KJNodes imports it when the node runs)
        kernel = attention_pytorch
        m = model.clone()
        calls = []

        def override(func, *args, **kwargs):
            calls.append(func.__name__)
            return kernel.__wrapped__(*args, **kwargs)

        override.calls = calls
        m.model_options["transformer_options"]["optimized_attention_override"] = override
        return (m,)


class KJPackCFGZeroStar:
    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {"model": ("MODEL",), "use_zero_init": ("BOOLEAN", {"default": True}),
                             "zero_init_steps": ("INT", {"default": 0, "min": 0})}}

    RETURN_TYPES = ("MODEL",)
    FUNCTION = "patch"
    CATEGORY = "kj_pack"

    def patch(self, model, use_zero_init, zero_init_steps):
        def cfg_zero_star(args):
            cond = args["cond"]  # x - positive denoised
            sigmas = args["model_options"]["transformer_options"]["sample_sigmas"]
            if use_zero_init and _step_index(sigmas, args["timestep"][0]) <= zero_init_steps:
                return cond * 0
            uncond, scale = args["uncond"], args["cond_scale"]
            b = cond.shape[0]
            pos, neg = cond.reshape(b, -1), uncond.reshape(b, -1)
            # the optimal scale of the negative prediction: its projection of the positive one
            alpha = (pos * neg).sum(dim=1, keepdim=True) / ((neg ** 2).sum(dim=1, keepdim=True) + 1e-8)
            alpha = alpha.reshape(b, *([1] * (cond.ndim - 1)))
            return uncond * alpha + scale * (cond - uncond * alpha)

        m = model.clone()
        m.set_model_sampler_cfg_function(cfg_zero_star)
        return (m,)


class ScheduledCFGGuider(CFGGuider):
    def set_cfg(self, cfg, start_percent=0.0, end_percent=1.0):
        self.cfg = cfg
        self.start_percent = start_percent
        self.end_percent = end_percent

    def predict_noise(self, x, timestep, model_options={}, seed=None):  # noqa: B006 (ComfyUI's signature)
        sigmas = model_options["transformer_options"]["sample_sigmas"]
        percent = _step_index(sigmas, timestep.reshape(-1)[0].to(sigmas)) / (len(sigmas) - 1)
        if self.start_percent <= percent <= self.end_percent:
            uncond, cfg = self.conds.get("negative", None), self.cfg
        else:
            uncond, cfg = None, 1.0
        return sampling_function(self.inner_model, x, timestep, uncond, self.conds.get("positive", None), cfg,
                                 model_options=model_options, seed=seed)


class KJPackScheduledCFG:
    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {"model": ("MODEL",), "positive": ("CONDITIONING",), "negative": ("CONDITIONING",),
                             "cfg": ("FLOAT", {"default": 6.0}), "start_percent": ("FLOAT", {"default": 0.0}),
                             "end_percent": ("FLOAT", {"default": 1.0})}}

    RETURN_TYPES = ("GUIDER",)
    FUNCTION = "get_guider"
    CATEGORY = "kj_pack"

    def get_guider(self, model, positive, negative, cfg, start_percent, end_percent):
        guider = ScheduledCFGGuider(model)
        guider.set_conds(positive, negative)
        guider.set_cfg(cfg, start_percent, end_percent)
        return (guider,)


@torch.no_grad()
def sample_kj_euler(model, x, sigmas, extra_args=None, callback=None, disable=None):
    """Euler's method on the probability-flow ODE, written with `to_d` (Karras et al. 2022, alg. 1)."""
    extra_args = {} if extra_args is None else extra_args
    ones = x.new_ones([x.shape[0]])
    for i in range(len(sigmas) - 1):
        denoised = model(x, sigmas[i] * ones, **extra_args)
        if callback is not None:
            callback({"x": x, "i": i, "sigma": sigmas[i], "sigma_hat": sigmas[i], "denoised": denoised})
        x = x + to_d(x, sigmas[i], denoised) * (sigmas[i + 1] - sigmas[i])
    return x


class KJPackEuler:
    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {}}

    RETURN_TYPES = ("SAMPLER",)
    FUNCTION = "get_sampler"
    CATEGORY = "kj_pack"

    def get_sampler(self):
        return (KSAMPLER(sample_kj_euler),)


class KJPackTorchSettings:
    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {"model": ("MODEL",)}}

    RETURN_TYPES = ("MODEL",)
    FUNCTION = "patch"
    CATEGORY = "kj_pack"

    def patch(self, model):
        m = model.clone()
        m.add_callback(CallbacksMP.ON_PRE_RUN, lambda patcher: EVENTS.append(("pre_run", patcher)))
        m.add_callback(CallbacksMP.ON_CLEANUP, lambda patcher: EVENTS.append(("cleanup", patcher)))
        return (m,)


class _ChunkedForward:
    """A descriptor giving a module a forward that runs its class's forward over token chunks."""

    def __init__(self, chunks, scale=1.0):
        self.chunks = chunks
        self.scale = scale

    def __get__(self, obj, objtype=None):
        chunks, scale = self.chunks, self.scale

        def forward(self_module, x):
            parts = [type(self_module).forward(self_module, c) for c in torch.chunk(x, chunks, dim=1)]
            return torch.cat(parts, dim=1) * scale

        return types.MethodType(forward, obj)


class KJPackChunkFeedForward:
    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {"model": ("MODEL",), "chunks": ("INT", {"default": 2, "min": 1}),
                             "scale": ("FLOAT", {"default": 1.0})}}

    RETURN_TYPES = ("MODEL",)
    FUNCTION = "patch"
    CATEGORY = "kj_pack"

    def patch(self, model, chunks, scale):
        m = model.clone()
        diffusion_model = m.get_model_object("diffusion_model")
        for name, module in diffusion_model.named_modules():
            if isinstance(module, comfy.ldm.modules.attention.BasicTransformerBlock):
                ff = module.ff
                assert isinstance(ff, comfy.ldm.modules.attention.FeedForward)
                m.add_object_patch(f"diffusion_model.{name}.ff.forward", _ChunkedForward(chunks, scale).__get__(ff, type(ff)))
        return (m,)


class KJPackRope:
    """q/k `[B, H, L, D]` rotated by freqs `[B, 1, L, D/2, 2, 2]`; returns (q, k) in a tuple."""

    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {"q": ("TENSOR",), "k": ("TENSOR",), "freqs": ("TENSOR",)}}

    RETURN_TYPES = ("TENSOR", "TENSOR")
    FUNCTION = "apply"
    CATEGORY = "kj_pack"

    def apply(self, q, k, freqs):
        return apply_rope(q, k, freqs)


NODE_CLASS_MAPPINGS = {
    "KJPackAttentionOverride": KJPackAttentionOverride,
    "KJPackCFGZeroStar": KJPackCFGZeroStar,
    "KJPackScheduledCFG": KJPackScheduledCFG,
    "KJPackEuler": KJPackEuler,
    "KJPackTorchSettings": KJPackTorchSettings,
    "KJPackChunkFeedForward": KJPackChunkFeedForward,
    "KJPackRope": KJPackRope,
}
