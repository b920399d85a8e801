"""`comfy.cli_args` for packs: `args` (the server's flags under ComfyUI's attribute names),
`LatentPreviewMethod` and `PerformanceFeature`.

`args` reads the bound server's `web.config.ServerConfig` at each attribute access (before a
server is bound, its defaults), so it always answers for the running server: every ComfyUI
0.3.64 flag, as main.py parsed it (`config.comfy_flags`, ComfyUI's post-processing included),
with the values the server really uses (resolved folders, cache, precision, attention) on top.
Flags accepted without effect here read as given. Any other name is an AttributeError.
"""
from __future__ import annotations

import copy
import enum
import functools
from typing import Any

from compat.session import active
from web.flags import PerformanceFeature, comfy_defaults

__all__ = ["LatentPreviewMethod", "PerformanceFeature", "args"]


class LatentPreviewMethod(str, enum.Enum):
    NoPreviews = "none"
    Auto = "auto"
    Latent2RGB = "latent2rgb"
    TAESD = "taesd"


@functools.lru_cache(maxsize=1)
def _defaults() -> dict[str, Any]:
    return comfy_defaults()


def _dtype_flags(config: Any) -> dict[str, bool]:
    """ComfyUI's precision booleans for a config built in code (no parsed flags): the component
    dtypes it holds, as the flags that ask for them."""
    dtype = config.dtype
    pairs = (("unet", dtype.unet), ("vae", dtype.vae), ("text_enc", dtype.text_enc))
    return {f"{name}_{component}": True for component, name in pairs if name is not None}


def _from_config(config: Any) -> dict[str, Any]:
    """The flags whose value the config holds (the source of truth for a running server)."""
    cache = config.cache
    return {
        "listen": ",".join(config.listen), "port": config.port, "cpu": config.cpu,
        "base_directory": str(config.base_dir),
        "preview_size": config.preview_size, "max_upload_size": config.max_upload_size_mb,
        "enable_cors_header": config.cors_origin,
        "disable_all_custom_nodes": config.disable_all_custom_nodes,
        "whitelist_custom_nodes": list(config.whitelist_custom_nodes),
        "cache_classic": cache.kind == "classic", "cache_none": cache.kind == "none",
        "cache_lru": cache.size if cache.kind == "lru" else 0,
        "cache_ram": cache.ram_headroom_gb if cache.kind == "ram" else None,
        "verbose": "DEBUG" if config.verbose else config.comfy_flags.get("verbose", "INFO"),
        "extra_model_paths_config": [[str(p)] for p in config.extra_model_paths] or None,
        "tls_keyfile": str(config.tls_keyfile) if config.tls_keyfile else None,
        "tls_certfile": str(config.tls_certfile) if config.tls_certfile else None,
        "front_end_root": str(config.front_end_root) if config.front_end_root else None,
        "disable_metadata": config.disable_metadata,
        "use_split_cross_attention": config.attention_backend == "split",
        "use_quad_cross_attention": config.attention_backend == "sub_quadratic",
        "disable_mmap": not config.mmap, "reserve_vram": config.reserve_vram_gb,
        "deterministic": config.deterministic, "cuda_device": config.cuda_device,
        "default_device": config.default_device, "oneapi_device_selector": config.oneapi_device_selector,
        "auto_launch": config.auto_launch, "dont_print_server": not config.print_server,
        "log_stdout": config.log_stdout, "enable_compress_response_body": config.compress_response_body,
        "quick_test_for_ci": config.quick_test_for_ci,
    }


def _values() -> dict[str, Any]:
    session = active()
    # The bound server's config; before it is bound (packs importing), the one the host gave.
    config = getattr(session.state, "config", None) or session.config
    if config is None:
        from web.config import ServerConfig

        config = ServerConfig()
    env = session.env
    values = copy.deepcopy(_defaults())  # packs may mutate what they read (lists, the --fast set)
    values.update(config.comfy_flags)
    if not config.comfy_flags:
        values.update(_dtype_flags(config))
    values.update(_from_config(config))
    values.update({
        "output_directory": str(env.output_dir), "input_directory": str(env.input_dir),
        "temp_directory": str(env.temp_dir), "user_directory": str(env.user_dir),
        "preview_method": LatentPreviewMethod(config.preview_method),
    })
    return values


class _Args:
    """ComfyUI's parsed command line, read-only."""

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        values = _values()
        if name in values:
            return values[name]
        raise AttributeError(f"comfy.cli_args.args has no flag {name!r}")

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"comfy.cli_args.args is read-only here (tried to set {name!r}); flags are "
                             "given on the command line")

    def __dir__(self) -> list[str]:
        return sorted(_values())


args = _Args()
