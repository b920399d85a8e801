"""ComfyUI's `comfy.ldm.modules.diffusionmodules.upscaling` for node packs: the noise-augmentation
modules (compat/noise_aug.py), the base of unCLIP's `CLIPEmbeddingNoiseAugmentation`. The SD x4
upscaler itself is not a family of this engine."""
from compat.facade import facade

facade(__name__, {name: "compat.noise_aug:" + name for name in (
    "AbstractLowScaleModel", "SimpleImageConcat", "ImageConcatWithNoiseAugmentation")})
