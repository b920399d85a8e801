"""RebatchLatents, ComfyUI's comfy_extras/nodes_rebatch.py (0.3.64): a list of LATENTs
regrouped into batches of `batch_size` (comfy_core/latent/rebatch.py). Its sibling
RebatchImages lives with the other image nodes (nodes/image.py)."""
from __future__ import annotations

from graph.native import Input, Int, Output, node
import nodes.checks as checks
from nodes.errors import NodeInputError


@node("RebatchLatents", category="latent/batch", display_name="Rebatch Latents", input_is_list=True,
      python_module="comfy_extras.nodes_rebatch",
      inputs=[Input("latents", "LATENT"), Int("batch_size", default=1, min=1, max=4096)],
      outputs=[Output("LATENT", is_list=True)])
def rebatch_latents(latents: list[dict], batch_size: list[int]) -> tuple[list[dict]]:
    """All incoming latents, in order, in batches of batch_size (a size change starts a new
    batch); each keeps its noise index and noise mask."""
    from comfy_core.latent.rebatch import RebatchError, rebatch_latents as regroup

    # INPUT_IS_LIST: every input arrives as a list; the widget's value is its first element.
    size = batch_size[0] if isinstance(batch_size, list) and batch_size else batch_size
    if isinstance(size, bool) or not isinstance(size, int) or size < 1:
        raise NodeInputError("batch_size", "an int >= 1", repr(size))
    if not isinstance(latents, list):
        raise NodeInputError("latents", "a list of LATENTs (the node takes its inputs as lists)",
                             type(latents).__name__)
    for latent in latents:
        checks.latent(latent, "latents")
    try:
        return (regroup(latents, size),)
    except RebatchError as exc:
        raise NodeInputError("latents", "noise masks of one size for latents of one size", str(exc)) from exc
