"""ComfyUI's `args` (comfy/cli_args.py's parsed namespace) for one server config: what the host
hands the compat layer (`compat.install(..., comfy_args=...)`), so that `comfy.cli_args.args`
answers for the running server without compat importing this host's modules.

Every ComfyUI 0.3.64 flag, as main.py parsed it (`config.comfy_flags`, ComfyUI's post-processing
included), with the values the server really uses (resolved folders, cache, precision,
attention) on top. Flags accepted without effect here read as given. The folders of the
environment and the preview method are added by compat/cli_args.py (it reads them from the
session's environment and gives the method as ComfyUI's enum).
"""
from __future__ import annotations

import functools
from typing import Any

from web.config import ServerConfig
from web.flags import comfy_defaults


@functools.lru_cache(maxsize=1)
def _defaults() -> dict[str, Any]:
    return comfy_defaults()


def _dtype_flags(config: ServerConfig) -> dict[str, bool]:
    """ComfyUI's precision booleans for a config built in code (no parsed flags): the component
    dtypes it holds, as the flags that ask for them."""
    dtype = config.dtype
    pairs = (("unet", dtype.unet), ("vae", dtype.vae), ("text_enc", dtype.text_enc))
    return {f"{name}_{component}": True for component, name in pairs if name is not None}


def _from_config(config: ServerConfig) -> dict[str, Any]:
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
        "preview_method": config.preview_method,
    }


def comfy_args(config: ServerConfig) -> dict[str, Any]:
    """ComfyUI's `args` for `config`, attribute name -> value, as a new dict (packs may mutate
    what they read; compat copies it per read)."""
    values = dict(_defaults())
    values.update(config.comfy_flags)
    if not config.comfy_flags:
        values.update(_dtype_flags(config))
    values.update(_from_config(config))
    return values
