"""ComfyUI's `comfy_api.feature_flags` (WebSocket capability negotiation, comfy_api/feature_flags.py
@5e14d797, Comfy-Org/ComfyUI, read for behaviour): the server's flags, the `--feature-flag KEY[=VALUE]`
registry, and the per-connection lookups packs use with `PromptServer.instance.sockets_metadata`
(`{client_id: {"feature_flags": {...}}}`, what each client sent in its `feature_flags` message).

The server's answer (`/features` and the WebSocket `feature_flags` reply) is the core flags,
then every `--feature-flag` whose key is not a core flag (a launcher cannot overwrite
`max_upload_size` and the like). A flag's value is the text after `=` (bare `KEY` means
"true"), turned into the registered type for the keys in `CLI_FEATURE_FLAG_REGISTRY` and kept
as text for any other key. ComfyUI warns and drops a registered flag whose value does not fit
its type; here such a flag is refused where the command line is read (`FeatureFlagError`, which
web/flags.py reports as a bad argument), so a typo never goes unnoticed.

Core flags are what this server serves: `supports_preview_metadata`, `max_upload_size` (bytes),
`node_replacements` and `assets` (whether the assets API is on). ComfyUI also announces
`supports_model_type_tags` (its asset scanner's model tags), `comfy_api_credentials` (its
`/api/credentials` route for partner nodes) and `extension.manager.supports_v4` (ComfyUI-Manager);
none of those is served here, and the editor would call them if told they are, so they are left
out.
"""
from __future__ import annotations

from types import MappingProxyType
from typing import Any, Iterable, Mapping, TypedDict


class FeatureFlagInfo(TypedDict):
    type: str
    default: Any
    description: str


# The flags launchers may set (ComfyUI's registry: `--list-feature-flags` prints it). Read-only.
CLI_FEATURE_FLAG_REGISTRY: Mapping[str, FeatureFlagInfo] = MappingProxyType({
    "show_signin_button": {"type": "bool", "default": False,
                           "description": "Show the sign-in button in the frontend even when not signed in"},
    "enable_telemetry": {"type": "bool", "default": False,
                         "description": "Signal the frontend that telemetry collection is enabled"},
    "partner_run_gate_enabled": {"type": "bool", "default": True,
                                 "description": "Gate the local Run button behind sign-in when the graph "
                                                "contains partner nodes"},
})


class FeatureFlagError(ValueError):
    """A `--feature-flag` item that cannot be used (names the item and why)."""


def _to_bool(text: str) -> bool:
    lowered = text.lower()
    if lowered in ("true", "false"):
        return lowered == "true"
    raise ValueError(f"expected 'true' or 'false', got {text!r}")


_CONVERT = {"bool": _to_bool, "int": int, "float": float}


def parse_feature_flag(item: str) -> tuple[str, Any]:
    """`KEY=VALUE` (or bare `KEY`: true) -> `(key, value)`, the value in its registered type."""
    if not isinstance(item, str):
        raise FeatureFlagError(f"--feature-flag: expected KEY[=VALUE] text, got {item!r}")
    key, sep, raw = item.partition("=")
    key, raw = key.strip(), raw.strip() if sep else "true"
    if not key:
        raise FeatureFlagError(f"--feature-flag {item!r}: the key is empty")
    info = CLI_FEATURE_FLAG_REGISTRY.get(key)
    convert = _CONVERT.get(info["type"]) if info is not None else None
    if convert is None:
        return key, raw
    try:
        return key, convert(raw)
    except ValueError as exc:
        raise FeatureFlagError(f"--feature-flag {item!r}: {key} is a {info['type']} flag ({exc})") from None


def parse_feature_flags(items: Iterable[str]) -> dict[str, Any]:
    """Every `--feature-flag` item as `{key: value}` (a later item wins)."""
    return dict(parse_feature_flag(item) for item in items)


def core_features(*, max_upload_bytes: int, assets: bool = False) -> dict[str, Any]:
    """The flags this server always answers with (see the module docstring)."""
    return {"supports_preview_metadata": True, "max_upload_size": int(max_upload_bytes),
            "node_replacements": True, "assets": bool(assets)}


def server_features(core: Mapping[str, Any], cli_items: Iterable[str] = ()) -> dict[str, Any]:
    """`core` plus the `--feature-flag` items whose keys are not core flags."""
    extra = {k: v for k, v in parse_feature_flags(cli_items).items() if k not in core}
    return {**core, **extra}


def get_server_features() -> dict[str, Any]:
    """The flags the server answers a client's `feature_flags` message with (as /features), from
    the active server's flags (`comfy.cli_args.args`)."""
    from compat.cli_args import args

    megabytes = float(getattr(args, "max_upload_size", 100))
    core = core_features(max_upload_bytes=round(megabytes * 1024 * 1024),
                         assets=bool(getattr(args, "enable_assets", False)))
    return server_features(core, getattr(args, "feature_flag", None) or ())


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
