"""Control-flow nodes of ComfyUI's comfy_extras/nodes_logic.py (2026): ComfySwitchNode and
CustomCombo, declared as ComfyUI's V3 schema renders them (graph/v3_schema.py).

The switch's branches are lazy inputs: the executor evaluates only the branch that
`check_lazy_status` asks for (graph/node_step.py), so the other branch's nodes never run. As in
ComfyUI, a linked branch not yet evaluated arrives as None and an unlinked one not at all
(`MISSING`); the node asks for the taken branch only when it is linked, and outputs None when the
taken branch is not linked.
"""
from __future__ import annotations

from typing import Any

from graph.v3_schema import Boolean, Combo, MatchType, MatchTypeOutput, Output, v3_node

MODULE = "comfy_extras.nodes_logic"
MISSING = object()  # an unlinked optional branch


def switch_lazy_status(switch: Any, on_false: Any = MISSING, on_true: Any = MISSING) -> list[str]:
    """The branch to evaluate: the taken one, when it is linked and not evaluated yet."""
    if switch and on_true is None:
        return ["on_true"]
    if not switch and on_false is None:
        return ["on_false"]
    return []


@v3_node("ComfySwitchNode", display_name="If/Else Switch", category="utilities/logic", python_module=MODULE,
         experimental=True, search_aliases=["if", "then", "switch", "conditional", "branch"],
         inputs=[Boolean("switch"),
                 MatchType("on_false", "switch", lazy=True, optional=True),
                 MatchType("on_true", "switch", lazy=True, optional=True)],
         outputs=[MatchTypeOutput("switch", "output")],
         check_lazy_status=switch_lazy_status)
def switch_node(switch: Any, on_false: Any = MISSING, on_true: Any = MISSING) -> tuple[Any]:
    """on_true when `switch` is truthy, else on_false; None when that branch is not linked."""
    chosen = on_true if switch else on_false
    return (None if chosen is MISSING else chosen,)


def _accept_any_choice(**_: Any) -> bool:
    # The options are the user's, written in the editor: any choice is valid (ComfyUI's rule).
    return True


@v3_node("CustomCombo", display_name="Custom Combo", category="utilities", python_module=MODULE,
         experimental=True, inputs=[Combo("choice", [])], accept_all_inputs=True,
         outputs=[Output("STRING", "STRING"), Output("INT", "INDEX")],
         validate_inputs=_accept_any_choice)
def custom_combo(choice: str, index: int = 0, **_: Any) -> tuple[str, int]:
    """The chosen option and its index (the editor sends both; its other widgets are its own)."""
    return (choice, index)
