"""ComfyUI's `utils.extra_config` (compat/top_utils.py)."""
from compat.facade import facade

facade(__name__, {"load_extra_path_config": "compat.top_utils:load_extra_path_config"})
