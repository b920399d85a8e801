"""ComfyUI's `comfy_api.latest`: `io`, `ui`, `ComfyExtension`, `ComfyAPI`, `ComfyAPISync` (compat/v3/)."""
from compat.v3 import io, ui
from compat.v3.api import ComfyAPI, ComfyAPISync, ComfyExtension

IO = io
UI = ui

__all__ = ["io", "ui", "IO", "UI", "ComfyExtension", "ComfyAPI", "ComfyAPISync"]
