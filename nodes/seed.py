"""SeedNode (ComfyUI's comfy_extras/nodes_seed.py, 2026): a seed widget whose value is the
output; the editor's `SetRandomInt` component draws it, fixed after each run unless changed.
"""
from __future__ import annotations

import sys

from graph.v3_schema import Int, Output, v3_node
from nodes.errors import NodeInputError, describe

MODULE = "comfy_extras.nodes_seed"


@v3_node("SeedNode", display_name="Seed", category="utilities", python_module=MODULE, search_aliases=["seed", "random"],
         inputs=[Int("seed", min=0, max=sys.maxsize, control_after_generate="fixed", component="SetRandomInt")],
         outputs=[Output("INT", "seed")])
def seed_node(seed: int) -> tuple[int]:
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise NodeInputError("seed", "an INT", describe(seed))
    return (seed,)
