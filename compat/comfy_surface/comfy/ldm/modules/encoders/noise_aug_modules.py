"""ComfyUI's `comfy.ldm.modules.encoders.noise_aug_modules` for node packs: unCLIP's
`CLIPEmbeddingNoiseAugmentation` (compat/noise_aug.py: ComfyUI's configurable class, which packs
such as Kolors-MZ build for their own model classes; the engine's unCLIP models use
comfy_core/models/unclip.py), and the names that module imports."""
from compat.facade import facade

facade(__name__, {name: "compat.noise_aug:" + name for name in (
    "CLIPEmbeddingNoiseAugmentation", "ImageConcatWithNoiseAugmentation", "Timestep")})
