"""The boolean nodes of ComfyUI's comfy_extras/nodes_logic.py (2026) beside its switch (nodes/logic.py):
ComfyNotNode ("Not"), ComfyAndNode ("And"), ComfyOrNode ("Or") and ComfyPassOrNoneNode ("Pass or
None"), declared as ComfyUI's V3 schema renders them (graph/v3_schema.py); behaviour read from that
file (Comfy-Org/ComfyUI@ede97bd0b4ba14e10a221068227218e613000d92), written here.

* Not / And / Or take values of any type (`*`) and use Python's truthiness, as ComfyUI says in
  their descriptions: `not value`, `all(...)`, `any(...)` over the growing `values` group
  (value0, value1, ... up to ten; the first required). None of their inputs is lazy: every linked
  value is evaluated first, as in ComfyUI. A value whose truth is undefined (a tensor of several
  elements) is an error naming the input instead of Python's bare ValueError.
* Pass or None passes `anything` through, or `default` when `anything` is None or not linked, and
  says in `is_none` whether the result is None (both missing).

The other classes of that file (SoftSwitch, ConvertStringToCombo, InvertBoolean and the test
nodes) are commented out of ComfyUI's LogicExtension, so ComfyUI does not register them.
"""
from __future__ import annotations

from typing import Any

from graph.v3_schema import Autogrow, MatchType, MatchTypeOutput, Output, Socket, v3_node
from nodes.errors import NodeInputError, describe

MODULE = "comfy_extras.nodes_logic"
CATEGORY = "utilities/logic"
PASS_TOOLTIP = ("Passes the input through, or a default value when input is None/not provided, or outputs None "
                "when both inputs are None/not provided.")


def truth(value: Any, input_name: str) -> bool:
    """Python's truthiness of `value`; a value without one (a multi-element tensor) names the input."""
    try:
        return bool(value)
    except (TypeError, ValueError, RuntimeError) as exc:
        raise NodeInputError(input_name, "a value with a truth value (Python's rules)",
                             f"{describe(value)} ({exc})") from None


def _values(name: str) -> Autogrow:
    return Autogrow(name, Socket("value", "*"), prefix="value", min=1, max=10)


@v3_node("ComfyNotNode", display_name="Not", category=CATEGORY, python_module=MODULE,
         description="Logical NOT operation. Returns true if the value is falsy. Uses Python's rules for truthiness.",
         search_aliases=["invert", "toggle", "negate", "flip boolean"],
         inputs=[Socket("value", "*")], outputs=[Output("BOOLEAN")])
def not_node(value: Any) -> tuple[bool]:
    return (not truth(value, "value"),)


@v3_node("ComfyAndNode", display_name="And", category=CATEGORY, python_module=MODULE,
         description="Logical AND operation. Returns true if all of the values are truthy. "
                     "Uses Python's rules for truthiness.",
         search_aliases=["all", "every"], inputs=[_values("values")], outputs=[Output("BOOLEAN")])
def and_node(values: dict[str, Any]) -> tuple[bool]:
    """True when every linked value is truthy (`all`: stops at the first falsy one)."""
    return (all(truth(v, f"values.{k}") for k, v in values.items()),)


@v3_node("ComfyOrNode", display_name="Or", category=CATEGORY, python_module=MODULE,
         description="Logical OR operation. Returns true if any of the values are truthy. "
                     "Uses Python's rules for truthiness.",
         search_aliases=["any", "some"], inputs=[_values("values")], outputs=[Output("BOOLEAN")])
def or_node(values: dict[str, Any]) -> tuple[bool]:
    """True when a linked value is truthy (`any`: stops at the first truthy one)."""
    return (any(truth(v, f"values.{k}") for k, v in values.items()),)


@v3_node("ComfyPassOrNoneNode", display_name="Pass or None", category=CATEGORY, python_module=MODULE,
         description=PASS_TOOLTIP, search_aliases=["fallback", "null", "nothing", "empty", "blank"],
         inputs=[MatchType("anything", "value", tooltip=PASS_TOOLTIP, optional=True),
                 MatchType("default", "value", optional=True,
                           tooltip="Fallback value to use when the input is None/not provided.")],
         outputs=[MatchTypeOutput("value", "output"), Output("BOOLEAN", "is_none")])
def pass_or_none(anything: Any = None, default: Any = None) -> tuple[Any, bool]:
    """`anything`, else `default`; `is_none` when the output is None."""
    if anything is None:
        return (default, default is None)
    return (anything, False)
