"""ComfyUI's `comfy_api.torch_helpers` for node packs (compat/torch_compile.py)."""
from compat.facade import facade

facade(__name__, {"set_torch_compile_wrapper": "compat.torch_compile:set_torch_compile_wrapper"})
