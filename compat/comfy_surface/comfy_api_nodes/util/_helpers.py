"""ComfyUI's `comfy_api_nodes.util._helpers`: the helpers its downloads use
(compat/api_nodes_download.py)."""
from compat.facade import facade

facade(__name__, {name: f"compat.api_nodes_download:{name}" for name in (
    "is_processing_interrupted", "sleep_with_interrupt", "default_base_url", "get_auth_header",
    "get_comfy_api_headers", "to_aiohttp_url", "diagnose_connectivity")})
