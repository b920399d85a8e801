"""ComfyUI's `comfy_api_nodes.util.conversions`: only `bytesio_to_image_tensor`, the conversion
the download helpers use (compat/api_nodes_download.py)."""
from compat.facade import facade

facade(__name__, {"bytesio_to_image_tensor": "compat.api_nodes_download:bytesio_to_image_tensor"})
