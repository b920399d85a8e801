"""ManualSigmas (ComfyUI's comfy_extras/nodes_custom_sampler.py, 2026): a SIGMAS schedule typed
as text. Every number in the text is taken, in order, whatever separates them ("1, 0.5, 0.1" or
"1 0.5 0.1"); a sign directly before a number belongs to it. The numbers are those ComfyUI's
pattern finds (an optional sign, digits, dots, digits), so text it accepts gives the same list,
and a float32 tensor as ComfyUI's `torch.FloatTensor`.
"""
from __future__ import annotations

import re
from typing import Any

from graph.v3_schema import Output, String, v3_node
from nodes.errors import NodeInputError

MODULE = "comfy_extras.nodes_custom_sampler"
# An optional sign, then digits possibly interrupted by dots, ending in a digit.
_NUMBER = re.compile(r"[+-]?\d*\.*\d+")


def parse_sigmas(text: str) -> list[float]:
    """The numbers in `text`, in order."""
    found = []
    for token in _NUMBER.findall(text):
        try:
            found.append(float(token))
        except ValueError:  # "1..5": dots that make no number
            raise NodeInputError("sigmas", "numbers separated by commas or spaces", repr(token)) from None
    return found


@v3_node("ManualSigmas", category="model/sampling/sigmas", python_module=MODULE, experimental=True,
         search_aliases=["custom noise schedule", "define sigmas"],
         inputs=[String("sigmas", default="1, 0.5", multiline=False)], outputs=[Output("SIGMAS")])
def manual_sigmas(sigmas: Any) -> tuple[Any]:
    """The schedule as a 1-D float32 tensor."""
    import torch

    if not isinstance(sigmas, str):
        raise NodeInputError("sigmas", "a STRING", repr(sigmas))
    return (torch.tensor(parse_sigmas(sigmas), dtype=torch.float32),)
