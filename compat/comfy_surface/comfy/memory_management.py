"""Today's ComfyUI's `comfy.memory_management` for node packs (compat/memory_management_api.py).

`aimdo_enabled` is False: this runtime has no dynamic VRAM (comfy-aimdo), as a ComfyUI whose
main.py did not start it (packs such as ComfyUI-MultiGPU read it to skip their aimdo set-up).
The RAM-cache release hook is ComfyUI's: `set_ram_cache_release_state(callback, headroom)` sets
the callback `extra_ram_release(target, free_active=False)` calls (0 while none is set) and
`RAM_CACHE_HEADROOM`; this runtime's own model memory does not call it. Importable without torch.
"""
from typing import Any, Callable, Optional

from compat.facade import facade

aimdo_enabled = False

extra_ram_release_callback: Optional[Callable[..., Any]] = None
RAM_CACHE_HEADROOM = 0


def set_ram_cache_release_state(callback: Optional[Callable[..., Any]], headroom: int) -> None:
    """Set the RAM-cache release callback and the headroom (bytes, at least 0) it keeps free."""
    global extra_ram_release_callback, RAM_CACHE_HEADROOM
    extra_ram_release_callback = callback
    RAM_CACHE_HEADROOM = max(0, int(headroom))


def extra_ram_release(target: int, free_active: bool = False) -> int:
    """What the release callback frees towards `target` bytes; 0 while none is set."""
    if extra_ram_release_callback is None:
        return 0
    return extra_ram_release_callback(target, free_active=free_active)


facade(__name__, {name: "compat.memory_management_api:" + name for name in (
    "TensorGeometry", "TensorFileSlice", "tensors_to_geometries", "vram_aligned_size", "interpret_gathered_like",
    "read_tensor_file_slice_into", "QuantizedTensor")})
