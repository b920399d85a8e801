"""Primitive value nodes of ComfyUI's comfy_extras/nodes_primitive.py (0.3.64): PrimitiveString,
PrimitiveStringMultiline, PrimitiveInt, PrimitiveFloat, PrimitiveBoolean. Each outputs its
widget's value, so one value can feed several nodes' inputs (converted to sockets).

ComfyUI declares the widgets without defaults (V3 schema), so a prompt must give the value; the
number widgets range over +-sys.maxsize, as there.
"""
from __future__ import annotations

import math
import sys
from typing import Any

from graph.native import Output, node
from graph.spec import REQUIRED, InputSpec
from nodes.errors import NodeInputError, describe

MODULE = "comfy_extras.nodes_primitive"
CATEGORY = "utils/primitive"


def _string(value: Any) -> str:
    if not isinstance(value, str):
        raise NodeInputError("value", "a STRING", describe(value))
    return value


@node("PrimitiveString", category=CATEGORY, display_name="String", python_module=MODULE,
      inputs=[InputSpec("value", "STRING", REQUIRED, {"multiline": False})], outputs=[Output("STRING")])
def primitive_string(value: str) -> tuple[str]:
    return (_string(value),)


@node("PrimitiveStringMultiline", category=CATEGORY, display_name="String (Multiline)", python_module=MODULE,
      inputs=[InputSpec("value", "STRING", REQUIRED, {"multiline": True})], outputs=[Output("STRING")])
def primitive_string_multiline(value: str) -> tuple[str]:
    return (_string(value),)


@node("PrimitiveInt", category=CATEGORY, display_name="Int", python_module=MODULE,
      inputs=[InputSpec("value", "INT", REQUIRED,
                        {"min": -sys.maxsize, "max": sys.maxsize, "control_after_generate": True})],
      outputs=[Output("INT")])
def primitive_int(value: int) -> tuple[int]:
    if isinstance(value, bool) or not isinstance(value, int):
        raise NodeInputError("value", "an INT", describe(value))
    return (value,)


@node("PrimitiveFloat", category=CATEGORY, display_name="Float", python_module=MODULE,
      inputs=[InputSpec("value", "FLOAT", REQUIRED, {"min": -sys.maxsize, "max": sys.maxsize})],
      outputs=[Output("FLOAT")])
def primitive_float(value: float) -> tuple[float]:
    # An int is a FLOAT on the wire (the editor sends 1 for 1.0), as ComfyUI passes it on.
    if isinstance(value, bool) or not isinstance(value, (int, float)) or math.isnan(value):
        raise NodeInputError("value", "a FLOAT", describe(value))
    return (value,)


@node("PrimitiveBoolean", category=CATEGORY, display_name="Boolean", python_module=MODULE,
      inputs=[InputSpec("value", "BOOLEAN", REQUIRED, {})], outputs=[Output("BOOLEAN")])
def primitive_boolean(value: bool) -> tuple[bool]:
    if not isinstance(value, bool):
        raise NodeInputError("value", "a BOOLEAN", describe(value))
    return (value,)
