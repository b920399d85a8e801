"""ComfyUI's `comfy.comfy_types.node_typing` for node packs (compat/io_types.py)."""
from compat.io_types import (IO, CheckLazyMixin, ComfyNodeABC, FileLocator, HiddenInputTypeDict, InputTypeDict,
                             InputTypeOptions)
