"""ComfyUI's `comfy.model_base` model classes over our one `DiffusionModel` class.

ComfyUI has a class per model kind (`BaseModel`, `SDXL`, `SDXLRefiner`, `SD21UNCLIP`, ...); we
have one class whose `family` says what it is. Packs check `isinstance(model.model,
comfy.model_base.SDXL)`, so each class here is a subclass of `DiffusionModel` whose metaclass
answers `isinstance` from the model's family: true exactly for the families whose ComfyUI model
is that class or a subclass of it (ComfyUI's hierarchy: `SDXL_instructpix2pix(IP2P, SDXL)`, ...).
`SD3` (SD3 / SD3.5 MMDiTs) and `Flux` (Flux.1 dev, Kontext and schnell; ComfyUI builds schnell
as a `Flux` too, with flow sampling) answer for our DiT families. A class of a kind we do not load
(CosmosPredict2, AuraFlow, ...) matches no model of ours. Pack subclasses of these classes are ordinary
classes (plain `isinstance`).
"""
from __future__ import annotations

from typing import Any

from comfy_core.models.diffusion import DiffusionModel
from comfy_core.models.model_sampling import ModelType  # noqa: F401  (ComfyUI's comfy.model_base.ModelType)


class ModelClassError(NotImplementedError):
    """Building a ComfyUI model class from a config, which our loaders do instead."""


class _FamilyClass(type(DiffusionModel)):
    """`isinstance(obj, cls)`: obj's family names a class (`Family.comfy_model_class`) that is `cls`
    or a subclass of it (or obj is a plain instance); every model of ours is a `BaseModel`."""

    def __instancecheck__(cls, obj: Any) -> bool:
        if type.__instancecheck__(cls, obj):
            return True
        if not cls.__dict__.get("_comfy_kind") or not isinstance(obj, DiffusionModel):
            return False
        if cls is BaseModel:
            return True
        kind = _KINDS.get(getattr(getattr(obj, "family", None), "comfy_model_class", None) or "BaseModel")
        return kind is not None and issubclass(kind, cls)


