"""ComfyUI's `comfy_api_nodes.util.download_helpers` (compat/api_nodes_download.py)."""
from compat.facade import facade

facade(__name__, {name: f"compat.api_nodes_download:{name}" for name in (
    "download_url_to_bytesio", "download_url_to_image_tensor", "download_url_to_video_output",
    "download_url_as_bytesio", "download_url_to_file_3d", "DownloadHTTPError")})
