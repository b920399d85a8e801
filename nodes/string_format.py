"""StringFormat, JsonExtractString, ConvertDictionaryToString and ConvertArrayToString of
ComfyUI's comfy_extras/nodes_string.py (2026; the last two as Comfy-Org/ComfyUI@4bf9c525 has them).

StringFormat fills `f_string` with the growing inputs `a`..`z` by Python's `str.format` rules
(format specs, `{a!r}`, indexing, attributes), except that attribute and item names starting with
an underscore are refused: `{a.__class__.__init__.__globals__}` would otherwise read the server's
memory. JsonExtractString finds the first `{` in the text that starts a JSON object and gives the
value of `key` as text ("" when absent or null, `str()` of other values), so prose or Markdown
fences around the object are skipped. ConvertDictionaryToString / ConvertArrayToString write a DICT
/ ARRAY value (a Build JSON Prompt caption, Create Bounding Boxes' elements) as JSON text:
`indent` spaces per level, 0 one compact line (`, ` and `: ` separators, as `json.dumps` with no
indent), non-ASCII characters kept as they are; a value JSON cannot hold is refused by name.
"""
from __future__ import annotations

import _string  # the parser behind str.format's field names
import json
import string
from typing import Any

from graph.v3_schema import Autogrow, Int, Output, Socket, String, v3_node
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


def dump_json(value: Any, indent: int, input_name: str) -> str:
    """`value` as JSON text (ComfyUI's `_dump_json`): `indent` spaces per level, 0 one line."""
    try:
        return json.dumps(value, ensure_ascii=False, indent=indent or None)
    except (TypeError, ValueError) as exc:  # a tensor, a set, a circular structure, ...
        raise NodeInputError(input_name, "a value JSON can hold (dicts, lists, strings, numbers, booleans, null)",
                             f"{describe(value)}: {exc}") from None


_INDENT_TOOLTIP = "Spaces per indent level. 0 produces compact single-line string."


def _indent(indent: Any) -> int:
    if isinstance(indent, bool) or not isinstance(indent, int) or not 0 <= indent <= 8:
        raise NodeInputError("indent", "an INT in [0, 8]", describe(indent))
    return indent


@v3_node("ConvertDictionaryToString", display_name="Convert Dictionary to String", category="text",
         python_module=MODULE, search_aliases=["json", "dict to json", "stringify", "serialize", "dict to string"],
         inputs=[Socket("dictionary", "DICT"), Int("indent", default=2, min=0, max=8, tooltip=_INDENT_TOOLTIP)],
         outputs=[Output("STRING")])
def convert_dictionary_to_string(dictionary: Any, indent: int = 2) -> tuple[str]:
    """The dictionary as JSON text (behaviour of ComfyUI's ConvertDictionaryToString)."""
    return (dump_json(dictionary, _indent(indent), "dictionary"),)


@v3_node("ConvertArrayToString", display_name="Convert Array to String", category="text", python_module=MODULE,
         search_aliases=["json", "list to json", "stringify", "serialize", "list to string", "array to json"],
         inputs=[Socket("array", "ARRAY"), Int("indent", default=2, min=0, max=8, tooltip=_INDENT_TOOLTIP)],
         outputs=[Output("STRING")])
def convert_array_to_string(array: Any, indent: int = 2) -> tuple[str]:
    """The array as JSON text (behaviour of ComfyUI's ConvertArrayToString)."""
    return (dump_json(array, _indent(indent), "array"),)
