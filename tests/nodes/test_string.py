"""The string nodes (ComfyUI's nodes_string.py): each operation on hand-checked examples,
ComfyUI's handling of bad patterns, and typed errors."""
from __future__ import annotations

import pytest

from nodes.errors import NodeInputError
from nodes.string import (
    case_converter,
    regex_extract,
    regex_match,
    regex_replace,
    string_compare,
    string_concatenate,
    string_contains,
    string_length,
    string_replace,
    string_substring,
    string_trim,
)


def test_concatenate_substring_length():
    assert string_concatenate("a", "b", ", ") == ("a, b",)
    assert string_concatenate("a", "", "") == ("a",)
    assert string_substring("Hello World", 0, 5) == ("Hello",)
    assert string_substring("Hello World", -5, -1) == ("Worl",)
    assert string_substring("Hello", 4, 1) == ("",)
    assert string_length("straße ǅ") == (8,)


@pytest.mark.parametrize("mode, expected", [("UPPERCASE", "HELLO WORLD-X"), ("lowercase", "hello world-x"),
                                            ("Capitalize", "Hello world-x"), ("Title Case", "Hello World-X")])
def test_case_converter(mode, expected):
    assert case_converter("hELLO world-x", mode) == (expected,)


@pytest.mark.parametrize("mode, expected", [("Both", "a b"), ("Left", "a b \n"), ("Right", " \t a b")])
def test_trim(mode, expected):
    assert string_trim(" \t a b \n", mode) == (expected,)


def test_replace_contains_compare():
    assert string_replace("a-b-c", "-", "+") == ("a+b+c",)
    assert string_replace("ab", "", "|") == ("|a|b|",)
    assert string_contains("Hello", "ELL", True) == (False,)
    assert string_contains("Hello", "ELL", False) == (True,)
    assert string_compare("Hello", "he", "Starts With", False) == (True,)
    assert string_compare("Hello", "he", "Starts With", True) == (False,)
    assert string_compare("Hello", "LO", "Ends With", False) == (True,)
    assert string_compare("abc", "abc", "Equal", True) == (True,)


def test_regex_match_flags_and_bad_patterns():
    assert regex_match("line1\nLine2", "^line2", True, True, False) == (True,)
    assert regex_match("line1\nLine2", "^line2", True, False, False) == (False,)
    assert regex_match("a\nb", "a.b", False, False, True) == (True,)
    assert regex_match("anything", "[", True, False, False) == (False,)  # ComfyUI: an invalid pattern never matches


@pytest.mark.parametrize("mode, group, expected", [
    ("First Match", 0, "l1 = 10"),
    ("All Matches", 0, "l\nl"),           # with groups: the first group of each match
    ("First Group", 2, "10"),
    ("First Group", 3, ""),                # no such group
    ("All Groups", 2, "10\n20"),
    ("All Groups", 0, "l1 = 10\nl2 = 20"),
])
def test_regex_extract_modes(mode, group, expected):
    assert regex_extract("l1 = 10, l2 = 20", r"(l)\d = (\d+)", mode, False, False, False, group) == (expected,)


def test_regex_extract_without_groups_and_with_a_bad_pattern():
    assert regex_extract("a1 b22", r"\d+", "All Matches", True, False, False, 1) == ("1\n22",)
    assert regex_extract("a1", "(", "First Match", True, False, False, 1) == ("",)
    # A group that did not take part: None from "First Group" (as ComfyUI), "" inside "All Groups".
    assert regex_extract("b", "(x)|(b)", "First Group", True, False, False, 1) == (None,)
    assert regex_extract("b b", "(x)|(b)", "All Groups", True, False, False, 1) == ("\n",)


def test_regex_replace_count_backreferences_and_errors():
    assert regex_replace("a1 b2 c3", r"(\w)(\d)", r"\2\1") == ("1a 2b 3c",)
    assert regex_replace("a1 b2 c3", r"\d", "#", count=2) == ("a# b# c3",)
    assert regex_replace("ABC abc", "abc", "x", case_insensitive=False) == ("ABC x",)
    assert regex_replace("a\nb", "a.b", "x", dotall=True) == ("x",)
    with pytest.raises(NodeInputError) as info:
        regex_replace("a", "[", "x")
    assert info.value.input_name == "regex_pattern"
    with pytest.raises(NodeInputError) as info:
        regex_replace("a", "(a)", r"\2")
    assert info.value.input_name == "replace"


def test_non_strings_are_refused():
    with pytest.raises(NodeInputError) as info:
        string_length(5)
    assert info.value.input_name == "string"
    with pytest.raises(NodeInputError):
        case_converter("a", "SHOUT")
