"""ComfyUI's `comfy_api.torch_helpers.torch_compile` for node packs (compat/torch_compile.py)."""
from compat.facade import facade

facade(__name__, {name: f"compat.torch_compile:{name}" for name in (
    "COMPILE_KEY", "TORCH_COMPILE_KWARGS", "apply_torch_compile_factory", "set_torch_compile_wrapper")})
