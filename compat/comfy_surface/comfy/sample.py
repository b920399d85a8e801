"""ComfyUI's `comfy.sample` for node packs (compat/models.py)."""
from compat.models import fix_empty_latent_channels, prepare_noise, sample, sample_custom  # noqa: F401