class BaseModel(DiffusionModel, metaclass=_FamilyClass):
    """Every model of ours (ComfyUI's base class of all model kinds)."""

    _comfy_kind = True

    def __init__(self, model_config: Any = None, model_type: Any = None, device: Any = None, *args: Any,
                 **kwargs: Any) -> None:
        raise ModelClassError(
            f"comfy.model_base.{type(self).__name__}(model_config, ...): this engine builds models with its "
            "loaders (comfy.sd.load_checkpoint_guess_config, comfy.sd.load_diffusion_model); a ComfyUI model "
            "class cannot be constructed from a config here")

    def extra_conds(self, **kwargs: Any) -> dict[str, Any]:
        """ComfyUI's `BaseModel.extra_conds(**options)`: a conditioning entry's model inputs as
        `comfy.conds` values (compat/mp_conds.py): `c_concat` (the family's concatenated channels,
        or the entry's `noise_concat`), `y` (`encode_adm`), `c_crossattn` (`cross_attn`),
        `crossattn_controlnet`, and the family's further inputs (Flux's guidance and reference
        latents, ...; `DiffusionModel.extra_inputs`). `kwargs` are what sampling passes: the entry's
        options with `noise`, `device`, `width`, `height`, `prompt_type`, `latent_image`, ...
        A pack's own `extra_conds` (an object patch, as IC-Light's, or a subclass calling this
        one) is what our sampling uses then (`extra_inputs` below)."""
        from compat.mp_conds import CONDCrossAttn, CONDNoiseShape, CONDRegular, as_cond

        out: dict[str, Any] = {}
        concat = DiffusionModel.concat_cond(self, **kwargs)
        if concat is not None:
            out["c_concat"] = CONDNoiseShape(concat)
        adm = DiffusionModel.encode_adm(self, **kwargs)
        if adm is not None:
            out["y"] = CONDRegular(adm)
        if kwargs.get("cross_attn") is not None:
            out["c_crossattn"] = CONDCrossAttn(kwargs["cross_attn"])
        if kwargs.get("cross_attn_controlnet") is not None:
            out["crossattn_controlnet"] = CONDCrossAttn(kwargs["cross_attn_controlnet"])
        if kwargs.get("noise_concat") is not None:
            out["c_concat"] = CONDNoiseShape(kwargs["noise_concat"])
        for name, value in DiffusionModel.extra_inputs(self, **kwargs).items():
            out[name] = as_cond(name, value)
        return out

    def extra_conds_shapes(self, **kwargs: Any) -> dict[str, Any]:
        """ComfyUI's `extra_conds_shapes(**entry)`: the shapes of a conditioning entry's large model
        inputs, for memory estimates: reference latents (`reference_latents`) as the one token
        sequence the model gets, `[1, 16, total // 16]`, named as Flux's (`ref_latents`) or Wan's
        (`reference_latent`, with `reference_motion`'s shape) model class names it; {} for the
        others, as ComfyUI's base class."""
        import math

        out: dict[str, Any] = {}
        references = kwargs.get("reference_latents")
        flux, wan = isinstance(self, _KINDS["Flux"]), isinstance(self, _KINDS["WAN21"])
        if references is not None and (flux or wan):
            out["ref_latents" if flux else "reference_latent"] = [
                1, 16, sum(math.prod(latent.size()) for latent in references) // 16]
        if wan and kwargs.get("reference_motion") is not None:
            out["reference_motion"] = kwargs["reference_motion"].shape
        return out

    def extra_inputs(self, **kwargs: Any) -> dict[str, Any]:
        """What our sampling adds to an entry's model inputs (after `c_crossattn`, `c_concat`,
        `y`): ours, or, where a pack replaced `extra_conds` (an object patch, or a subclass),
        everything the pack's returns, each value as the tensor / list / value it holds, so the
        pack's inputs are the ones the network gets, as ComfyUI's `encode_model_conds` uses them."""
        own = self.__dict__.get("extra_conds")
        if own is None and type(self).extra_conds is BaseModel.extra_conds:
            return DiffusionModel.extra_inputs(self, **kwargs)
        conds = (own or self.extra_conds)(**kwargs) or {}
        return {name: getattr(value, "cond", value) for name, value in conds.items()}


_KINDS: dict[str, type] = {"BaseModel": BaseModel}


def _kind(name: str, *bases: type) -> type:
    cls = _FamilyClass(name, bases or (BaseModel,), {"_comfy_kind": True, "__module__": __name__,
                                                     "__qualname__": name})
    _KINDS[name] = cls
    return cls


# ComfyUI's hierarchy; which of our models is which is the family's word (`Family.comfy_model_class`).
SDXL = _kind("SDXL")
SDXLRefiner = _kind("SDXLRefiner")
SD21UNCLIP = _kind("SD21UNCLIP")
SVD_img2vid = _kind("SVD_img2vid")
IP2P = _kind("IP2P")
SD15_instructpix2pix = _kind("SD15_instructpix2pix", IP2P)
SDXL_instructpix2pix = _kind("SDXL_instructpix2pix", IP2P, SDXL)
SD3 = _kind("SD3")
# ComfyUI's Chroma is a Flux subclass: a Chroma model is a Flux too.
Flux = _kind("Flux")
Chroma = _kind("Chroma", Flux)
ChromaRadiance = _kind("ChromaRadiance", Chroma)
Flux2 = _kind("Flux2", Flux)  # ComfyUI's Flux2 is a Flux subclass too
LongCatImage = _kind("LongCatImage", Flux)  # ComfyUI's LongCatImage is a Flux subclass
Flux3 = _kind("Flux3")  # FLUX 3 Image: its ComfyUI class is not readable here; not assumed a Flux
# ComfyUI's WAN21 and its subclasses, as its configs' get_model builds them.
WAN21 = _kind("WAN21")
WAN21_Vace = _kind("WAN21_Vace", WAN21)
WAN21_Camera = _kind("WAN21_Camera", WAN21)
WAN22 = _kind("WAN22", WAN21)
WAN22_S2V = _kind("WAN22_S2V", WAN21)
WAN21_HuMo = _kind("WAN21_HuMo", WAN21)
WAN_Animate2 = _kind("WAN_Animate2", WAN21)
WAN22_WanDancer = _kind("WAN22_WanDancer", WAN21)
WAN21_SCAIL = _kind("WAN21_SCAIL", WAN21)
WAN21_SCAIL2 = _kind("WAN21_SCAIL2", WAN21_SCAIL)
WAN22_Animate = _kind("WAN22_Animate", WAN21)
StableAudio1 = _kind("StableAudio1")
ACEStep = _kind("ACEStep")  # ComfyUI's ACE-Step 1 model class
ACEStep15 = _kind("ACEStep15")  # ComfyUI's ACE-Step 1.5 model class (a BaseModel, not ACEStep's subclass)

# ComfyUI's other model kinds: names packs import or check; no model of ours is one of them.
_OTHER_KINDS = ("SD_X4Upscaler", "StableCascade_C", "StableCascade_B", "SDXL_Playground_2_5", "AuraFlow",
                "HunyuanDiT", "PixArt", "FluxInpaint", "GenmoMochi", "LTXV", "LTXAV",
                "CosmosVideo", "Lumina2", "HiDream", "Omnigen2", "QwenImage",
                "Stable_Zero123", "SV3D_u", "SV3D_p", "StableAudio", "Hunyuan3Dv2")
globals().update({name: _kind(name) for name in _OTHER_KINDS})
QwenImage21 = _kind("QwenImage21", _KINDS["QwenImage"])  # ComfyUI's QwenImage21 is a QwenImage subclass
Boogu = _kind("Boogu", _KINDS["Omnigen2"])  # ComfyUI's Boogu is an Omnigen2 subclass
HunyuanVideo = _kind("HunyuanVideo")
HunyuanVideoI2V = _kind("HunyuanVideoI2V", HunyuanVideo)  # ComfyUI: HunyuanVideo subclasses
HunyuanVideoSkyreelsI2V = _kind("HunyuanVideoSkyreelsI2V", HunyuanVideo)
HunyuanVideo15 = _kind("HunyuanVideo15", HunyuanVideo)  # ComfyUI: a HunyuanVideo subclass
HunyuanVideo15_SR_Distilled = _kind("HunyuanVideo15_SR_Distilled", HunyuanVideo15)
# ComfyUI's Anima is a BaseModel of its own (not a CosmosPredict2 subclass: today's model_base.py),
# though its network is Cosmos-Predict2's MiniTrainDIT with an LLM adapter; CosmosPredict2 (Cosmos
# Predict2 text/image-to-image and -video) is a family not implemented here: no model of ours is one.
Anima = _kind("Anima")
CosmosPredict2 = _kind("CosmosPredict2")
Kandinsky5 = _kind("Kandinsky5")
Kandinsky5Image = _kind("Kandinsky5Image", Kandinsky5)  # ComfyUI: a Kandinsky5 subclass


def _class_of_family() -> dict[str, type]:
    """A family naming a class not declared above gets a plain BaseModel kind of that name (and the
    module attribute packs import), so registering a family never breaks this module's import."""
    from comfy_core.families import default_registry

    classes = {}
    for family in default_registry():
        name = family.comfy_model_class
        if name not in _KINDS:
            globals()[name] = _kind(name)
        classes[family.name] = _KINDS[name]
    return classes


# Our built-in family -> ComfyUI's model class for it (the class each `supported_models` config's
# `get_model` builds in ComfyUI, `Family.comfy_model_class`); compat/mp_model_classes.py has
# loaders build exactly that class.
CLASS_OF_FAMILY: dict[str, type] = _class_of_family()


def convert_tensor(extra: Any, dtype: Any, device: Any) -> Any:
    """ComfyUI's `convert_tensor`: a tensor moved to `device`, cast to `dtype` unless it holds
    integers (those keep theirs); anything else unchanged (ControlNet packs pass extra conds)."""
    import torch

    from compat.device_dtypes import cast_to_device

    if not hasattr(extra, "dtype"):
        return extra
    integer = extra.dtype in (torch.int, torch.long)
    return cast_to_device(extra, device, None if integer else dtype)


def model_sampling(model_config: Any, model_type: ModelType) -> Any:
    """ComfyUI's `model_sampling(config, type)`: the sampling object for a config and type."""
    from compat.mp_model_sampling import sampling_for_type

    return sampling_for_type(model_config, model_type)
