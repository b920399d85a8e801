"""The text dataset nodes of ComfyUI's comfy_extras/nodes_dataset.py (2026), declared as ComfyUI's
V3 schema renders them (graph/v3_schema.py); behaviour read from that file, written here.

They are ComfyUI's `TextProcessingNode`s, all in category "text": each takes a STRING widget
`texts` (linked from a list it runs once per text) and outputs STRING "texts". MergeTextLists is
the list one (`is_input_list`): it receives every incoming text at once.

ComfyUI declares their output with `is_output_list=None`, rendered `"output_is_list": [null]`
(not a list output), and returns each result wrapped in a one-element list, so that the value
downstream is `["text"]` (MergeTextLists: `[[...texts]]`), which string inputs cannot read
(CLIPTextEncode's tokenizer fails on it). Here the value is the result itself: the text, and for
MergeTextLists the merged Python list as one value. The rendering is ComfyUI's.
"""
from __future__ import annotations

from graph.v3_schema import Int, Output, String, v3_node
import nodes.checks as checks
from nodes.errors import NodeInputError, describe

MODULE = "comfy_extras.nodes_dataset"

_TEXT = String("texts", tooltip="Text to process.")
_TEXTS = Output("STRING", "texts", tooltip="Processed texts", is_list=None)  # type: ignore[arg-type]


@v3_node("TextToLowercase", display_name="Convert Text to Lowercase (DEPRECATED)", category="text",
         python_module=MODULE, experimental=True, deprecated=True, search_aliases=["lowercase"],
         description="Convert text to lowercase.", inputs=[_TEXT], outputs=[_TEXTS])
def text_to_lowercase(texts: str) -> tuple[str]:
    return (checks.text(texts, "texts").lower(),)


@v3_node("TextToUppercase", display_name="Convert Text to Uppercase (DEPRECATED)", category="text",
         python_module=MODULE, experimental=True, deprecated=True, search_aliases=["uppercase"],
         description="Convert text to uppercase.", inputs=[_TEXT], outputs=[_TEXTS])
def text_to_uppercase(texts: str) -> tuple[str]:
    return (checks.text(texts, "texts").upper(),)


@v3_node("TruncateText", display_name="Truncate Text", category="text", python_module=MODULE, experimental=True,
         search_aliases=["truncate", "cut", "shorten"], description="Truncate text to a maximum length.",
         inputs=[_TEXT, Int("max_length", default=77, min=1, max=10000, tooltip="Maximum text length.")],
         outputs=[_TEXTS])
def truncate_text(texts: str, max_length: int) -> tuple[str]:
    """The first `max_length` characters."""
    return (checks.text(texts, "texts")[:checks.integer(max_length, "max_length", 1)],)


@v3_node("AddTextPrefix", display_name="Add Text Prefix (DEPRECATED)", category="text", python_module=MODULE,
         experimental=True, deprecated=True, description="Add a prefix to all texts.",
         inputs=[_TEXT, String("prefix", default="", tooltip="Prefix to add.")], outputs=[_TEXTS])
def add_text_prefix(texts: str, prefix: str) -> tuple[str]:
    return (checks.text(prefix, "prefix") + checks.text(texts, "texts"),)


@v3_node("AddTextSuffix", display_name="Add Text Suffix (DEPRECATED)", category="text", python_module=MODULE,
         experimental=True, deprecated=True, description="Add a suffix to all texts.",
         inputs=[_TEXT, String("suffix", default="", tooltip="Suffix to add.")], outputs=[_TEXTS])
def add_text_suffix(texts: str, suffix: str) -> tuple[str]:
    return (checks.text(texts, "texts") + checks.text(suffix, "suffix"),)


@v3_node("ReplaceText", display_name="Replace Text (DEPRECATED)", category="text", python_module=MODULE,
         experimental=True, deprecated=True, description="Replace text in all texts.",
         inputs=[_TEXT, String("find", default="", tooltip="Text to find."),
                 String("replace", default="", tooltip="Text to replace with.")], outputs=[_TEXTS])
def replace_text(texts: str, find: str, replace: str) -> tuple[str]:
    """Every occurrence of `find` replaced (Python's `str.replace`: an empty `find` inserts
    `replace` between all characters)."""
    return (checks.text(texts, "texts").replace(checks.text(find, "find"), checks.text(replace, "replace")),)


@v3_node("StripWhitespace", display_name="Strip Whitespace (DEPRECATED)", category="text", python_module=MODULE,
         experimental=True, deprecated=True, description="Strip leading and trailing whitespace from all texts.",
         inputs=[_TEXT], outputs=[_TEXTS])
def strip_whitespace(texts: str) -> tuple[str]:
    return (checks.text(texts, "texts").strip(),)


@v3_node("MergeTextLists", display_name="Merge Text Lists (DEPRECATED)", category="text", python_module=MODULE,
         experimental=True, deprecated=True, input_is_list=True, description="Concatenate multiple text lists into one.",
         inputs=[String("texts", tooltip="List of texts to process.")], outputs=[_TEXTS])
def merge_text_lists(texts: list) -> tuple[list]:
    """Every incoming text, in order, as one list value."""
    for index, text in enumerate(texts):
        if not isinstance(text, str):
            raise NodeInputError("texts", "a list of STRINGs", f"item {index}: {describe(text)}")
    return (list(texts),)
