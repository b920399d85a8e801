"""Fixture pack: calls ComfyUI's API the way Kosinkadink's packs do (AnimateDiff-Evolved's
motion_module_ad.py, model_injection.py, sampling.py and utils_model.py): a motion module file
loaded with `comfy.utils.load_torch_file` into a module wrapped in its own `ModelPatcher`
(callbacks and an attachment), attached to a MODEL clone as an additional model with a
`PatcherInjection` that inserts temporal modules into `diffusion_model.input_blocks` /
`middle_block` / `output_blocks` (after the last `SpatialTransformer` of a block, else after its
first ResBlock) and a `forward_timestep_embed_patch` that runs them; an OUTER_SAMPLE wrapper that
swaps `comfy.samplers.sampling_function` for the sample and tells the modules the frame count;
a CALC_COND_BATCH wrapper; and AnimateDiff-Evolved's LCM / beta-schedule model samplings built
from `comfy_extras.nodes_model_advanced` and `comfy.model_base.model_sampling`."""

import comfy.model_management
import comfy.model_sampling
import comfy.samplers
import comfy.utils
import comfy_extras.nodes_model_advanced
import torch
from comfy.ldm.modules.attention import SpatialTransformer
from comfy.model_base import ModelType, model_sampling
from comfy.model_patcher import ModelPatcher
from comfy.patcher_extension import CallbacksMP, PatcherInjection, WrappersMP
from torch import nn

KEY = "KK"
# What the wrappers and callbacks saw, for the tests to read (a pack would log instead).
EVENTS = []


# --- the motion module (AnimateDiff's temporal transformer, in the fixture's own words) -------

