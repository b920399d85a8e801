"""The names the built-in nodes declare their combos with, importable without torch.

Registering the built-in nodes and rendering `/object_info` needs only names (sampler and
scheduler lists, emphasis modes, attention backends, embedding file types), not the torch code
behind them, which costs seconds at start-up. Each list lives in a torch-free module beside its
implementation in comfy_core, and the implementation imports it from there, so there is one
list per concept; this module only gathers them for the node files.
"""
from __future__ import annotations

from comfy_core.attention_names import BACKEND_NAMES as ATTENTION_BACKENDS
from comfy_core.attention_names import OPTIONAL_BACKENDS, missing_optional_backends
from comfy_core.prompt.embedding_names import EMBEDDING_EXTENSIONS, EMBEDDINGS_KIND, embedding_files
from comfy_core.prompt.emphasis_modes import DEFAULT_EMPHASIS, EMPHASIS_MODES
from comfy_core.sampling import scheduler_names as _scheduler_names
from comfy_core.sampling.samplers import registry as _sampler_registry
from comfy_core.sampling.samplers.registry import SAMPLER_NAMES
from comfy_core.sampling.scheduler_names import SCHEDULER_NAMES

__all__ = [
    "ATTENTION_BACKENDS", "DEFAULT_EMPHASIS", "EMBEDDINGS_KIND", "EMBEDDING_EXTENSIONS", "EMPHASIS_MODES",
    "OPTIONAL_BACKENDS", "SAMPLER_NAMES", "SCHEDULER_NAMES", "embedding_files", "missing_optional_backends",
    "sampler_names", "scheduler_names",
]


def sampler_names(env: object = None) -> list[str]:
    """The sampler combo as it is now: ComfyUI's names plus any a node pack added to
    `comfy.samplers.KSampler.SAMPLERS` / `SAMPLER_NAMES` (the live list of the extension points in
    force, comfy_core/extension_points.py), read each time the combo is rendered or validated, as
    ComfyUI's nodes read `KSampler.SAMPLERS`."""
    return list(_sampler_registry.sampler_names())


def scheduler_names(env: object = None) -> list[str]:
    """The scheduler combo as it is now (ComfyUI's plus any a pack added to `SCHEDULER_NAMES`)."""
    return list(_scheduler_names.scheduler_names())
