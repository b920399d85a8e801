"""LotusConditioning (today's ComfyUI, comfy_extras/nodes_lotus.py): the fixed text conditioning
of the Lotus depth/normal models, `[[tensor [1, 2, 1024], {}]]` (comfy_core/families/sd2/lotus.py).
It has no inputs; the tensor is on the CPU, as every CONDITIONING here (the sampler moves it).
"""
from __future__ import annotations

from graph.v3_schema import Output, v3_node

MODULE = "comfy_extras.nodes_lotus"


@v3_node("LotusConditioning", category="conditioning/lotus", python_module=MODULE,
         outputs=[Output("CONDITIONING", "conditioning")])
def lotus_conditioning() -> tuple[list]:
    """Lotus's null-prompt conditioning."""
    from comfy_core.families.sd2.lotus import null_prompt_embedding

    return ([[null_prompt_embedding(), {}]],)
