"""ComfyUI's `comfy_api.util`: `VideoContainer`, `VideoCodec`, `VideoComponents` (comfy_core/video/)."""
from compat.v3.video import VideoCodec, VideoComponents, VideoContainer

__all__ = ["VideoContainer", "VideoCodec", "VideoComponents"]
