"""CreateList and GetItemFromList of ComfyUI's comfy_extras/nodes_toolkit.py (2026), declared as
ComfyUI's V3 schema renders them (graph/v3_schema.py); behaviour read from that file, written here.

Both are `is_input_list` nodes: the executor calls them once with every input as the list of
values its link carries (graph/inputs.py), instead of once per element.

* CreateList joins its growing `inputs` (input0, input1, ...) into one list output
  (`output_is_list`), in socket order: a consumer then runs once per item, which is how the
  editor's "iterator" workflows process several images or prompts.
* GetItemFromList picks `list[index]` (Python indexing: negative counts from the end) and outputs
  that one item. A list that arrives as one value holding a Python list (a node whose ordinary
  output is a list, not a list output) is indexed inside, as ComfyUI's
  `resolve_input_list_value(..., assume_list_output=True)` does for such producers.
"""
from __future__ import annotations

from typing import Any

from graph.v3_schema import Autogrow, Int, Output, Socket, v3_node
from nodes.errors import NodeInputError

MODULE = "comfy_extras.nodes_toolkit"


@v3_node("CreateList", display_name="Create List", category="utilities", python_module=MODULE, input_is_list=True,
         search_aliases=["Image Iterator", "Text Iterator", "Iterator"],
         inputs=[Autogrow("inputs", Socket("input", "*"), prefix="input", min=1, max=10)],
         outputs=[Output("*", "list", is_list=True)])
def create_list(inputs: dict[str, list]) -> tuple[list]:
    """Every linked input's values, one list, in socket order."""
    items: list = []
    for values in inputs.values():
        items += list(values)
    return (items,)


def _items(values: list) -> list:
    if len(values) == 1 and isinstance(values[0], (list, tuple)):
        return list(values[0])
    return list(values)


@v3_node("GetItemFromList", display_name="Get Item From List", category="utilities", python_module=MODULE,
         input_is_list=True, inputs=[Socket("list", "*"), Int("index", default=0)],
         outputs=[Output("*")], hidden=[("dynprompt", "DYNPROMPT"), ("unique_id", "UNIQUE_ID")])
def get_item_from_list(list: list, index: list, dynprompt: Any = None, unique_id: Any = None) -> tuple[Any]:  # noqa: A002
    """`list[index]` (the first index given; negative counts from the end)."""
    items = _items(list)
    position = index[0] if index else 0
    if isinstance(position, bool) or not isinstance(position, int):
        raise NodeInputError("index", "an int", repr(position))
    if not -len(items) <= position < len(items):
        raise NodeInputError("index", f"an index into a list of {len(items)} item(s)", str(position))
    return (items[position],)
