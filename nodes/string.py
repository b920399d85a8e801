"""String nodes of ComfyUI's comfy_extras/nodes_string.py (0.3.64): StringConcatenate,
StringSubstring, StringLength, CaseConverter, StringTrim, StringReplace, StringContains,
StringCompare, RegexMatch, RegexExtract, RegexReplace.

ComfyUI's names, sockets and semantics, written here on Python's `str` and `re`. Where ComfyUI
swallows a bad pattern (RegexMatch: no match, RegexExtract: ""), so does this; RegexReplace
raises there, as in ComfyUI, but naming the input.
"""
from __future__ import annotations

import re
from typing import Any

from graph.native import Boolean, Combo, Int, Output, node
from graph.spec import OPTIONAL, REQUIRED, InputSpec
import nodes.checks as checks
from nodes.errors import NodeInputError, describe

MODULE = "comfy_extras.nodes_string"
CATEGORY = "utils/string"
CASE_MODES = ["UPPERCASE", "lowercase", "Capitalize", "Title Case"]
TRIM_MODES = ["Both", "Left", "Right"]
COMPARE_MODES = ["Starts With", "Ends With", "Equal"]
EXTRACT_MODES = ["First Match", "All Matches", "First Group", "All Groups"]
# RegexExtract joins several results with newlines.
_JOIN = "\n"


def Text(name: str, *, multiline: bool = True, **options: Any) -> InputSpec:
    """A STRING widget as ComfyUI's V3 `io.String.Input`: `multiline` always stated, no default
    unless given (the editor then starts it empty)."""
    return InputSpec(name, "STRING", REQUIRED, {"multiline": multiline, **options})


def _text(value: Any, input_name: str) -> str:
    if not isinstance(value, str):
        raise NodeInputError(input_name, "a STRING", describe(value))
    return value


def _flags(case_insensitive: bool, multiline: bool, dotall: bool) -> int:
    return ((re.IGNORECASE if case_insensitive else 0) | (re.MULTILINE if multiline else 0)
            | (re.DOTALL if dotall else 0))


@node("StringConcatenate", category=CATEGORY, display_name="Concatenate", python_module=MODULE,
      inputs=[Text("string_a"), Text("string_b"), Text("delimiter", multiline=False, default="")],
      outputs=[Output("STRING")])
def string_concatenate(string_a: str, string_b: str, delimiter: str) -> tuple[str]:
    """string_a + delimiter + string_b."""
    return (_text(delimiter, "delimiter").join((_text(string_a, "string_a"), _text(string_b, "string_b"))),)


@node("StringSubstring", category=CATEGORY, display_name="Substring", python_module=MODULE,
      inputs=[Text("string"), InputSpec("start", "INT", REQUIRED, {}), InputSpec("end", "INT", REQUIRED, {})],
      outputs=[Output("STRING")])
def string_substring(string: str, start: int, end: int) -> tuple[str]:
    """`string[start:end]`, Python's slice: negative positions count from the end."""
    for name, value in (("start", start), ("end", end)):
        if isinstance(value, bool) or not isinstance(value, int):
            raise NodeInputError(name, "an INT", repr(value))
    return (_text(string, "string")[start:end],)


@node("StringLength", category=CATEGORY, display_name="Length", python_module=MODULE,
      inputs=[Text("string")], outputs=[Output("INT", "length")])
def string_length(string: str) -> tuple[int]:
    """The number of characters (code points)."""
    return (len(_text(string, "string")),)


@node("CaseConverter", category=CATEGORY, display_name="Case Converter", python_module=MODULE,
      inputs=[Text("string"), Combo("mode", CASE_MODES)], outputs=[Output("STRING")])
def case_converter(string: str, mode: str) -> tuple[str]:
    """Python's upper(), lower(), capitalize() or title()."""
    string = _text(string, "string")
    convert = {"UPPERCASE": str.upper, "lowercase": str.lower, "Capitalize": str.capitalize,
               "Title Case": str.title}[checks.choice(mode, CASE_MODES, "mode")]
    return (convert(string),)


@node("StringTrim", category=CATEGORY, display_name="Trim", python_module=MODULE,
      inputs=[Text("string"), Combo("mode", TRIM_MODES)], outputs=[Output("STRING")])
def string_trim(string: str, mode: str) -> tuple[str]:
    """Whitespace removed from both ends, the left or the right."""
    string = _text(string, "string")
    trim = {"Both": str.strip, "Left": str.lstrip, "Right": str.rstrip}[checks.choice(mode, TRIM_MODES, "mode")]
    return (trim(string),)


@node("StringReplace", category=CATEGORY, display_name="Replace", python_module=MODULE,
      inputs=[Text("string"), Text("find"), Text("replace")], outputs=[Output("STRING")])
def string_replace(string: str, find: str, replace: str) -> tuple[str]:
    """Every occurrence of `find` replaced (an empty `find` inserts `replace` between all characters)."""
    return (_text(string, "string").replace(_text(find, "find"), _text(replace, "replace")),)


@node("StringContains", category=CATEGORY, display_name="Contains", python_module=MODULE,
      inputs=[Text("string"), Text("substring"), Boolean("case_sensitive", default=True)],
      outputs=[Output("BOOLEAN", "contains")])
def string_contains(string: str, substring: str, case_sensitive: bool) -> tuple[bool]:
    """Whether `substring` occurs in `string` (ignoring case by lower() when not case_sensitive)."""
    string, substring = _text(string, "string"), _text(substring, "substring")
    if not case_sensitive:
        string, substring = string.lower(), substring.lower()
    return (substring in string,)


