"""ComfyUI's `comfy` package for node packs: a compatibility surface (see compat/__init__.py).
Its submodules are also its attributes on first read (`import comfy; comfy.samplers`), as after
ComfyUI's start-up (compat/submodules.py)."""
from compat.submodules import submodule_attribute

__getattr__ = submodule_attribute(__name__)
