"""ComfyUI's `comfy.diffusers_load` for node packs: `load_diffusers(model_path, output_vae=True,
output_clip=True, embedding_directory=None)` and `first_file` over the engine's diffusers-folder
loader (compat/files_diffusers.py)."""
from compat.facade import facade

facade(__name__, {name: f"compat.files_diffusers:{name}" for name in ("first_file", "load_diffusers")})
