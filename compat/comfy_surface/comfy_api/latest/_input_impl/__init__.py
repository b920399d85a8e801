"""ComfyUI's `comfy_api.latest._input_impl`: `VideoFromFile`, `VideoFromComponents` (comfy_core/video/)."""
from compat.v3.video import VideoFromComponents, VideoFromFile

__all__ = ["VideoFromFile", "VideoFromComponents"]
