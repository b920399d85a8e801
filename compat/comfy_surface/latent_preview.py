"""ComfyUI's `latent_preview` names packs use (compat/previews.py)."""
from compat.previews import LatentPreviewer, get_previewer, prepare_callback, preview_to_image
