"""ComfyNumberConvert (ComfyUI's comfy_extras/nodes_number_convert.py, 2026): an INT, FLOAT,
STRING or BOOLEAN as FLOAT and INT. Booleans are 1/0; a float's INT is truncated; a string is
parsed (an integer literal exactly, else through its float, truncated); empty, unparsable or
non-finite values are errors, as in ComfyUI.
"""
from __future__ import annotations

import math
from typing import Any

from graph.v3_schema import Output, Socket, v3_node
from nodes.errors import NodeInputError, describe

MODULE = "comfy_extras.nodes_number_convert"


def convert(value: Any) -> tuple[float, int]:
    if isinstance(value, bool):
        return (1.0, 1) if value else (0.0, 0)
    if isinstance(value, int):
        as_float, as_int = float(value), value
    elif isinstance(value, float):
        if not math.isfinite(value):
            raise NodeInputError("value", "a finite number", repr(value))
        as_float, as_int = value, int(value)
    elif isinstance(value, str):
        text = value.strip()
        try:
            as_float = float(text)
        except ValueError:
            raise NodeInputError("value", "text that is a number", repr(value)) from None
        if not math.isfinite(as_float):
            raise NodeInputError("value", "a finite number", repr(value))
        try:
            as_int = int(text)
        except ValueError:
            as_int = int(as_float)
    else:
        raise NodeInputError("value", "an INT, FLOAT, STRING or BOOLEAN", describe(value))
    if not math.isfinite(as_float):
        raise NodeInputError("value", "a finite number", repr(value))
    return as_float, as_int


@v3_node("ComfyNumberConvert", display_name="Convert Number", category="utils", python_module=MODULE,
         search_aliases=["int to float", "float to int", "number convert", "int2float", "float2int", "cast",
                         "parse number", "string to number", "bool to int"],
         inputs=[Socket("value", "INT,FLOAT,STRING,BOOLEAN", display_name="value")],
         outputs=[Output("FLOAT", "FLOAT"), Output("INT", "INT")])
def number_convert(value: Any) -> tuple[float, int]:
    return convert(value)
