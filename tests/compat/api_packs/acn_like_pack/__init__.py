"""A fixture pack that uses ComfyUI's ControlNet API the way Advanced-ControlNet does
(adv_control/control.py, utils.py, control_sparsectrl.py, nodes_main.py), written for the tests:

- `WeightedControlNet(comfy.controlnet.ControlNet)`: built with ComfyUI's constructor keywords
  and `from_vanilla` (`copy_to` + a clone of `control_model_wrapped`), its own `get_control`
  (hint resized with `comfy.utils.common_upscale`, broadcast with
  `comfy.controlnet.broadcast_image_to`, network called on `model_sampling_current`'s input and
  timestep with `comfy.model_base.convert_tensor` extra conds), soft per-block weights
  `base_multiplier ** (n - i)` applied in an overridden `control_merge`, `pre_run` / `cleanup` /
  `copy` / `get_models` overrides that record what the sampler called.
- `SparseLikeControlNet(comfy.cldm.cldm.ControlNet)`: built from ComfyUI's keyword config (as
  `SparseControlNet(**controlnet_config)`), reads `self.dims`, `self.model_channels`,
  `self.dtype`, and its forward zeroes the noisy input as SparseCtrl's does.
- Nodes: a loader (`comfy.controlnet.load_controlnet` then `from_vanilla`) and an apply node
  (conditioning copies carrying the chained ControlNet, as ACN's AdvancedControlNetApply).
"""
from __future__ import annotations

import comfy.controlnet
import comfy.model_base
import comfy.model_management
import comfy.ops
import comfy.utils
import folder_paths
import torch
from comfy.cldm.cldm import ControlNet as ControlNetCLDM
from comfy.cldm.cldm import TimestepEmbedSequential, timestep_embedding, zero_module
from comfy.controlnet import ControlNet, StrengthType, broadcast_image_to

EVENTS: list[tuple] = []


class WeightedControlNet(ControlNet):
    """A ControlNet whose residuals get soft per-block weights (ACN's ScaledSoft weights)."""

    def __init__(self, control_model, base_multiplier: float = 1.0, global_average_pooling=False, compression_ratio=8,
                 latent_format=None, load_device=None, manual_cast_dtype=None, extra_conds=["y"],
                 strength_type=StrengthType.CONSTANT, concat_mask=False, preprocess_image=lambda a: a):
        super().__init__(control_model=control_model, global_average_pooling=global_average_pooling,
                         compression_ratio=compression_ratio, latent_format=latent_format, load_device=load_device,
                         manual_cast_dtype=manual_cast_dtype, extra_conds=extra_conds, strength_type=strength_type,
                         concat_mask=concat_mask, preprocess_image=preprocess_image)
        self.base_multiplier = base_multiplier

    @staticmethod
    def from_vanilla(v: ControlNet, base_multiplier: float = 1.0) -> "WeightedControlNet":
        out = WeightedControlNet(control_model=v.control_model, base_multiplier=base_multiplier,
                                 global_average_pooling=v.global_average_pooling, compression_ratio=v.compression_ratio,
                                 latent_format=v.latent_format, load_device=v.load_device,
                                 manual_cast_dtype=v.manual_cast_dtype, extra_conds=v.extra_conds,
                                 strength_type=v.strength_type, concat_mask=v.concat_mask,
                                 preprocess_image=v.preprocess_image)
        v.copy_to(out)
        out.control_model_wrapped = v.control_model_wrapped.clone()
        return out

    def weight(self, key: str, idx: int, count: int) -> float:
        if key == "middle":
            return 1.0
        weights = [self.base_multiplier ** float(count - i) for i in range(count + 1)][:-1]
        if key == "input":
            weights.reverse()
        return weights[idx]

    def get_control(self, x_noisy, t, cond, batched_number, transformer_options):
        EVENTS.append(("get_control", float(t[0])))
        control_prev = None
        if self.previous_controlnet is not None:
            control_prev = self.previous_controlnet.get_control(x_noisy, t, cond, batched_number, transformer_options)
        if self.timestep_range is not None and (t[0] > self.timestep_range[0] or t[0] < self.timestep_range[1]):
            return control_prev
        dtype = self.manual_cast_dtype if self.manual_cast_dtype is not None else self.control_model.dtype
        ratio = self.compression_ratio
        if self.cond_hint is None or x_noisy.shape[2] * ratio != self.cond_hint.shape[2] \
                or x_noisy.shape[3] * ratio != self.cond_hint.shape[3]:
            self.cond_hint = comfy.utils.common_upscale(self.cond_hint_original, x_noisy.shape[3] * ratio,
                                                        x_noisy.shape[2] * ratio, self.upscale_algorithm, "center")
            self.cond_hint = self.preprocess_image(self.cond_hint).to(device=x_noisy.device, dtype=dtype)
        if x_noisy.shape[0] != self.cond_hint.shape[0]:
            self.cond_hint = broadcast_image_to(self.cond_hint, x_noisy.shape[0], batched_number)
        context = cond.get("crossattn_controlnet", cond["c_crossattn"])
        extra = self.extra_args.copy()
        for c in self.extra_conds:
            value = cond.get(c, None)
            if value is not None:
                extra[c] = comfy.model_base.convert_tensor(value, dtype, x_noisy.device)
        timestep = self.model_sampling_current.timestep(t)
        x_in = self.model_sampling_current.calculate_input(t, x_noisy)
        control = self.control_model(x=x_in.to(dtype), hint=self.cond_hint, timesteps=timestep.to(dtype),
                                     context=comfy.model_management.cast_to_device(context, x_noisy.device, dtype),
                                     **extra)
        return self.control_merge(control, control_prev, output_dtype=None)

    def control_merge(self, control, control_prev, output_dtype):
        for key, residuals in control.items():
            for i, x in enumerate(residuals):
                if x is not None:
                    residuals[i] = x * self.weight(key, i, len(residuals))
        return super().control_merge(control, control_prev, output_dtype)

    def pre_run(self, model, percent_to_timestep_function):
        EVENTS.append(("pre_run", type(model).__name__))
        super().pre_run(model, percent_to_timestep_function)

    def cleanup(self):
        EVENTS.append(("cleanup",))
        super().cleanup()

    def copy(self):
        c = WeightedControlNet(None, base_multiplier=self.base_multiplier,
                               global_average_pooling=self.global_average_pooling, load_device=self.load_device,
                               manual_cast_dtype=self.manual_cast_dtype)
        c.control_model = self.control_model
        c.control_model_wrapped = self.control_model_wrapped
        self.copy_to(c)
        return c


