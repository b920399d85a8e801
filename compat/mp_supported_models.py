"""ComfyUI 0.3.64's `comfy.supported_models` config classes of model kinds this engine does not
load (HunyuanDiT, GenmoMochi, CosmosT2V, ...), for node packs that name them.

Packs walk an `isinstance` chain over these classes to tell a model's kind (Easy-Use's
`get_sd_version` tests SD3, then HunyuanDiT, then Flux, then GenmoMochi): every name must exist
for the chain to reach the classes of our families, and none may match a config of ours. Each is
an empty subclass of ComfyUI's parent for it (`BASE`, or `SDXL` / `SD20` where ComfyUI derives
from those), never in `comfy.model_detection`'s match list, so no model is detected as one.
"""
from __future__ import annotations

from typing import Any

# ComfyUI's config classes of the families we load: name -> "module:attribute" (each family keeps
# its classes in its package's `supported_models.py`; `Family.supported_model` names the one a
# loaded model gets). Strings, so this module stays torch-free.
OUR_CONFIG_TARGETS: dict[str, str] = {
    **{name: f"comfy_core.families.sd1.supported_models:{name}" for name in ("SD15", "SD15_instructpix2pix")},
    **{name: f"comfy_core.families.sd2.supported_models:{name}" for name in ("SD20", "SD21UnclipH", "LotusD")},
    **{name: f"comfy_core.families.sdxl.supported_models:{name}"
       for name in ("SDXLRefiner", "SDXL", "SDXL_instructpix2pix")},
    "SVD_img2vid": "comfy_core.families.svd.supported_models:SVD_img2vid",
    "SD3": "comfy_core.families.sd3.supported_models:SD3",
    "Flux": "comfy_core.families.flux.supported_models:FluxModelConfig",
    **{name: f"comfy_core.families.flux.supported_models:{name}" for name in ("FluxInpaint", "FluxSchnell")},
    "LongCatImage": "comfy_core.families.flux.longcat:LongCatImage",
    **{name: f"comfy_core.families.chroma.supported_models:{name}" for name in ("Chroma", "ChromaRadiance")},
    **{name: f"comfy_core.families.wan.supported_models:{name}"
       for name in ("WAN21_T2V", "WAN21_I2V", "WAN21_FunControl2V", "WAN21_Vace", "WAN21_Camera", "WAN22_Camera",
                    "WAN22_T2V", "WAN22_S2V", "WAN21_HuMo", "WAN_Animate2", "WAN21_SCAIL", "WAN21_SCAIL2",
                    "WAN22_Animate")},
    "WAN22_WanDancer": "comfy_core.families.wan.dancer_family:WAN22_WanDancer",
    **{name: f"comfy_core.families.zimage.supported_models:{name}" for name in ("Lumina2", "ZImage")},
    "QwenImage": "comfy_core.families.qwen_image.supported_models:QwenImage",
    "QwenImage21": "comfy_core.families.qwen_image21.supported_models:QwenImage21",
    "HiDream": "comfy_core.families.hidream.supported_models:HiDream",
    "Flux2": "comfy_core.families.flux2.supported_models:Flux2ModelConfig",
    "Flux3": "comfy_core.families.flux3.supported_models:Flux3ModelConfig",
    "LTXV": "comfy_core.families.ltxv.supported_models:LTXV",
    "CogVideoX_T2V": "comfy_core.families.cogvideox.supported_models:CogVideoX_T2V",
    "LTXAV": "comfy_core.families.ltx2.supported_models:LTXAV",
    "Omnigen2": "comfy_core.families.omnigen2.supported_models:Omnigen2",
    "Boogu": "comfy_core.families.boogu.supported_models:Boogu",
    "StableAudio": "comfy_core.families.stable_audio.supported_models:StableAudio",
    **{name: f"comfy_core.families.hunyuan3d.supported_models:{name}"
       for name in ("Hunyuan3Dv2", "Hunyuan3Dv2mini", "Hunyuan3Dv2_1")},
    "StableAudio3": "comfy_core.families.stable_audio.supported_models:StableAudio3",
    "ACEStep15": "comfy_core.families.ace_step15.supported_models:ACEStep15",
    "ACEStep": "comfy_core.families.ace_step.supported_models:ACEStep",
    **{name: f"comfy_core.families.hunyuan_video.supported_models:{name}"
       for name in ("HunyuanVideo", "HunyuanVideoI2V", "HunyuanVideoSkyreelsI2V")},
    **{name: f"comfy_core.families.hunyuan_video15.supported_models:{name}"
       for name in ("HunyuanVideo15", "HunyuanVideo15_SR_Distilled")},
    **{name: f"comfy_core.families.kandinsky5.supported_models:{name}" for name in ("Kandinsky5", "Kandinsky5Image")},
    "MiniMaxH3": "comfy_core.families.minimax_h3.supported_models:MiniMaxH3",
    "MiniMaxMusic3": "comfy_core.families.minimax_music3.supported_models:MiniMaxMusic3",
    "Anima": "comfy_core.families.anima.supported_models:Anima",
    "ErnieImage": "comfy_core.families.ernie_image.supported_models:ErnieImage",
    "Ideogram4": "comfy_core.families.ideogram4.supported_models:Ideogram4",
    "HiDreamO1": "comfy_core.families.hidream_o1.supported_models:HiDreamO1",
    "Krea2": "comfy_core.families.krea2.supported_models:Krea2",
    "Lens": "comfy_core.families.lens.supported_models:LensModelConfig",
    "JoyImage": "comfy_core.families.joyimage.supported_models:JoyImage",
    "MageFlow": "comfy_core.families.mage.supported_models:MageFlow",
    **{name: f"comfy_core.families.pixeldit.supported_models:{name}" for name in ("PixelDiT", "PiD")},
    "Fibo2": "comfy_core.families.fibo2.supported_models:Fibo2",
    "SeedVR2": "comfy_core.families.seedvr2.supported_models:SeedVR2",
}


