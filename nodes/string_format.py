"""StringFormat and JsonExtractString of ComfyUI's comfy_extras/nodes_string.py (2026).

StringFormat fills `f_string` with the growing inputs `a`..`z` by Python's `str.format` rules
(format specs, `{a!r}`, indexing, attributes), except that attribute and item names starting with
an underscore are refused: `{a.__class__.__init__.__globals__}` would otherwise read the server's
memory. JsonExtractString finds the first `{` in the text that starts a JSON object and gives the
value of `key` as text ("" when absent or null, `str()` of other values), so prose or Markdown
fences around the object are skipped.
"""
from __future__ import annotations

import _string  # the parser behind str.format's field names
import json
import string
from typing import Any

from graph.v3_schema import Autogrow, Output, Socket, String, v3_node
from nodes.errors import NodeInputError, describe

MODULE = "comfy_extras.nodes_string"


class _SafeFormatter(string.Formatter):
    def get_field(self, field_name: str, args: Any, kwargs: Any) -> tuple[Any, str]:
        first, rest = _string.formatter_field_name_split(field_name)
        value = self.get_value(first, args, kwargs)
        for is_attribute, key in rest:
            if isinstance(key, str) and key.startswith("_"):
                raise ValueError(f"field {field_name!r}: names starting with '_' are not allowed")
            value = getattr(value, key) if is_attribute else value[key]
        return value, first


@v3_node("StringFormat", display_name="Format Text", category="text", python_module=MODULE,
         search_aliases=["string", "format"],
         description="Same as Python's string format method. Supports all of Python's format options and features.",
         inputs=[Autogrow("values", Socket("value", "*"), names=tuple(string.ascii_lowercase), min=0),
                 String("f_string", default="{a}", multiline=True)],
         outputs=[Output("STRING")])
def string_format(values: dict[str, Any], f_string: str) -> tuple[str]:
    """`f_string` with `{a}`, `{b:.2f}`, ... replaced by the linked values."""
    if not isinstance(f_string, str):
        raise NodeInputError("f_string", "a STRING", describe(f_string))
    try:
        return (_SafeFormatter().format(f_string, **values),)
    except (KeyError, IndexError, AttributeError, ValueError, TypeError) as exc:
        raise NodeInputError("f_string", "a format string whose fields are linked inputs",
                             f"{f_string!r}: {type(exc).__name__}: {exc}") from None


def json_value(text: str, key: str) -> str:
    """The value of `key` in the first JSON object found in `text`, as text ("" if none)."""
    decoder = json.JSONDecoder()
    start = text.find("{")
    while start != -1:
        try:
            data, _ = decoder.raw_decode(text, start)
        except json.JSONDecodeError:
            start = text.find("{", start + 1)
            continue
        value = data.get(key)
        return "" if value is None else str(value)
    return ""


@v3_node("JsonExtractString", display_name="Extract Text from JSON", category="text", python_module=MODULE,
         search_aliases=["json", "extract json", "parse json", "json value", "read json"],
         description="Extract a key's value from the first valid JSON object in the text, including Markdown code "
                     "blocks.",
         inputs=[String("json_string", multiline=True), String("key", multiline=False)],
         outputs=[Output("STRING")])
def json_extract_string(json_string: str, key: str) -> tuple[str]:
    for name, value in (("json_string", json_string), ("key", key)):
        if not isinstance(value, str):
            raise NodeInputError(name, "a STRING", describe(value))
    return (json_value(json_string, key),)
