"""ComfyUI's `comfy_api.feature_flags` (WebSocket capability negotiation, comfy_api/feature_flags.py):
the server's flags and the per-connection lookups packs use with
`PromptServer.instance.sockets_metadata` (`{client_id: {"feature_flags": {...}}}`, what each
client sent in its `feature_flags` message)."""
from __future__ import annotations

from typing import Any, Mapping


def get_server_features() -> dict[str, Any]:
    """The flags the server answers a client's `feature_flags` message with (as /features)."""
    from compat.cli_args import args

    megabytes = float(getattr(args, "max_upload_size", 100))
    return {"supports_preview_metadata": True, "max_upload_size": round(megabytes * 1024 * 1024)}


def __getattr__(name: str) -> Any:
    # ComfyUI's module constant, computed from the server's flags when first read.
    if name == "SERVER_FEATURE_FLAGS":
        return get_server_features()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def get_connection_feature(sockets_metadata: Mapping[str, Mapping[str, Any]], sid: str, feature_name: str,
                           default: Any = False) -> Any:
    """Connection `sid`'s value of `feature_name`, `default` when unknown."""
    if sid not in sockets_metadata:
        return default
    return sockets_metadata[sid].get("feature_flags", {}).get(feature_name, default)


def supports_feature(sockets_metadata: Mapping[str, Mapping[str, Any]], sid: str, feature_name: str) -> bool:
    """True only when connection `sid` sent `feature_name: true`."""
    return get_connection_feature(sockets_metadata, sid, feature_name, False) is True
