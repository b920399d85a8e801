"""ComfyUI's `comfy.sd` for node packs: our VAE and CLIP classes and the loaders (compat/files_sd.py).

`VAE` is ComfyUI's VAE class over our `VaePatcher` (compat/sd_vae.py): `VAE(sd=state_dict)` builds
our VAE object, `isinstance(vae, comfy.sd.VAE)` holds for what our loader nodes return, and a
pack's subclass may set ComfyUI's attributes itself without calling our constructor (VAE-Utils'
`CustomVAE`) and then encodes and decodes as ComfyUI's VAE; `CLIP` is our CLIP object. What a
pack builds flows into our nodes.

`save_checkpoint` is the `save_checkpoint` extension point (built-in: compat/checkpoint_save.py):
assigning it (art-venture's fp16 wrapper) changes what CheckpointSave and ModelSave write with.

`t5xxl_detect(clip_data)` is ComfyUI's T5-XXL dtype probe over a list of state dicts (compat/files_clip.py),
whose result is `comfy.text_encoders.flux.flux_clip`'s keyword arguments (nunchaku's loader).
"""
from compat.facade import facade, point


def __getattr__(name: str):
    # `comfy.sd.model_detection` is a module (ComfyUI's sd.py imports it by name): resolved on
    # first read, so importing comfy.sd stays torch-free.
    if name == "model_detection":
        from compat.files_sd import model_detection_module

        return model_detection_module()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


facade(__name__, {
    "VAE": "compat.sd_vae:VAE",
    "CLIP": "comfy_core.text_encoders.clip:CLIP",
    "CLIPType": "compat.files_sd:CLIPType",
    "StyleModel": "compat.files_sd:StyleModel",
    "load_checkpoint_guess_config": "compat.files_sd:load_checkpoint_guess_config",
    "load_state_dict_guess_config": "compat.files_sd:load_state_dict_guess_config",
    "load_checkpoint": "compat.files_sd:load_checkpoint",
    "load_diffusion_model": "compat.files_sd:load_diffusion_model",
    "load_diffusion_model_state_dict": "compat.files_sd:load_diffusion_model_state_dict",
    "load_unet": "compat.files_sd:load_unet",
    "load_unet_state_dict": "compat.files_sd:load_unet_state_dict",
    "load_clip": "compat.files_sd:load_clip",
    "load_text_encoder_state_dicts": "compat.files_sd:load_text_encoder_state_dicts",
    "load_lora_for_models": "compat.files_sd:load_lora_for_models",
    "load_style_model": "compat.files_sd:load_style_model",
    "load_gligen": "compat.files_sd:load_gligen",
    "t5xxl_detect": "compat.files_clip:t5xxl_detect",
    "save_checkpoint": point("save_checkpoint", "compat.checkpoint_save:save_checkpoint"),
})
