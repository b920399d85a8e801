"""ComfyUI's top-level `utils` package (utils/install_util.py, json_util.py, extra_config.py),
which ComfyUI-Manager imports: the requirements hint, the recursive JSON merge and the
extra_model_paths.yaml loader, over this server's folders.

The import hook answers `utils` only when no pack's own `utils` is on `sys.path` first
(compat/finder.py); our own code never imports it.
"""
from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

# ComfyUI's path is its root's requirements.txt; ours is this engine's (what a user installs).
requirements_path = Path(__file__).resolve().parents[1] / "requirements.txt"


def get_missing_requirements_message() -> str:
    """The hint shown when a package is missing (ComfyUI's utils/install_util.py wording,
    without its Windows portable-build line)."""
    extra = "-s " if sys.flags.no_user_site else ""
    return ("Please install the updated requirements.txt file by running:\n"
            f"{sys.executable} {extra}-m pip install -r {requirements_path}")


def merge_json_recursive(base: Any, update: Any) -> Any:
    """ComfyUI's utils/json_util.py: dicts merge key by key (recursively), two lists concatenate,
    anything else is replaced by `update`. Neither input is mutated."""
    if isinstance(base, dict) and isinstance(update, dict):
        merged = dict(base)
        for key, value in update.items():
            merged[key] = merge_json_recursive(merged[key], value) if key in merged else value
        return merged
    if isinstance(base, list) and isinstance(update, list):
        return base + update
    return update


def load_extra_path_config(yaml_path: str | os.PathLike) -> None:
    """Add every folder of a ComfyUI extra_model_paths.yaml to this server's model folders
    (custom_nodes folders included, as ComfyUI's utils/extra_config.py does); the parsing is
    comfy_core.folders.load_extra_model_paths (base_path, relative paths, multi-line values)."""
    from comfy_core.folders import load_extra_model_paths
    from compat.session import active

    folders = active().env.folders
    mapping, custom_nodes = load_extra_model_paths(yaml_path)
    for kind, paths in mapping.items():
        for path in paths:
            folders.add(kind, path)
    for path in custom_nodes:
        folders.add("custom_nodes", path)
