"""ComfyUI's `utils.install_util` (compat/top_utils.py)."""
from compat.facade import facade

facade(__name__, {"requirements_path": "compat.top_utils:requirements_path",
                  "get_missing_requirements_message": "compat.top_utils:get_missing_requirements_message"})
