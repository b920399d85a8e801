"""ComfyUI's `comfy.sd` loading entry points for node packs (compat/models.py)."""
from compat.models import load_checkpoint_guess_config, load_lora_for_models
