"""Fixture pack: calls ComfyUI's patcher API the way real packs do (ComfyUI-GGUF,
AnimateDiff-Evolved, KJNodes, Advanced-ControlNet): clone a MODEL and add a weight patch, an
object patch, wrappers, callbacks; subclass ModelPatcher; combine model-sampling classes."""
import comfy.model_base
import comfy.model_patcher
import comfy.model_sampling
import comfy.patcher_extension
import comfy.supported_models
import torch
from comfy.model_patcher import ModelPatcher
from comfy.patcher_extension import CallbacksMP, WrappersMP

# What the wrappers and callbacks saw, for the tests to read (a pack would log instead).
EVENTS = []


class PackModelPatcher(ModelPatcher):
    """A pack's ModelPatcher subclass (as GGUF's): marks the clones it makes."""

    pack_marker = "pack"

    def clone(self, *args, **kwargs):
        n = super().clone(*args, **kwargs)
        n.cloned_by_pack = True
        return n


class PatcherPackBiasPatch:
    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {"model": ("MODEL",), "shift": ("FLOAT", {"default": 0.1})}}

    RETURN_TYPES = ("MODEL",)
    FUNCTION = "patch"
    CATEGORY = "tests"

    def patch(self, model, shift):
        m = model.clone()
        key = "diffusion_model.out.2.bias"
        bias = m.get_model_object(key)
        m.add_patches({key: (torch.full_like(bias, shift),)}, 1.0, 1.0)
        return (m,)


class PatcherPackWrappers:
    """APPLY_MODEL wrapper scaling the denoised output, DIFFUSION_MODEL and OUTER_SAMPLE wrappers
    that only pass through and record, ON_PRE_RUN / ON_CLEANUP callbacks."""

    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {"model": ("MODEL",), "scale": ("FLOAT", {"default": 1.0})}}

    RETURN_TYPES = ("MODEL",)
    FUNCTION = "patch"
    CATEGORY = "tests"

    def patch(self, model, scale):
        m = model.clone()

        def apply_model_wrapper(executor, x, t, c_concat, c_crossattn, control, transformer_options, **kwargs):
            EVENTS.append(("apply_model", type(executor.class_obj).__name__, tuple(x.shape)))
            return executor(x, t, c_concat, c_crossattn, control, transformer_options, **kwargs) * scale

        def diffusion_model_wrapper(executor, *args, **kwargs):
            EVENTS.append(("diffusion_model", type(executor.class_obj).__name__))
            return executor(*args, **kwargs)

        def outer_sample_wrapper(executor, *args, **kwargs):
            guider = executor.class_obj
            EVENTS.append(("outer_sample", type(guider).__name__, guider.model_patcher is m))
            return executor(*args, **kwargs)

        m.add_wrapper_with_key(WrappersMP.APPLY_MODEL, "patcher_pack", apply_model_wrapper)
        comfy.patcher_extension.add_wrapper_with_key(WrappersMP.DIFFUSION_MODEL, "patcher_pack",
                                                     diffusion_model_wrapper, m.model_options, is_model_options=True)
        m.add_wrapper_with_key(WrappersMP.OUTER_SAMPLE, "patcher_pack", outer_sample_wrapper)
        m.add_callback_with_key(CallbacksMP.ON_PRE_RUN, "patcher_pack", lambda p: EVENTS.append(("pre_run",)))
        m.add_callback_with_key(CallbacksMP.ON_CLEANUP, "patcher_pack", lambda p: EVENTS.append(("cleanup",)))
        return (m,)


class PatcherPackVPrediction:
    """An object patch of `model_sampling` with a class combined from ComfyUI's parts."""

    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {"model": ("MODEL",)}}

    RETURN_TYPES = ("MODEL",)
    FUNCTION = "patch"
    CATEGORY = "tests"

    def patch(self, model):
        class ModelSamplingAdvanced(comfy.model_sampling.ModelSamplingDiscrete, comfy.model_sampling.V_PREDICTION):
            pass

        m = model.clone()
        m.add_object_patch("model_sampling", ModelSamplingAdvanced(model.model.model_config))
        return (m,)


class PatcherPackSubclass:
    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {"model": ("MODEL",)}}

    RETURN_TYPES = ("MODEL",)
    FUNCTION = "patch"
    CATEGORY = "tests"

    def patch(self, model):
        n = PackModelPatcher(model.model, model.load_device, model.offload_device, model.size,
                             weight_inplace_update=model.weight_inplace_update)
        n.patches = {k: list(v) for k, v in model.patches.items()}
        n.object_patches = dict(model.object_patches)
        return (n.clone(),)


class PatcherPackModelKind:
    """The isinstance checks packs make on MODEL (AnimateDiff, Easy-Use, IPAdapter)."""

    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {"model": ("MODEL",)}}

    RETURN_TYPES = ("STRING",)
    FUNCTION = "kind"
    CATEGORY = "tests"

    def kind(self, model):
        checks = {
            "patcher": isinstance(model, comfy.model_patcher.ModelPatcher),
            "base": isinstance(model.model, comfy.model_base.BaseModel),
            "sdxl": isinstance(model.model, comfy.model_base.SDXL),
            "flux": isinstance(model.model, comfy.model_base.Flux),
            "cfg_sdxl": isinstance(model.model.model_config, comfy.supported_models.SDXL),
            "cfg_sd15": isinstance(model.model.model_config, comfy.supported_models.SD15),
            "eps": model.model.model_type == comfy.model_base.ModelType.EPS,
        }
        return (",".join(k for k, v in checks.items() if v),)


NODE_CLASS_MAPPINGS = {
    "PatcherPackBiasPatch": PatcherPackBiasPatch,
    "PatcherPackWrappers": PatcherPackWrappers,
    "PatcherPackVPrediction": PatcherPackVPrediction,
    "PatcherPackSubclass": PatcherPackSubclass,
    "PatcherPackModelKind": PatcherPackModelKind,
}
