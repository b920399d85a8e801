"""ComfyUI's `comfyui_version` module for node packs: `__version__` (compat/version.py)."""
from compat.version import COMFYUI_VERSION as __version__  # noqa: F401
