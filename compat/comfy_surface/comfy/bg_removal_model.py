"""ComfyUI's `comfy.bg_removal_model` for node packs: `load(ckpt_path)` of a BiRefNet file (None for
any other), the model with `patcher`, `load_sd`, `get_sd` and `encode_image` over our BiRefNet,
ComfyUI's constructor `BackgroundRemovalModel(json_config)`, and today's `BG_REMOVAL_MODELS`
(`{"birefnet": BiRefNet}`: ComfyUI's Swin-L BiRefNet built as `BiRefNet(config, dtype, device,
operations)`, which Pixaroma's RemoveBackground builds its own model subclass from)
(compat/bg_removal_api.py)."""
from compat.facade import facade

facade(__name__, {name: "compat.bg_removal_api:" + name for name in (
    "BackgroundRemovalModel", "BG_REMOVAL_MODELS", "load", "load_background_removal_model")})
