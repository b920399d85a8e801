"""Split-file loading: a diffusion model, text encoders and a VAE from separate files, or from a
diffusers folder (ComfyUI's UNETLoader, CLIPLoader, DualCLIPLoader, DiffusersLoader).

Split files are detected as single files are (DESIGN.md, "Model families"): the file is shown
under the single-file names and goes through the same family detection and component builders
(`comfy_core.loading`, `comfy_core.families`, `comfy_core.text_encoders`); only the names differ.

    from comfy_core.split import load_diffusion_model, load_text_encoders, load_diffusers

    model = load_diffusion_model("models/diffusion_models/x.safetensors", weight_dtype=torch.float8_e4m3fn)
    clip = load_text_encoders(["clip_l.safetensors", "clip_g.safetensors"], "sdxl")
    model, clip, vae = load_diffusers("models/diffusers/my-model")
"""
from __future__ import annotations

from comfy_core.split.clip_types import (
    CLIP_LOADER_TYPES,
    DUAL_CLIP_LOADER_TYPES,
    ClipFilesError,
    UnsupportedClipTypeError,
)
from comfy_core.split.diffusers_folder import is_diffusers_folder, load_diffusers
from comfy_core.split.diffusion_model import load_diffusion_model
from comfy_core.split.text_encoder_files import load_text_encoders

__all__ = ["CLIP_LOADER_TYPES", "DUAL_CLIP_LOADER_TYPES", "ClipFilesError", "UnsupportedClipTypeError",
           "is_diffusers_folder", "load_diffusers", "load_diffusion_model", "load_text_encoders"]
