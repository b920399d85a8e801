"""ApplyFBCacheOnModel: the first-block cache for DiTs under the name and inputs of WaveSpeed's
ComfyUI pack (chengzeyi/Comfy-WaveSpeed), which workflows use; today's ComfyUI has no core node
for it. The method and where it hooks in: comfy_core/model_patches/first_block_cache.py.

As the pack: a threshold of 0 or `max_consecutive_cache_hits` 0 returns the MODEL unchanged;
`object_to_patch` names the model object holding the network, and only "diffusion_model" exists
here. The pack's own copy of this node, if installed, is ignored (the built-in one is registered
first); its monkey-patching would not reach our runtime anyway.
"""
from __future__ import annotations

from typing import Any

import nodes.checks as checks
from graph.native import Float, Input, Int, Output, String, node
from nodes.errors import NodeInputError

# torch and comfy_core are imported when the node runs: registering it must not import torch.


@node("ApplyFBCacheOnModel", display_name="Apply First Block Cache", category="wavespeed",
      inputs=[Input("model", "MODEL"),
              String("object_to_patch", default="diffusion_model"),
              Float("residual_diff_threshold", default=0.0, min=0.0, max=1.0, step=0.001,
                    tooltip="Controls the tolerance for caching with lower values being more strict. Setting this "
                            "to 0 disables the FBCache effect."),
              Float("start", default=0.0, min=0.0, max=1.0, step=0.01,
                    tooltip="Start time as a percentage of sampling where the FBCache effect can apply. Example: "
                            "0.0 would signify 0% (the beginning of sampling), 0.5 would signify 50%."),
              Float("end", default=1.0, min=0.0, max=1.0, step=0.01,
                    tooltip="End time as a percentage of sampling where the FBCache effect can apply. Example: "
                            "1.0 would signify 100% (the end of sampling), 0.5 would signify 50%."),
              Int("max_consecutive_cache_hits", default=-1, min=-1,
                  tooltip="Allows limiting how many cached results can be used in a row. For example, setting this "
                          "to 1 will mean there will be at least one full model call after each cached result. Set "
                          "to 0 to disable FBCache effect, or -1 to allow unlimited consecutive cache hits.")],
      outputs=[Output("MODEL")])
def apply_fbcache_on_model(model: Any, object_to_patch: str, residual_diff_threshold: float, start: float = 0.0,
                           end: float = 1.0, max_consecutive_cache_hits: int = -1) -> tuple[Any]:
    """First-block cache (ParaAttention / WaveSpeed): reuse the later blocks' residual while the
    first block's residual changes less than the threshold. The defaults are the pack's `patch`
    method's, which scripts call as `ApplyFBCacheOnModel().patch(model, "diffusion_model", 0.12)`
    (its parameter order, recorded in compat/comfy_node_arguments.json)."""
    from comfy_core.model_patches.first_block_cache import FirstBlockCacheError, apply_first_block_cache

    model = checks.model(model)
    if object_to_patch != "diffusion_model":
        raise NodeInputError("object_to_patch", '"diffusion_model" (the only model object holding the network)',
                             repr(object_to_patch))
    threshold = checks.number(residual_diff_threshold, "residual_diff_threshold", 0.0, 1.0)
    start = checks.number(start, "start", 0.0, 1.0)
    end = checks.number(end, "end", 0.0, 1.0)
    hits = checks.integer(max_consecutive_cache_hits, "max_consecutive_cache_hits", -1)
    if threshold <= 0.0 or hits == 0:
        return (model,)
    try:
        return (apply_first_block_cache(model, threshold, start, end, hits),)
    except FirstBlockCacheError as exc:
        raise NodeInputError("model", "a MODEL without a first-block cache", str(exc)) from exc
