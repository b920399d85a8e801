"""ComfyUI's `comfy_api.input_impl.video_types` (comfy_core/video/)."""
from compat.v3.video import VideoFromComponents, VideoFromFile

__all__ = ["VideoFromFile", "VideoFromComponents"]
