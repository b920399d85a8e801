"""`load_diffusers`: a diffusers-format model folder -> (MODEL, CLIP, VAE) (ComfyUI's DiffusersLoader).

After ComfyUI's `comfy/diffusers_load.py`: the folder (one with a `model_index.json`) holds
`unet/`, `vae/`, `text_encoder/` and, for SDXL, `text_encoder_2/`, each with its weights in one
file (the first of ComfyUI's candidate names that exists: fp16 variants first, safetensors before
pickles). The UNet loads as UNETLoader loads a diffusers UNet, the text encoders as CLIPLoader
loads transformers-layout files (one: SD1/SD2, two: SDXL), the VAE as VAELoader loads a diffusers
VAE; the configs are not needed (everything is read from the weights, as ComfyUI does).
"""
from __future__ import annotations

from pathlib import Path

from comfy_core.checkpoint.errors import MissingComponentError
from comfy_core.loading import LoadOptions, load_vae
from comfy_core.patching.model import ModelPatcher
from comfy_core.patching.vae import VaePatcher
from comfy_core.split.diffusion_model import load_diffusion_model
from comfy_core.split.text_encoder_files import load_text_encoders
from comfy_core.text_encoders import CLIP

INDEX_FILE = "model_index.json"
MODEL_FILES = ("diffusion_pytorch_model.fp16.safetensors", "diffusion_pytorch_model.safetensors",
               "diffusion_pytorch_model.fp16.bin", "diffusion_pytorch_model.bin")
TEXT_ENCODER_FILES = ("model.fp16.safetensors", "model.safetensors", "pytorch_model.fp16.bin", "pytorch_model.bin")


def first_file(folder: Path, names: tuple[str, ...]) -> Path | None:
    for name in names:
        if (folder / name).is_file():
            return folder / name
    return None


def is_diffusers_folder(folder: Path) -> bool:
    return (folder / INDEX_FILE).is_file()


def load_diffusers(folder: str | Path, options: LoadOptions | None = None) -> tuple[ModelPatcher, CLIP | None, VaePatcher | None]:
    """Load the UNet, text encoders and VAE of a diffusers folder (see the module docstring).

    `options.output_clip` / `output_vae` False skip those parts. Raises `MissingComponentError`
    naming the sub-folder whose weights are missing.
    """
    options = options or LoadOptions()
    folder = Path(folder)
    unet = first_file(folder / "unet", MODEL_FILES)
    if unet is None:
        raise MissingComponentError(folder / "unet", f"no UNet weights (one of {', '.join(MODEL_FILES)})")
    model = load_diffusion_model(unet, options)
    clip = None
    if options.output_clip:
        first = first_file(folder / "text_encoder", TEXT_ENCODER_FILES)
        if first is None:
            raise MissingComponentError(folder / "text_encoder",
                                        f"no text encoder weights (one of {', '.join(TEXT_ENCODER_FILES)})")
        second = first_file(folder / "text_encoder_2", TEXT_ENCODER_FILES)
        clip = load_text_encoders([first] + ([second] if second is not None else []), "stable_diffusion", options)
    vae = None
    if options.output_vae:
        vae_file = first_file(folder / "vae", MODEL_FILES)
        if vae_file is None:
            raise MissingComponentError(folder / "vae", f"no VAE weights (one of {', '.join(MODEL_FILES)})")
        vae = load_vae(vae_file, options)
    return model, clip, vae