def our_config_class(name: str) -> type | None:
    """One of our families' config classes by ComfyUI's name (None: not one of ours)."""
    import importlib

    target = OUR_CONFIG_TARGETS.get(name)
    if target is None:
        return None
    module, _, attribute = target.partition(":")
    return getattr(importlib.import_module(module), attribute)


# name -> ComfyUI's base class for it, when it is one of our families' classes (else BASE).
_PARENTS: dict[str, str] = {
    "SSD1B": "SDXL", "Segmind_Vega": "SDXL", "KOALA_700M": "SDXL", "KOALA_1B": "SDXL",
    "SD21UnclipL": "SD20", "SD_X4Upscaler": "SD20", "SV3D_u": "SVD_img2vid",
}
_KINDS = ("Stable_Zero123", "SD21UnclipL", "SSD1B", "KOALA_700M", "KOALA_1B", "Segmind_Vega",
          "SD_X4Upscaler", "Stable_Cascade_C", "SV3D_u", "AuraFlow", "PixArtAlpha", "HunyuanDiT",
          "GenmoMochi", "CosmosT2V", "CosmosT2IPredict2")
# Subclasses of the kinds above, as ComfyUI's hierarchy has them.
_SUBKINDS = {"SV3D_p": "SV3D_u", "Stable_Cascade_B": "Stable_Cascade_C", "PixArtSigma": "PixArtAlpha",
             "HunyuanDiT1": "HunyuanDiT", "HunyuanImage21": "HunyuanVideo", "HunyuanImage21Refiner": "HunyuanVideo", "CosmosI2V": "CosmosT2V",
             "CosmosI2VPredict2": "CosmosT2IPredict2"}


OTHER_CONFIG_NAMES: tuple[str, ...] = _KINDS + tuple(_SUBKINDS)
_built: dict[str, type] = {}


def _config_class(name: str) -> type:
    if name not in _built:
        from comfy_core.models import model_config as mc

        if name in _SUBKINDS:  # a subclass of another kind here, or of one of our families' classes
            parent = our_config_class(_SUBKINDS[name]) or _config_class(_SUBKINDS[name])
        else:
            parent = our_config_class(_PARENTS.get(name, "BASE")) or mc.BASE
        _built[name] = type(name, (parent,), {
            "__module__": __name__, "__qualname__": name,
            "__doc__": f"ComfyUI's `{name}` config (a kind this engine does not load)."})
    return _built[name]


def __getattr__(name: str) -> Any:
    # Built on first read (the module is imported torch-free by comfy/supported_models.py).
    if name in OTHER_CONFIG_NAMES:
        return _config_class(name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