class TemporalAttention(nn.Module):
    def __init__(self, c, length):
        super().__init__()
        self.to_q = nn.Linear(c, c, bias=False)
        self.to_k = nn.Linear(c, c, bias=False)
        self.to_v = nn.Linear(c, c, bias=False)
        self.to_out = nn.ModuleList([nn.Linear(c, c)])
        self.pos_encoder = nn.Module()
        self.pos_encoder.register_buffer("pe", torch.zeros(1, length, c))
        self.heads = 8

    def forward(self, x):  # x [N, F, C]: attention across the F frames
        x = x + self.pos_encoder.pe[:, :x.shape[1]]
        n, f, c = x.shape
        q, k, v = (p(x).view(n, f, self.heads, c // self.heads).transpose(1, 2) for p in (self.to_q, self.to_k, self.to_v))
        out = torch.nn.functional.scaled_dot_product_attention(q, k, v).transpose(1, 2).reshape(n, f, c)
        return self.to_out[0](out)


class GEGLUFeedForward(nn.Module):
    def __init__(self, c):
        super().__init__()
        proj = nn.Module()
        proj.proj = nn.Linear(c, 8 * c)
        self.net = nn.ModuleList([proj, nn.Identity(), nn.Linear(4 * c, c)])

    def forward(self, x):
        a, gate = self.net[0].proj(x).chunk(2, dim=-1)
        return self.net[2](a * torch.nn.functional.gelu(gate))


class TemporalBlock(nn.Module):
    def __init__(self, c, length):
        super().__init__()
        self.attention_blocks = nn.ModuleList([TemporalAttention(c, length) for _ in range(2)])
        self.norms = nn.ModuleList([nn.LayerNorm(c) for _ in range(2)])
        self.ff = GEGLUFeedForward(c)
        self.ff_norm = nn.LayerNorm(c)

    def forward(self, h):
        for attention, norm in zip(self.attention_blocks, self.norms):
            h = attention(norm(h)) + h
        return self.ff(self.ff_norm(h)) + h


class TemporalTransformer(nn.Module):
    def __init__(self, c, length):
        super().__init__()
        self.norm = nn.GroupNorm(32, c, eps=1e-6)
        self.proj_in = nn.Linear(c, c)
        self.transformer_blocks = nn.ModuleList([TemporalBlock(c, length)])
        self.proj_out = nn.Linear(c, c)


class VanillaTemporalModule(nn.Module):
    """One injected module: x [(B F), C, H, W] -> x + temporal attention over the F frames."""

    def __init__(self, c, length):
        super().__init__()
        self.temporal_transformer = TemporalTransformer(c, length)
        self.video_length = 1

    def forward(self, x, context=None, transformer_options=None):
        t = self.temporal_transformer
        bf, c, hh, ww = x.shape
        f = self.video_length
        h = t.norm(x).view(bf // f, f, c, hh * ww).permute(0, 3, 1, 2).reshape(-1, f, c)  # [(B HW), F, C]
        h = t.proj_out(t.transformer_blocks[0](t.proj_in(h)))
        h = h.view(bf // f, hh * ww, f, c).permute(0, 2, 3, 1).reshape(bf, c, hh, ww)
        return x + h


class MotionModule(nn.Module):
    def __init__(self, modules):
        super().__init__()
        self.motion_modules = nn.ModuleList(modules)


class MotionModel(nn.Module):
    """`down_blocks` / `up_blocks` / `mid_block` as in the file, sized from its tensors."""

    def __init__(self, state):
        super().__init__()

        def block(prefix):
            count = 1 + max(int(k[len(prefix):].split(".")[0]) for k in state if k.startswith(prefix))
            return MotionModule([
                VanillaTemporalModule(state[f"{prefix}{m}.temporal_transformer.proj_in.weight"].shape[0],
                                      state[f"{prefix}{m}.temporal_transformer.transformer_blocks.0."
                                            "attention_blocks.0.pos_encoder.pe"].shape[1])
                for m in range(count)])

        levels = 1 + max(int(k.split(".")[1]) for k in state if k.startswith("down_blocks."))
        self.down_blocks = nn.ModuleList([block(f"down_blocks.{i}.motion_modules.") for i in range(levels)])
        self.up_blocks = nn.ModuleList([block(f"up_blocks.{i}.motion_modules.") for i in range(levels)])
        self.mid_block = block("mid_block.motion_modules.") if any(k.startswith("mid_block.") for k in state) else None

    def modules_in_order(self):
        return [m for b in self.down_blocks for m in b.motion_modules], \
            [m for b in self.up_blocks for m in b.motion_modules], \
            list(self.mid_block.motion_modules) if self.mid_block is not None else []

    def set_video_length(self, length):
        for m in self.modules():
            if isinstance(m, VanillaTemporalModule):
                m.video_length = length

    def inject(self, unet):
        down, up, mid = self.modules_in_order()
        _inject(unet.input_blocks, down)
        _inject(unet.output_blocks, up)
        _inject([unet.middle_block], mid)

    def eject(self, unet):
        for blocks in (unet.input_blocks, unet.output_blocks, [unet.middle_block]):
            for block in blocks:
                for idx in sorted((i for i, c in enumerate(block) if type(c) is VanillaTemporalModule), reverse=True):
                    block.pop(idx)


def _inject(unet_blocks, modules):
    # AnimateDiff's rule: after the last SpatialTransformer of a block, else after its first ResBlock.
    modules = list(modules)
    for block in unet_blocks:
        if not modules:
            break
        st_idx, res_idx = -1, -1
        for idx, component in enumerate(block):
            if type(component) == SpatialTransformer:
                st_idx = idx
            elif type(component).__name__ == "ResBlock" and res_idx < 0:
                res_idx = idx
        at = st_idx if st_idx >= 0 else res_idx
        if at >= 0:
            block.insert(at + 1, modules.pop(0))


# --- ModelPatcher plumbing, as model_injection.py does it -------------------------------------

def _inject_motion(patcher):
    for mm in patcher.get_additional_models_with_key(KEY):
        mm.model.inject(patcher.model.diffusion_model)
    EVENTS.append("inject")


def _eject_motion(patcher):
    for mm in patcher.get_additional_models_with_key(KEY):
        mm.model.eject(patcher.model.diffusion_model)
    EVENTS.append("eject")


def _forward_timestep_embed_patch(layer, x, emb, context, transformer_options, output_shape, time_context,
                                  num_video_frames, image_only_indicator, *args, **kwargs):
    return layer(x, context, transformer_options=transformer_options)


class MotionAttachment:
    def __init__(self):
        self.pre_runs = 0
        self.cleanups = 0


def create_motion_patcher(module):
    patcher = ModelPatcher(module, load_device=comfy.model_management.get_torch_device(),
                           offload_device=comfy.model_management.unet_offload_device())
    patcher.add_callback_with_key(CallbacksMP.ON_PRE_RUN, KEY, lambda p, *a, **k: _attachment(p).__setattr__(
        "pre_runs", _attachment(p).pre_runs + 1))
    patcher.add_callback_with_key(CallbacksMP.ON_CLEANUP, KEY, lambda p, *a, **k: _attachment(p).__setattr__(
        "cleanups", _attachment(p).cleanups + 1))
    patcher.set_attachments(KEY, MotionAttachment())
    return patcher


def _attachment(patcher):
    return patcher.get_attachment(KEY)


def outer_sample_wrapper(executor, *args, **kwargs):
    # args: noise, latent_image, sampler, sigmas, denoise_mask, callback, disable_pbar, seed
    guider = executor.class_obj
    latents = args[1]
    for mm in guider.model_patcher.get_additional_models_with_key(KEY):
        mm.model.set_video_length(latents.shape[0])
        mm.pre_run()  # AnimateDiff-Evolved runs its motion models' ON_PRE_RUN itself
    original = comfy.samplers.sampling_function

    def evolved_sampling_function(model, x, timestep, uncond, cond, cond_scale, model_options={}, seed=None):
        EVENTS.append(("sampling_function", tuple(x.shape)))
        return original(model, x, timestep, uncond, cond, cond_scale, model_options, seed)

    comfy.samplers.sampling_function = evolved_sampling_function
    try:
        EVENTS.append(("outer_sample", tuple(latents.shape), type(guider).__name__))
        return executor(*args, **kwargs)
    finally:
        comfy.samplers.sampling_function = original


def prepare_sampling_wrapper(executor, model, noise_shape, *args, **kwargs):
    EVENTS.append(("prepare_sampling", tuple(noise_shape)))
    return executor(model, noise_shape, *args, **kwargs)


def calc_cond_batch_wrapper(executor, model, conds, x_in, timestep, model_options):
    EVENTS.append(("calc_cond_batch", len(conds), tuple(x_in.shape)))
    return executor(model, conds, x_in, timestep, model_options)


# --- AnimateDiff-Evolved's model samplings (utils_model.py) -----------------------------------

class ModelSamplingConfig:
    def __init__(self, beta_schedule, linear_start=None, linear_end=None):
        self.sampling_settings = {"beta_schedule": beta_schedule}
        if linear_start is not None:
            self.sampling_settings["linear_start"] = linear_start
        if linear_end is not None:
            self.sampling_settings["linear_end"] = linear_end


def factory_distilled(original_timesteps):
    class ModelSamplingDiscreteDistilledEvolved(comfy_extras.nodes_model_advanced.ModelSamplingDiscreteDistilled):
        def __init__(self, *args, **kwargs):
            self.original_timesteps = original_timesteps
            super().__init__(*args, **kwargs)
    return ModelSamplingDiscreteDistilledEvolved


def evolved_model_sampling(config, lcm_timesteps=None):
    if lcm_timesteps is not None:
        base = (comfy_extras.nodes_model_advanced.ModelSamplingDiscreteDistilled if lcm_timesteps == 50
                else factory_distilled(lcm_timesteps))

        class ModelSamplingAdvancedEvolved(base, comfy_extras.nodes_model_advanced.LCM):
            pass
        return ModelSamplingAdvancedEvolved(config)
    return model_sampling(config, ModelType.EPS)


# --- nodes --------------------------------------------------------------------------------------

class KKLoadMotionModule:
    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {"path": ("STRING", {"default": ""})}}

    RETURN_TYPES = ("MOTION_MODEL_KK",)
    FUNCTION = "load"
    CATEGORY = "tests"

    def load(self, path):
        state = comfy.utils.load_torch_file(path, safe_load=True)
        module = MotionModel(state)
        missing, unexpected = module.load_state_dict(state, strict=False)
        if missing or unexpected:
            raise ValueError(f"motion module {path}: missing {missing[:3]}, unexpected {unexpected[:3]}")
        return (create_motion_patcher(module),)


class KKApplyMotionModel:
    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {"model": ("MODEL",), "motion_model": ("MOTION_MODEL_KK",),
                             "beta_schedule": (["use existing", "sqrt_linear", "lcm", "lcm[25_ots]"],),
                             "motion_bias": ("FLOAT", {"default": 0.0})}}

    RETURN_TYPES = ("MODEL",)
    FUNCTION = "apply"
    CATEGORY = "tests"

    def apply(self, model, motion_model, beta_schedule="use existing", motion_bias=0.0):
        m = model.clone()
        motion = motion_model.clone()
        if motion_bias:
            # a weight patch on the motion model, as AnimateDiff-Evolved's motion LoRAs are
            key = "down_blocks.0.motion_modules.0.temporal_transformer.proj_out.bias"
            motion.add_patches({key: (torch.full_like(motion.get_model_object(key), motion_bias),)}, 1.0, 1.0)
        m.set_additional_models(KEY, [motion])
        m.set_injections(KEY, [PatcherInjection(inject=_inject_motion, eject=_eject_motion)])
        m.set_model_forward_timestep_embed_patch((VanillaTemporalModule, _forward_timestep_embed_patch))
        m.remove_wrappers_with_key(WrappersMP.OUTER_SAMPLE, KEY)
        m.add_wrapper_with_key(WrappersMP.OUTER_SAMPLE, KEY, outer_sample_wrapper)
        m.add_wrapper_with_key(WrappersMP.CALC_COND_BATCH, KEY, calc_cond_batch_wrapper)
        m.add_wrapper_with_key(WrappersMP.PREPARE_SAMPLING, KEY, prepare_sampling_wrapper)
        if beta_schedule == "sqrt_linear":
            m.add_object_patch("model_sampling", evolved_model_sampling(ModelSamplingConfig("sqrt_linear")))
        elif beta_schedule.startswith("lcm"):
            timesteps = 25 if beta_schedule == "lcm[25_ots]" else 50
            m.add_object_patch("model_sampling", evolved_model_sampling(ModelSamplingConfig("linear"), timesteps))
        return (m,)


NODE_CLASS_MAPPINGS = {"KKLoadMotionModule": KKLoadMotionModule, "KKApplyMotionModel": KKApplyMotionModel}
NODE_DISPLAY_NAME_MAPPINGS = {}
