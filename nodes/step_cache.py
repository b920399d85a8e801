"""EasyCache and LazyCache (today's ComfyUI, comfy_extras/nodes_easycache.py): a clone of the
MODEL whose sampling runs skip network evaluations that the last ones predict well enough
(comfy_core/model_patches/step_cache.py has the method and where each hooks in). The input
MODEL is never changed; each run starts with empty state.
"""
from __future__ import annotations

from typing import Any

import nodes.checks as checks
from graph.v3_schema import Boolean, Float, Output, Socket, v3_node
from nodes.errors import NodeInputError

MODULE = "comfy_extras.nodes_easycache"
CATEGORY = "advanced/debug"

# torch and comfy_core are imported when a node runs: registering these nodes and rendering
# /object_info must not import torch.


def _inputs(name: str) -> list:
    return [
        Socket("model", "MODEL", tooltip=f"The model to add {name} to."),
        Float("reuse_threshold", default=0.2, min=0.0, max=3.0, step=0.01,
              tooltip="The threshold for reusing cached steps.", advanced=True),
        Float("start_percent", default=0.15, min=0.0, max=1.0, step=0.01,
              tooltip=f"The relative sampling step to begin use of {name}.", advanced=True),
        Float("end_percent", default=0.95, min=0.0, max=1.0, step=0.01,
              tooltip=f"The relative sampling step to end use of {name}.", advanced=True),
        Boolean("verbose", default=False, tooltip="Whether to log verbose information.", advanced=True),
    ]


def _install(apply: Any, model: Any, reuse_threshold: Any, start_percent: Any, end_percent: Any,
             verbose: Any) -> tuple[Any]:
    from comfy_core.model_patches.step_cache import StepCacheError

    model = checks.model(model)
    threshold = checks.number(reuse_threshold, "reuse_threshold", 0.0, 3.0)
    start = checks.number(start_percent, "start_percent", 0.0, 1.0)
    end = checks.number(end_percent, "end_percent", 0.0, 1.0)
    if not isinstance(verbose, bool):
        raise NodeInputError("verbose", "a BOOLEAN", repr(verbose))
    try:
        return (apply(model, threshold, start, end, verbose),)
    except StepCacheError as exc:
        raise NodeInputError("model", "a MODEL without a step cache", str(exc)) from exc


@v3_node("EasyCache", display_name="EasyCache", category=CATEGORY, python_module=MODULE, experimental=True,
         description="Native EasyCache implementation.", inputs=_inputs("EasyCache"),
         outputs=[Output("MODEL", tooltip="The model with EasyCache.")])
def easy_cache(model: Any, reuse_threshold: float, start_percent: float, end_percent: float,
               verbose: bool) -> tuple[Any]:
    """EasyCache on the diffusion network's calls (Zhou et al. 2025)."""
    from comfy_core.model_patches.step_cache import apply_easycache

    return _install(apply_easycache, model, reuse_threshold, start_percent, end_percent, verbose)


@v3_node("LazyCache", display_name="LazyCache", category=CATEGORY, python_module=MODULE, experimental=True,
         description="A homebrew version of EasyCache - even 'easier' version of EasyCache to implement. "
                     "Overall works worse than EasyCache, but better in some rare cases AND universal "
                     "compatibility with everything in ComfyUI.",
         inputs=_inputs("LazyCache"), outputs=[Output("MODEL", tooltip="The model with LazyCache.")])
def lazy_cache(model: Any, reuse_threshold: float, start_percent: float, end_percent: float,
               verbose: bool) -> tuple[Any]:
    """LazyCache on the guided prediction of each step."""
    from comfy_core.model_patches.step_cache import apply_lazycache

    return _install(apply_lazycache, model, reuse_threshold, start_percent, end_percent, verbose)
