"""ComfyUI's `latent_preview` names packs use (compat/previews.py)."""
from compat.previews import prepare_callback
