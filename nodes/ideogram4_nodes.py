"""Ideogram 4's node (today's ComfyUI, comfy_extras/nodes_ideogram4.py, a V3 node): Ideogram4Scheduler,
the logit-normal sigmas of Ideogram 4's sampling for an image size (comfy_core/families/ideogram4/
schedule.py), which its templates feed to SamplerCustomAdvanced with DualModelGuider.
"""
from __future__ import annotations

from typing import Any

import nodes.checks as checks
from graph.v3_schema import Float, Int, Output, v3_node

# torch is imported inside the function that runs (registration must not import it).

MODULE = "comfy_extras.nodes_ideogram4"


@v3_node("Ideogram4Scheduler", display_name="Ideogram 4 Scheduler", category="model/sampling/schedulers",
         python_module=MODULE,
         inputs=[Int("steps", default=20, min=1, max=200),
                 Int("width", default=1024, min=256, max=8192, step=16),
                 Int("height", default=1024, min=256, max=8192, step=16),
                 Float("mu", default=0.0, min=-10.0, max=10.0, step=0.05),
                 Float("std", default=1.75, min=0.1, max=5.0, step=0.05)],
         outputs=[Output("SIGMAS")])
def ideogram4_scheduler(steps: int, width: int, height: int, mu: float, std: float) -> tuple[Any]:
    """Ideogram 4's sigmas `[steps + 1]` (descending, the last 0) for a `width` x `height` image."""
    from comfy_core.families.ideogram4.schedule import ideogram4_sigmas

    steps = checks.integer(steps, "steps", 1, 200)
    width = checks.integer(width, "width", 256, 8192)
    height = checks.integer(height, "height", 256, 8192)
    mu = checks.number(mu, "mu", -10.0, 10.0)
    std = checks.number(std, "std", 0.1, 5.0)
    return (ideogram4_sigmas(steps, width, height, mu, std),)
