"""ComfyUI's `utils.json_util` (compat/top_utils.py)."""
from compat.facade import facade

facade(__name__, {"merge_json_recursive": "compat.top_utils:merge_json_recursive"})
