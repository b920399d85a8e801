"""ComfyUI's `comfy_api.feature_flags` for node packs (compat/feature_flags.py)."""
from compat.facade import facade

facade(__name__, {name: f"compat.feature_flags:{name}" for name in (
    "SERVER_FEATURE_FLAGS", "CLI_FEATURE_FLAG_REGISTRY", "FeatureFlagInfo", "get_connection_feature",
    "supports_feature", "get_server_features")})
