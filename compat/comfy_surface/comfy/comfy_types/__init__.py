"""ComfyUI's `comfy.comfy_types` for node packs (compat/io_types.py)."""
from compat.io_types import IO, CheckLazyMixin, ComfyNodeABC, FileLocator, InputTypeDict, InputTypeOptions

__all__ = ["IO", "ComfyNodeABC", "CheckLazyMixin", "InputTypeDict", "InputTypeOptions", "FileLocator"]
