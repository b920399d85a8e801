"""The names the built-in nodes declare their combos with, importable without torch.

Registering the built-in nodes and rendering `/object_info` needs only names (sampler and
scheduler lists, emphasis modes, attention backends, embedding file types), but the comfy_core
modules that define them import torch, which costs seconds at start-up. These copies let the
server answer `/object_info` before torch is loaded; `tests/nodes/test_node_names.py` checks that
each equals comfy_core's own list, so they cannot drift apart unnoticed.
"""
from __future__ import annotations

import importlib.util
from typing import Any

# ComfyUI's KSampler list and order; the registry module imports its samplers (and torch) lazily.
from comfy_core.sampling.samplers.registry import SAMPLER_NAMES  # noqa: E402

# comfy_core.sampling.schedulers.SCHEDULER_NAMES.
SCHEDULER_NAMES: tuple[str, ...] = (
    "simple", "sgm_uniform", "karras", "exponential", "ddim_uniform", "beta", "normal",
    "linear_quadratic", "kl_optimal",
)

# comfy_core.prompt.emphasis.EMPHASIS_MODES / DEFAULT_EMPHASIS (webui's emphasis modes).
EMPHASIS_MODES: tuple[str, ...] = ("Original", "No norm", "Ignore", "None")
DEFAULT_EMPHASIS = "Original"

# comfy_core.prompt.library.EMBEDDINGS_KIND / comfy_core.prompt.embedding.EMBEDDING_EXTENSIONS.
EMBEDDINGS_KIND = "embeddings"
EMBEDDING_EXTENSIONS: tuple[str, ...] = (".pt", ".bin", ".safetensors")

# comfy_core.attention.backends.BACKENDS, in its order (the default first). Every backend but
# the ones named in OPTIONAL_BACKENDS runs anywhere; those need their package.
ATTENTION_BACKENDS: tuple[str, ...] = ("sdpa", "sub_quadratic", "split", "naive", "xformers")
OPTIONAL_BACKENDS: dict[str, str] = {"xformers": "xformers"}  # backend -> the package it needs


def missing_optional_backends() -> list[str]:
    """Optional backends whose package is not installed at all (found without importing it)."""
    return [name for name, package in OPTIONAL_BACKENDS.items() if importlib.util.find_spec(package) is None]


def embedding_files(folders: Any) -> list[str]:
    """`comfy_core.prompt.library.embedding_files` without torch: the embedding files of the
    embeddings folders (relative, sorted), zero-byte files skipped as webui does."""
    names = []
    for name in folders.filenames(EMBEDDINGS_KIND, EMBEDDING_EXTENSIONS):
        path = folders.full_path(EMBEDDINGS_KIND, name)
        if path is not None and path.stat().st_size > 0:
            names.append(name)
    return names
