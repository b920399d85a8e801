"""`comfy.cli_args` for packs: `args` (the server's flags under ComfyUI's attribute names) and
`LatentPreviewMethod`.

`args` reads the bound server's `web.config.ServerConfig` at each attribute access (before a
server is bound, its defaults), so it always answers for the running server. ComfyUI flags we
do not have answer with ComfyUI's default (False / None); any other name is an AttributeError.
"""
from __future__ import annotations

import enum
from typing import Any

from compat.session import active


class LatentPreviewMethod(str, enum.Enum):
    NoPreviews = "none"
    Auto = "auto"
    Latent2RGB = "latent2rgb"
    TAESD = "taesd"


# ComfyUI flags without a counterpart here, with ComfyUI's defaults.
_ABSENT_DEFAULTS: dict[str, Any] = {
    name: False for name in (
        "lowvram", "novram", "highvram", "gpu_only", "force_fp16", "force_fp32", "fp16_vae", "fp32_vae", "bf16_vae",
        "bf16_unet", "fp16_unet", "fp8_e4m3fn_unet", "fp8_e5m2_unet", "fp16_text_enc", "fp32_text_enc",
        "use_split_cross_attention", "use_quad_cross_attention", "use_pytorch_cross_attention", "disable_xformers",
        "disable_metadata", "multi_user", "dont_print_server", "disable_smart_memory", "deterministic",
        "force_channels_last", "disable_api_nodes", "windows_standalone_build", "auto_launch", "disable_auto_launch",
        "dont_upcast_attention", "force_upcast_attention", "enable_compress_response_body")}
_ABSENT_DEFAULTS.update({"cuda_device": None, "directml": None, "reserve_vram": None, "front_end_root": None,
                         "front_end_version": "comfyanonymous/ComfyUI@latest", "tls_keyfile": None,
                         "tls_certfile": None, "default_hashing_function": "sha256", "cache_lru": 0})


def _values() -> dict[str, Any]:
    session = active()
    config = getattr(session.state, "config", None)
    if config is None:
        from web.config import ServerConfig

        config = ServerConfig()
    env = session.env
    return {
        "listen": ",".join(config.listen), "port": config.port, "cpu": config.cpu,
        "base_directory": str(config.base_dir),
        "output_directory": str(env.output_dir), "input_directory": str(env.input_dir),
        "temp_directory": str(env.temp_dir), "user_directory": str(env.user_dir),
        "preview_method": LatentPreviewMethod(config.preview_method), "preview_size": config.preview_size,
        "max_upload_size": config.max_upload_size_mb, "enable_cors_header": config.cors_origin,
        "disable_all_custom_nodes": config.disable_all_custom_nodes,
        "whitelist_custom_nodes": list(config.whitelist_custom_nodes),
        "cache_classic": config.cache.kind == "classic", "cache_none": config.cache.kind == "none",
        "cache_ram": config.cache.ram_headroom_gb if config.cache.kind == "ram" else None,
        "verbose": "DEBUG" if config.verbose else "INFO",
        "extra_model_paths_config": [[str(p)] for p in config.extra_model_paths] or None,
    }


class _Args:
    """ComfyUI's parsed command line, read-only."""

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        values = _values()
        if name in values:
            return values[name]
        if name in _ABSENT_DEFAULTS:
            return _ABSENT_DEFAULTS[name]
        raise AttributeError(f"comfy.cli_args.args has no flag {name!r}")

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"comfy.cli_args.args is read-only here (tried to set {name!r}); flags are "
                             "given on the command line")


args = _Args()
