"""A fixture pack that reaches into ComfyUI's runtime the way real packs do
(tests/compat/test_compat_runtime_pack.py):

- at import it replaces `comfy.samplers.get_area_and_mult` with a wrapper that keeps the original
  (smZNodes' `register_hooks`, TiledDiffusion's the same way) and leaves a conditioning entry out
  of the steps outside its own range (smZNodes' step-ranged entries; here a sigma range carried
  by the entry as `runtime_pack_sigmas`), calling the original for the rest; `unregister()` puts
  the original back;
- installs its own `extra_conds` on a MODEL's model as an object patch, built on ComfyUI's
  `BaseModel.extra_conds` (IC-Light's loader), and sizes conditioning with `extra_conds_shapes`
  (ComfyUI's `sampler_helpers.estimate_memory`, which packs copy);
- patches `model_sampling` with a class combining ComfyUI's `ModelSamplingDiscrete` and its own
  prediction mixin whose `calculate_denoised` calls ComfyUI's and changes the result (the
  advanced ModelSampling nodes of sampler packs);
- builds a ModelPatcher with `weight_inplace_update` over another's model (AnimateDiff-Evolved's
  `get_vanilla_model_patcher`) and holds a reference to a weight tensor.
"""
import types

import comfy.conds
import comfy.model_base
import comfy.model_patcher
import comfy.model_sampling
import comfy.samplers

CALLS = {"get_area_and_mult": 0, "calculate_denoised": 0}


class store:
    """smZNodes keeps the originals it replaced on a `store` class."""


def get_area_and_mult(*args, **kwargs):
    CALLS["get_area_and_mult"] += 1
    conds = args[0]
    if "runtime_pack_sigmas" in conds:
        timestep_in = args[2]
        low, high = conds["runtime_pack_sigmas"]
        if not (low <= float(timestep_in[0]) <= high):
            return None
    return store.get_area_and_mult(*args, **kwargs)


def register_hooks():
    patches = [(comfy.samplers, "get_area_and_mult", get_area_and_mult)]
    for parent, fn_name, fn_patch in patches:
        if not hasattr(store, fn_patch.__name__):
            setattr(store, fn_patch.__name__, getattr(parent, fn_name))
            setattr(parent, fn_name, fn_patch)


def unregister():
    if hasattr(store, "get_area_and_mult"):
        comfy.samplers.get_area_and_mult = store.get_area_and_mult
        del store.get_area_and_mult


register_hooks()


# --- IC-Light's object-patched extra_conds --------------------------------------------------------

class TextScale:
    """The pack's `extra_conds`: ComfyUI's, with the text conditioning scaled by `factor`."""

    factor = 1.0

    def extra_conds(self, **kwargs):
        out = comfy.model_base.BaseModel.extra_conds(self, **kwargs)
        cross_attn = kwargs.get("cross_attn", None)
        if cross_attn is not None:
            out["c_crossattn"] = comfy.conds.CONDCrossAttn(cross_attn * TextScale.factor)
        return out


def apply_text_scale(model, factor):
    TextScale.factor = factor
    model_clone = model.clone()

    def bound_extra_conds(self, **kwargs):
        return TextScale.extra_conds(self, **kwargs)

    model_clone.add_object_patch("extra_conds", types.MethodType(bound_extra_conds, model_clone.model))
    return model_clone


def cond_shapes(model, conds):
    """{input name: [shapes]} over every entry, as ComfyUI's estimate_memory collects them."""
    shapes = {}
    for _, cs in conds.items():
        for cond in cs:
            for k, v in model.model.extra_conds_shapes(**cond).items():
                shapes.setdefault(k, []).append(v)
    return shapes


# --- a prediction mixin of the pack's own -------------------------------------------------------

class HalfEPS(comfy.model_sampling.EPS):
    """An eps prediction whose denoised estimate is pulled halfway to zero."""

    def calculate_denoised(self, sigma, model_output, model_input):
        CALLS["calculate_denoised"] += 1
        return super().calculate_denoised(sigma, model_output, model_input) * 0.5


def patch_model_sampling(model):
    class ModelSamplingAdvanced(comfy.model_sampling.ModelSamplingDiscrete, HalfEPS):
        pass

    m = model.clone()
    m.add_object_patch("model_sampling", ModelSamplingAdvanced(model.model.model_config))
    return m


# --- AnimateDiff-Evolved's vanilla patcher ---------------------------------------------------------

def get_vanilla_model_patcher(m, weight_inplace_update=True):
    model = comfy.model_patcher.ModelPatcher(m.model, m.load_device, m.offload_device, m.size,
                                             weight_inplace_update=weight_inplace_update)
    model.patches = {}
    for k in m.patches:
        model.patches[k] = m.patches[k][:]
    model.object_patches = m.object_patches.copy()
    return model
