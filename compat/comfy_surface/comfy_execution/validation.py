"""ComfyUI's `comfy_execution.validation` for node packs (compat/execution_api.py)."""
from compat.facade import facade

facade(__name__, {"validate_node_input": "compat.execution_api:validate_node_input"})