@node("StringCompare", category=CATEGORY, display_name="Compare", python_module=MODULE,
      inputs=[Text("string_a"), Text("string_b"), Combo("mode", COMPARE_MODES),
              Boolean("case_sensitive", default=True)],
      outputs=[Output("BOOLEAN")])
def string_compare(string_a: str, string_b: str, mode: str, case_sensitive: bool) -> tuple[bool]:
    """Whether string_a starts with, ends with or equals string_b."""
    a, b = _text(string_a, "string_a"), _text(string_b, "string_b")
    mode = checks.choice(mode, COMPARE_MODES, "mode")
    if not case_sensitive:
        a, b = a.lower(), b.lower()
    if mode == "Equal":
        return (a == b,)
    return (a.startswith(b) if mode == "Starts With" else a.endswith(b),)


@node("RegexMatch", category=CATEGORY, display_name="Regex Match", python_module=MODULE,
      inputs=[Text("string"), Text("regex_pattern"), Boolean("case_insensitive", default=True),
              Boolean("multiline", default=False), Boolean("dotall", default=False)],
      outputs=[Output("BOOLEAN", "matches")])
def regex_match(string: str, regex_pattern: str, case_insensitive: bool, multiline: bool, dotall: bool) -> tuple[bool]:
    """Whether the pattern matches anywhere (`re.search`); an invalid pattern matches nothing."""
    string, pattern = _text(string, "string"), _text(regex_pattern, "regex_pattern")
    try:
        return (re.search(pattern, string, _flags(case_insensitive, multiline, dotall)) is not None,)
    except re.error:
        return (False,)


def extract(string: str, pattern: str, mode: str, flags: int, group_index: int) -> str | None:
    """RegexExtract's result: the first match, all matches (for patterns with groups, the first
    group of each), the first match's group `group_index`, or that group of every match that has
    it, several joined by newlines; "" when nothing qualifies."""
    if mode == "First Match":
        match = re.search(pattern, string, flags)
        return match.group(0) if match else ""
    if mode == "All Matches":
        found = re.findall(pattern, string, flags)
        return _JOIN.join(item[0] if isinstance(item, tuple) else item for item in found)
    if mode == "First Group":
        match = re.search(pattern, string, flags)
        return match.group(group_index) if match and len(match.groups()) >= group_index else ""
    # A group that took no part in a match is None; joined as "" (ComfyUI fails on it).
    groups = [match.group(group_index) or "" for match in re.finditer(pattern, string, flags)
              if match.groups() and len(match.groups()) >= group_index]
    return _JOIN.join(groups)


@node("RegexExtract", category=CATEGORY, display_name="Regex Extract", python_module=MODULE,
      inputs=[Text("string"), Text("regex_pattern"), Combo("mode", EXTRACT_MODES),
              Boolean("case_insensitive", default=True), Boolean("multiline", default=False),
              Boolean("dotall", default=False), Int("group_index", default=1, min=0, max=100)],
      outputs=[Output("STRING")])
def regex_extract(string: str, regex_pattern: str, mode: str, case_insensitive: bool, multiline: bool,
                  dotall: bool, group_index: int) -> tuple[str | None]:
    """Text the pattern finds (see `extract`); an invalid pattern gives ""."""
    string, pattern = _text(string, "string"), _text(regex_pattern, "regex_pattern")
    mode = checks.choice(mode, EXTRACT_MODES, "mode")
    if isinstance(group_index, bool) or not isinstance(group_index, int) or group_index < 0:
        raise NodeInputError("group_index", "an int >= 0", repr(group_index))
    try:
        found = extract(string, pattern, mode, _flags(case_insensitive, multiline, dotall), group_index)
    except re.error:
        found = ""
    # "First Group" of a group that took no part in the match gives None, as in ComfyUI.
    return (found,)


@node("RegexReplace", category=CATEGORY, display_name="Regex Replace", python_module=MODULE,
      description="Find and replace text using regex patterns.",
      inputs=[Text("string"), Text("regex_pattern"), Text("replace"),
              Boolean("case_insensitive", default=True, optional=True),
              Boolean("multiline", default=False, optional=True),
              Boolean("dotall", default=False, optional=True,
                      tooltip="When enabled, the dot (.) character will match any character including newline "
                              "characters. When disabled, dots won't match newlines."),
              InputSpec("count", "INT", OPTIONAL, {
                  "default": 0, "min": 0, "max": 100,
                  "tooltip": "Maximum number of replacements to make. Set to 0 to replace all occurrences "
                             "(default). Set to 1 to replace only the first match, 2 for the first two "
                             "matches, etc."})],
      outputs=[Output("STRING")])
def regex_replace(string: str, regex_pattern: str, replace: str, case_insensitive: bool = True,
                  multiline: bool = False, dotall: bool = False, count: int = 0) -> tuple[str]:
    """`re.sub`: matches replaced by `replace` (backreferences like \\1 allowed), at most `count`
    of them (0: all)."""
    string, pattern, replace = _text(string, "string"), _text(regex_pattern, "regex_pattern"), _text(replace, "replace")
    if isinstance(count, bool) or not isinstance(count, int) or count < 0:
        raise NodeInputError("count", "an int >= 0", repr(count))
    flags = _flags(case_insensitive, multiline, dotall)
    try:
        compiled = re.compile(pattern, flags)
    except re.error as exc:
        raise NodeInputError("regex_pattern", "a valid regular expression", f"{pattern!r} ({exc})") from exc
    try:
        return (compiled.sub(replace, string, count=count),)
    except re.error as exc:  # a bad group reference in the replacement
        raise NodeInputError("replace", "a replacement whose group references exist", f"{replace!r} ({exc})") from exc
