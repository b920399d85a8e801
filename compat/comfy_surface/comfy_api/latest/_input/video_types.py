"""ComfyUI's `comfy_api.latest._input.video_types`: `VideoInput` (compat/v3/video.py)."""
from compat.v3.video import VideoInput

__all__ = ["VideoInput"]