class SparseLikeControlNet(ControlNetCLDM):
    """SparseCtrl's network shape: ComfyUI's ControlNet built from keywords, an optional
    simplified (one zero convolution) hint block, a forward on a zeroed noisy input."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        operations = kwargs.get("operations", comfy.ops.disable_weight_init)
        self.use_simplified_conditioning_embedding = kwargs.get("use_simplified_conditioning_embedding", False)
        if self.use_simplified_conditioning_embedding:
            self.input_hint_block = TimestepEmbedSequential(zero_module(operations.conv_nd(
                self.dims, kwargs["hint_channels"], self.model_channels, 3, padding=1, dtype=self.dtype,
                device=kwargs.get("device"))))

    def forward(self, x, hint, timesteps, context, y=None, **kwargs):
        emb = self.time_embed(timestep_embedding(timesteps, self.model_channels, repeat_only=False).to(x.dtype))
        x = torch.zeros_like(x)
        guided_hint = self.input_hint_block(hint, emb, context)
        outputs = []
        h = x
        for module, zero_conv in zip(self.input_blocks, self.zero_convs):
            h = module(h, emb, context)
            if guided_hint is not None:
                h += guided_hint
                guided_hint = None
            outputs.append(zero_conv(h, emb, context))
        h = self.middle_block(h, emb, context)
        return {"middle": [self.middle_block_out(h, emb, context)], "output": outputs}


class ACNLikeLoader:
    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {"control_net_name": (folder_paths.get_filename_list("controlnet"),),
                             "base_multiplier": ("FLOAT", {"default": 1.0, "min": 0.0, "max": 1.0})}}

    RETURN_TYPES = ("CONTROL_NET",)
    FUNCTION = "load"
    CATEGORY = "tests/acn"

    def load(self, control_net_name, base_multiplier):
        path = folder_paths.get_full_path("controlnet", control_net_name)
        return (WeightedControlNet.from_vanilla(comfy.controlnet.load_controlnet(path), base_multiplier),)


class ACNLikeApply:
    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {"positive": ("CONDITIONING",), "negative": ("CONDITIONING",),
                             "control_net": ("CONTROL_NET",), "image": ("IMAGE",),
                             "strength": ("FLOAT", {"default": 1.0}), "start_percent": ("FLOAT", {"default": 0.0}),
                             "end_percent": ("FLOAT", {"default": 1.0})}}

    RETURN_TYPES = ("CONDITIONING", "CONDITIONING")
    FUNCTION = "apply"
    CATEGORY = "tests/acn"

    def apply(self, positive, negative, control_net, image, strength, start_percent, end_percent):
        hint = image.movedim(-1, 1)
        made = {}
        out = []
        for conditioning in (positive, negative):
            c = []
            for t in conditioning:
                d = t[1].copy()
                prev = d.get("control", None)
                if prev in made:
                    c_net = made[prev]
                else:
                    c_net = control_net.copy().set_cond_hint(hint, strength, (start_percent, end_percent))
                    c_net.set_previous_controlnet(prev)
                    made[prev] = c_net
                d["control"] = c_net
                d["control_apply_to_uncond"] = False
                c.append([t[0], d])
            out.append(c)
        return (out[0], out[1])


NODE_CLASS_MAPPINGS = {"ACNLikeLoader": ACNLikeLoader, "ACNLikeApply": ACNLikeApply}
