"""ComfyUI's `comfy_api_nodes.util.common_exceptions` (compat/api_nodes_download.py)."""
from compat.facade import facade

facade(__name__, {name: f"compat.api_nodes_download:{name}" for name in (
    "NetworkError", "LocalNetworkError", "ApiServerError", "ApiResponseError", "ProcessingInterrupted")})
