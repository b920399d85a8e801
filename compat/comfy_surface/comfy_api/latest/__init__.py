"""ComfyUI's `comfy_api.latest`: `io`, `ui`, `ComfyExtension`, `ComfyAPI`, `ComfyAPISync`, `Input`, `InputImpl`,
`Types` (compat/v3/)."""
from compat.v3 import public_io as io, ui
from compat.v3.api import ComfyAPI, ComfyAPISync, ComfyExtension
from compat.v3.video import Input, InputImpl, Types

IO = io
UI = ui
comfy_io = io

__all__ = ["io", "ui", "IO", "UI", "comfy_io", "ComfyExtension", "ComfyAPI", "ComfyAPISync", "Input", "InputImpl",
           "Types"]
