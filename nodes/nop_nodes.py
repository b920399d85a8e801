"""wanBlockSwap (today's ComfyUI, comfy_extras/nodes_nop.py): ComfyUI turned the block-swap node
of a popular Wan pack into a deprecated no-op that hands its MODEL on unchanged, so old workflows
that still hold it run (memory is the runtime's business, not a node's). Same here."""
from __future__ import annotations

from typing import Any

from graph.v3_schema import Output, Socket, v3_node

MODULE = "comfy_extras.nodes_nop"


@v3_node("wanBlockSwap", category="", description="NOP", python_module=MODULE, deprecated=True,
         inputs=[Socket("model", "MODEL")], outputs=[Output("MODEL")])
def wan_block_swap(model: Any) -> tuple[Any]:
    """The model, unchanged."""
    return (model,)
